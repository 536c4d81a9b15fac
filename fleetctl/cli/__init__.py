"""The command line: click commands only (parse, call the engine, hand results to reporters).

One module per command family, each registering its commands on :data:`main`; a module is
imported when its command runs (:data:`fleetctl.cli.app.COMMAND_MODULES`), so ``fleetctl run``
never loads what ``deploy`` or ``schedule`` need.
"""

from __future__ import annotations

from .app import EXIT_BAD_INPUT, EXIT_FAILED, Context, fail_input, main

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "Context", "fail_input", "main"]
