"""The command line: click commands only (parse, call the engine, hand results to reporters).

One module per command family; importing this package registers them all on :data:`main`.
"""

from __future__ import annotations

from . import adhoc, inventory, play, report, rollback, runs, schedule  # noqa: F401  (register the commands)
from .app import EXIT_BAD_INPUT, EXIT_FAILED, Context, fail_input, main

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "Context", "fail_input", "main"]
