"""``-v``/``-vv``: the run's events as structlog diagnostics on stderr.

``-v`` shows host, batch and task events (``task.finished host=gpu01 status=changed ...``); ``-vv``
adds every command started and finished and every planned step. Without ``-v`` nothing is added
(the terminal output and the run record are unchanged either way).
"""

from __future__ import annotations

from typing import Any

import structlog

_DEBUG = frozenset({"command.started", "command.finished", "step.planned", "progress.updated"})


class Diagnostics:
    """An observer logging events through structlog (configured by :mod:`fleetctl.reporting.logsetup`)."""

    def __init__(self, verbosity: int) -> None:
        self.verbosity = verbosity
        self.log = structlog.get_logger("fleetctl")

    def event(self, run: Any, event: Any) -> None:
        data = run.redactor.obj(dict(event.data))
        fields = {"host": event.host, **data} if event.host else data
        if event.name in _DEBUG:
            if self.verbosity >= 2:
                self.log.debug(event.name, **fields)
        else:
            self.log.info(event.name, **fields)
