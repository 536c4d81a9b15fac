"""Deadlines: one per phase, seconds, honoured by every step of every task in that phase.

A task's deadline is, in order of precedence: ``--phase-timeout PHASE=S`` for its action's phase,
the task's own ``timeout``, the action's default (:attr:`fleetctl.tasks.base.Action.timeout_s`).
``connect`` and ``facts`` are the engine's own phases. A deadline covers the whole task (all its
steps, retries excluded: each attempt gets a fresh one); a step gets what is left of it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import CommandTimeout, host_message

#: Seconds early asyncio may fire a timer (its loop's clock resolution, ``time.get_clock_info``;
#: nanoseconds on Linux): a step capped at what was left of a deadline that fired this early still
#: ran the deadline out (:meth:`Clock.ran_out`).
TIMER_SLACK_S = 0.01

#: Default deadlines of the engine's own phases, seconds.
CONNECT_TIMEOUT_S = 30.0
FACTS_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Deadlines:
    """Per-phase deadline overrides (``--phase-timeout``), seconds.

    Attributes:
        overrides: phase -> seconds; phases not named use the task's or the default.
        connect_s: deadline for reaching and logging in to a host.
        facts_s: deadline for gathering facts.
    """

    overrides: Mapping[str, float] = field(default_factory=dict)
    connect_s: float = CONNECT_TIMEOUT_S
    facts_s: float = FACTS_TIMEOUT_S

    def __post_init__(self) -> None:
        # imported here: the tasks package loads every action (pydantic), which `fleetctl run`'s
        # path, reading only the default deadlines above, never needs (tests/test_settings_model.py)
        from ..tasks.base import PHASES

        unknown = set(self.overrides) - set(PHASES)
        if unknown:
            raise ValueError(f"unknown phase {sorted(unknown)[0]!r}; phases: {', '.join(PHASES)}")

    def for_phase(self, phase: str, task_timeout_s: float) -> float:
        """Seconds a task of ``phase`` whose own timeout is ``task_timeout_s`` may take."""
        return float(self.overrides.get(phase, task_timeout_s))

    @property
    def connect(self) -> float:
        return float(self.overrides.get("connect", self.connect_s))

    @property
    def facts(self) -> float:
        return float(self.overrides.get("facts", self.facts_s))


class Clock:
    """One running deadline: ``remaining()`` seconds, or CommandTimeout once it has passed."""

    def __init__(self, host: str, seconds: float) -> None:
        self.host = host
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def remaining(self, argv: list[str] | None = None) -> float:
        """Seconds left (> 0).

        Raises:
            CommandTimeout: the deadline has passed.
        """
        left = self._end - time.monotonic()
        if left <= 0:
            raise CommandTimeout(self.host, list(argv or ["(task)"]), self.seconds)
        return left

    def cap(self, step_timeout_s: float | None, argv: list[str] | None = None) -> float:
        """A step's timeout: its own, capped at what is left of the deadline."""
        left = self.remaining(argv)
        return min(step_timeout_s, left) if step_timeout_s else left

    def ran_out(self) -> bool:
        """Whether the deadline has passed (within :data:`TIMER_SLACK_S`): a step stopped now was
        stopped by it, not by a shorter limit of its own."""
        return time.monotonic() >= self._end - TIMER_SLACK_S


def timeout_message(host: str, exc: BaseException, clock: Clock, stall: str | None) -> str:
    """One line for a task stopped by a time limit, whose first number is the seconds it waited.

    The task's deadline (``clock``) ran out: ``timed out after S s`` (``S``: the deadline, the
    task's whole time). A step's own, shorter limit fired first (a :class:`CommandTimeout` with
    the deadline not yet out: a probe's 120 s, a class wheel's ``mkdir`` 60 s): that command's own
    line, ``command timed out after 60 s: mkdir``, never the task's deadline (an operator trial:
    "timed out after 7200 s" for a host that failed 60 s into its build, its login shell hung).
    ``stall``: why the login shell never started the command (:meth:`Connection.login_stall`), or
    ``None``; a :class:`CommandTimeout` carries its own."""
    if isinstance(exc, CommandTimeout) and not clock.ran_out():
        return host_message(host, exc)
    return f"timed out after {clock.seconds:g} s" + (f": {stall}" if stall else "")
