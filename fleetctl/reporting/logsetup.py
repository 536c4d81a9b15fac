"""structlog configuration for diagnostics on stderr (the run record has its own JSON events).

Console rendering when stderr is a terminal, JSON lines otherwise, so unattended runs (timers,
cron) produce machine-readable diagnostics.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(verbosity: int = 0) -> None:
    """Set up structlog: WARNING by default, INFO with ``-v``, DEBUG with ``-vv``."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    renderer = (structlog.dev.ConsoleRenderer(colors=True) if sys.stderr.isatty()
                else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
