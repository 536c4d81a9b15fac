"""The life of one run record, shared by the API and the CLI: open it (:func:`new_run`), close it
(:func:`finish_run`), and close it as ``interrupted`` whatever escapes (:func:`guarded_async`).

A run opened here writes ``<state>/runs/<run_id>/`` (:class:`fleetctl.reporting.record.RunRecord`),
so ``fleetctl runs`` lists API runs and CLI runs alike.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def warn(message: str) -> None:
    """One ``fleetctl: warning: MESSAGE`` line on stderr (the CLI's warnings, the API's too)."""
    print(f"fleetctl: warning: {message}", file=sys.stderr, flush=True)


def who() -> dict[str, object]:
    """Who runs this, for the run record: ``user``, ``controller`` (host name), ``controller_pid``,
    ``controller_start`` (Linux clock ticks since boot, or None)."""
    import getpass
    import os
    import socket

    from ..reporting.history import process_start

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return {"user": user, "controller": socket.gethostname(), "controller_pid": os.getpid(),
            "controller_start": process_start(os.getpid())}


def diagnostics(verbose: int) -> Any:
    """The -v/-vv observer (diagnostics on stderr), or None for ``verbose <= 0``."""
    if verbose <= 0:
        return None
    from ..reporting.diagnostics import Diagnostics
    from ..reporting.logsetup import configure_logging

    configure_logging(verbose)
    return Diagnostics(verbose)


def new_run(kind: str, *, command: Sequence[str], observers: Iterable[Any] = (), verbose: int = 0,
            secrets: Iterable[str] = ()):
    """A new run model with its record and the -v observer.

    Args:
        kind: ``deploy``, ``verify``, ``rollback``, ``facts`` or ``run``.
        command: what started the run, as argv (the CLI's command line; ``["fleetctl.api", ...]``).
        observers: more observers (None entries are left out), after the record.
        verbose: the -v level (0: none).
        secrets: more secret values to mask wherever the run writes or prints them, from the
            first line on: the CLI's ``-e`` secrets (:func:`fleetctl.util.redact.unwrap`), which the
            recorded ``command`` holds.

    Returns:
        ``(run, record, observers)``: the :class:`~fleetctl.engine.model.RunModel`, its
        :class:`~fleetctl.reporting.record.RunRecord`, and the
        :class:`~fleetctl.engine.observer.Observers` to hand the engine.

    Raises:
        InputError: a bad FLEETCTL_KEEP_RUNS/DAYS or FLEETCTL_MAX_HANDSHAKES, an empty or
            unknown string-valued FLEETCTL_* variable (:mod:`fleetctl.util.envvars`), or a runs folder that cannot be written (before
            anything runs).
    """
    from ..engine.model import RunModel
    from ..engine.observer import Observers
    from ..reporting.order import stamp
    from ..reporting.record import RunRecord
    from ..util.envvars import check_strings, max_handshakes
    from ..util.retention import policy_from_env

    policy_from_env()
    max_handshakes()  # FLEETCTL_MAX_HANDSHAKES=0 would hold every SSH login forever
    check_strings()  # FLEETCTL_SLURM_LAUNCHER="" would run the Slurm tools here, silently
    run = RunModel(kind=kind, command=list(command), **who())
    run.redactor.add(secrets)
    record = RunRecord(run)
    stamp(record.dir, record.dir.parent)  # its place in the order records are made (reporting.order)
    return run, record, Observers(run, [record, diagnostics(verbose), *observers])


def finish_run(run, observers, status: str) -> None:
    """Close the run: status, end time, observers flushed (an ``interrupted`` run first records
    each host still running as ``interrupted``, or ``not started`` when it had not started:
    :func:`fleetctl.engine.outcomes.interrupt_rest`, and puts them in ``failed_hosts``, the retry
    set); then the record takes its place in the order runs ended (:func:`fleetctl.reporting.order.stamp_end`:
    this run is now the newest of its class) and the run records past the
    retention policy are pruned (:mod:`fleetctl.reporting.prune`; never this run, never one in
    progress; a record that cannot be removed is a warning on stderr, the run's status stands)."""
    from ..engine.model import utc_now
    from ..errors import InputError
    from ..reporting.history import runs_root
    from ..reporting.order import stamp_end
    from ..reporting.prune import prune_runs
    from ..util.retention import policy_from_env

    if status == "interrupted":  # no host of an ended run stays "running"
        from ..engine.outcomes import interrupt_rest

        interrupt_rest(run, observers)
        run.failed_hosts = list(dict.fromkeys([*run.failed_hosts,
                                               *(h for h, o in run.hosts.items() if o.status != "ok")]))
    run.status, run.finished = status, utc_now()
    observers.emit("run.finished", status=status)
    observers.close()
    try:
        root = runs_root()
        if (root / run.run_id).is_dir():
            stamp_end(root / run.run_id)
        pruned = prune_runs(policy_from_env(), root=root, spare=frozenset({run.run_id}))
    except (InputError, OSError) as exc:
        warn(f"run records not pruned: {exc}")
        return
    for error in pruned.errors:
        warn(f"cannot prune the run record {error}")
    if pruned.warning:
        warn(pruned.warning)


async def guarded_async(run, observers, work: Awaitable[T], hosts: Sequence[Any] = ()) -> T:
    """Await ``work``; whatever escapes it (cancellation: Ctrl-C, SIGTERM; a bug) first marks the
    run ``interrupted`` so that no run stays ``running`` forever, then goes on up. Every host of
    ``hosts`` (the hosts the run was for, each with ``.name``) the run never got to is recorded
    ``not started`` then (:func:`fleetctl.engine.outcomes.not_started`), as a deploy records
    them: a record lists every selected host (operator trial: an ad-hoc ``run`` interrupted 0.3 s
    in listed 1 of its 4 hosts, or none)."""
    try:
        return await work
    except BaseException:
        if run.status == "running":
            from ..engine.outcomes import not_started

            not_started(run, hosts, "the run was interrupted before this host started")
            if hosts:  # in the selection's order, as a finished run lists them
                order = {h.name: i for i, h in enumerate(hosts)}
                kept = sorted(run.hosts.items(), key=lambda kv: order.get(kv[0], len(order)))
                run.hosts.clear()
                run.hosts.update(kept)
            finish_run(run, observers, "interrupted")
        raise
