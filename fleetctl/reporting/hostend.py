"""How a host's log ends: its outcome line (``==> host OK: rc=0``), written by the run record
(:mod:`fleetctl.reporting.record`)."""

from __future__ import annotations

from ..util.retention import AD_HOC_KINDS


def cause_missing(kind: str, data: dict, *, logged: bool) -> bool:
    """Whether a finished host's log lacks the cause of its end (``data``: its ``host.finished``
    event; ``logged``: its log holds a failed task's line): an unreachable host whose log does not
    name it yet (no task ended ``UNREACHABLE`` there: the connection was refused, the host key did
    not match, the login was refused before any task; its log held nothing, operator's trial), in
    any run; in a playbook run (whose logs mark each task's result with ``==> ``), a host that
    failed outside any task (facts, planning, its lock: ``fleetctl logs RUN HOST`` named a log
    without a word of why). An ad hoc run's ok or failed host's log ends with its outcome line
    instead (:func:`host_outcome`)."""
    if not data.get("error") or logged:
        return False
    return data.get("status") == "unreachable" or (data.get("status") == "failed" and kind not in AD_HOC_KINDS)

def host_outcome(kind: str, data: dict) -> str:
    """The last line of an ad hoc run's host log (``run``, ``facts``, ``copy``, ``fetch``; after its
    ``==> ``), from the host's ``host.finished`` event: its status and how it ended, as run.json has
    them, so that ``fleetctl logs RUN HOST`` says how the host ended for every kind as a deploy's
    logs do (operator's trial: only its output lines, or nothing at all for facts). ``host OK: rc=0``,
    ``host FAILED: rc=3`` (``run``; a signal's or a missing command's cause instead when it has one);
    ``host OK: 2 files, 10 bytes`` (``copy``, ``fetch``); ``host OK`` (``facts``); ``host FAILED:
    CAUSE`` for any kind. Also the last line of a host that failed outside any task in a playbook
    run, and of an unreachable host in any run: ``host UNREACHABLE: CAUSE``, the cause as run.json
    has it (``Connection refused``, a host key mismatch, a refused login)."""
    status = str(data.get("status")).upper()
    how = data.get("error")
    if not how and kind == "run" and data.get("rc") is not None:
        how = f"rc={data.get('rc')}"
    elif not how and kind in ("copy", "fetch") and data.get("files") is not None:
        how = f"{data.get('files')} files, {data.get('bytes') or 0} bytes"
    return f"host {status}: " + " ".join(str(how).splitlines()) if how else f"host {status}"
