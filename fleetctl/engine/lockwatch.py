"""Is the host's deploy lock still this run's? What a host's result says when it is not.

The deploy lock (:mod:`fleetctl.engine.hostlock`, :mod:`fleetctl.engine.session_start`) is held
by a process on the host for the whole run. It can be lost while the run goes on: someone kills
that process (``kill``, an OOM kill), or the lock file is removed and made anew, or rewritten, by
another controller (the process reads the file every 3 s and ends once it no longer names it).
Its command then ends before the run lets go of it, which the controller sees for free (no
command is sent while the lock holds: an unchanged deploy stays one exec per host); only then is
the lock file read, once, to learn who holds it now.

What the host's result says (new-user trial: such a host ended ``ok`` without a word):

- another run holds the lock now (the file names another run id): the host **fails**. That run
  deploys this host at the same time as this one, which is what the lock exists to prevent: it
  may be building in the same workdir or installing into the same venv, so this run's install
  and verify vouch for nothing, and the host is left to the run that holds the lock. Failing
  puts the host in this run's retry set and its cause in front of the operator; a retry is
  refused while the other run holds the lock, as it should be. Checked before each install-phase
  task too (:func:`lock_loss`), so this run never installs while another run holds the lock;
- nobody holds it (the process was killed and the file still names this run or is empty, or the
  file is gone): the host's result stands, with a **warning** line (in the run record's
  ``warnings`` and as a note): for part of the run another controller could have deployed here,
  and nothing shows one did. Failing a host whose work is done and checked would send the
  operator after a fault that is not there.

A lock that ends in the last seconds of a run (between two reads of the file) is seen only if its
process ended; a takeover that late is caught by the next run, which finds the lock held.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import FleetError, HostUnreachable
from .hostlock import parse_holder
from .model import TaskOutcome, utc_now
from .session import HostSession

#: Prints the lock file (at most 4 KiB); nothing when it is not there.
_READ = 'head -c 4096 -- "$1" 2>/dev/null; true'


@dataclass(frozen=True)
class LockLoss:
    """The deploy lock of this run was lost on the host.

    Attributes:
        message: one line: what ended, and who holds the lock now.
        holder: the record of the run that holds the lock now (``run_id``, ``controller``,
            ``pid``, ``user``, ``started``), or ``None`` when no other run does.
    """

    message: str
    holder: dict | None = field(default=None)

    @property
    def fails(self) -> bool:
        """Another run holds the lock: the host fails (see the module docstring)."""
        return self.holder is not None


async def lock_loss(session: HostSession) -> LockLoss | None:
    """Whether ``session``'s deploy lock was lost (see the module docstring), decided once per
    host: ``None`` while it holds, or without a lock. Reads the lock file (one command) only when
    the lock's process has ended."""
    if session.lock_loss is not None:
        return session.lock_loss
    lock = session.lock
    how = lock.ended() if lock is not None else None
    if how is None:
        return None
    path = lock.lock_path
    try:
        res = await session.conn.run(["/bin/sh", "-c", _READ, "fleetctl-lock-read", path], timeout_s=30)
        now = parse_holder(res.stdout_text) if res.rc == 0 else {}
        seen = "" if res.rc == 0 else f" (cannot read it: exit {res.rc})"
    except (HostUnreachable, FleetError) as exc:
        now, seen = {}, f" (cannot read it: {exc})"
    what = f"the deploy lock {path} was lost during the run: its process on the host ended ({how})"
    other = now.get("run_id")
    if other and other != session.run_id:
        who = (f"run {other} (controller {now.get('controller', '?')}, pid {now.get('pid', '?')}, "
               f"user {now.get('user', '?')}, started {now.get('started', '?')})")
        loss = LockLoss(f"{what}, and {who} holds it now: it deploys this host at the same time, so this run's "
                        "result on it cannot be trusted; deploy again once that run is done", now)
    else:
        loss = LockLoss(f"{what}{seen}; no other run holds it now, but for part of this run another "
                        "controller could have deployed here")
    session.lock_loss = loss
    return loss


async def settle(session: HostSession, result: Any, observers: Any) -> Any:
    """The host's :class:`~fleetctl.engine.host.HostPass` once its run is done, with what a lost
    deploy lock means for it (see the module docstring): failed, with a ``deploy lock`` outcome,
    when another run holds the lock; else a warning line (``warnings``, and a note)."""
    loss = await lock_loss(session)
    if loss is None:
        return result
    if not loss.fails:
        observers.emit("note.added", session.name, message=loss.message)
        return replace(result, warnings=[*result.warnings, loss.message])
    observers.emit("lock.lost", session.name, message=loss.message, holder=loss.holder)
    if loss.message in (result.error or ""):  # an install it stopped said so already
        return result
    outcome = TaskOutcome(name="deploy lock", action="lock", phase="connect", status="failed", msg=loss.message,
                          start=utc_now())
    if result.status != "ok":  # failed already: its cause stays the host's error
        return replace(result, outcomes=[*result.outcomes, outcome])
    return replace(result, outcomes=[*result.outcomes, outcome], status="failed",
                   error=f"deploy lock: {loss.message}")
