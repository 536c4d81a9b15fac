"""Ad-hoc runs (``run``: one argv on every host; ``facts``), the CLI's and the API's one path:
open the record, run the engine (:mod:`fleetctl.engine.adhoc`), close the record."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import InputError
from .lifecycle import finish_run, guarded_async, new_run


async def run_command(hosts: Sequence[Any], argv: Sequence[str], *, pattern: str, command: Sequence[str],
                      observers: Iterable[Any] = (), verbose: int = 0, forks: int = 50, timeout_s: float = 600.0,
                      connect_timeout_s: float = 30.0, accept_new_host_keys: bool = False,
                      ssh_options: Sequence[str] = (), outputs: dict[str, tuple[str, str]] | None = None,
                      secrets: Iterable[str] = ()):
    """Run ``argv`` exactly as given (no shell) on every host and close the run's record.

    Args:
        hosts: the selected inventory hosts.
        argv: the command and its arguments.
        pattern: the host pattern, for the record.
        command: what started the run, for the record.
        observers: observers besides the record.
        verbose: the -v level.
        forks: hosts worked on at once.
        timeout_s: seconds the command may run on each host.
        connect_timeout_s: seconds to reach and log in to one host.
        accept_new_host_keys: record host keys of hosts that have none.
        ssh_options: one-off ssh_config options, ``"Name=value"`` each, checked
            (:func:`fleetctl.connection.ssh_options.parse_options`), as ``fleetctl -o``.
        outputs: a dict to fill with host -> ``(stdout, stderr)`` as each host finishes (None: a
            new one), which keeps what the finished hosts printed when the run is interrupted.
        secrets: more secret values to mask wherever the run writes or prints them, from the
            first line on: the CLI's ``-e`` secrets (:func:`fleetctl.util.redact.unwrap`), which the
            recorded ``command`` holds.

    Returns:
        ``(run, record, outputs)``: the finished run model, its record, and host ->
        ``(stdout, stderr)`` (the last :data:`~fleetctl.engine.adhoc.RUN_CAPTURE_BYTES` of each).

    Raises:
        InputError: the command is empty (no argv, or an empty program name: no host could run
            it, as ``execvp("")`` fails with ENOENT), or the run record cannot be written (before
            anything runs).
    """
    if not argv or not str(argv[0]):
        raise InputError(f"run: the command's program name is empty ({list(argv)!r}): give the program "
                         "to run, e.g. fleetctl run --hosts all -- uname -r")
    from ..engine.adhoc import run_on_hosts
    from ..util.redact import unwrap

    run, record, obs = new_run("run", command=command, observers=observers, verbose=verbose, secrets=secrets)
    run.pattern = pattern
    run.redactor.add(set().union(*(unwrap(h.vars)[1] for h in hosts)))
    outputs = await guarded_async(run, obs, run_on_hosts(
        hosts, list(argv), run=run, observers=obs, forks=forks, timeout_s=timeout_s,
        connect_timeout_s=connect_timeout_s, accept_new_host_keys=accept_new_host_keys, ssh_options=ssh_options,
        outputs=outputs), hosts)
    finish_run(run, obs, "failed" if run.failed_hosts else "ok")
    return run, record, outputs


async def gather_facts(hosts: Sequence[Any], *, pattern: str, command: Sequence[str], observers: Iterable[Any] = (),
                       verbose: int = 0, forks: int = 50, connect_timeout_s: float = 30.0,
                       accept_new_host_keys: bool = False, ssh_options: Sequence[str] = (),
                       phase_timeout: Mapping[str, float] | Iterable[str] | None = None,
                       flags: Mapping[str, str] | None = None, secrets: Iterable[str] = ()):
    """Gather every host's facts and close the run's record.

    Args:
        phase_timeout: per-phase deadlines, seconds, as deploy's ``--phase-timeout``
            (``{"facts": 10}`` or ``["facts=10"]``): ``facts`` limits each host's gathering (default
            :data:`~fleetctl.engine.deadlines.FACTS_TIMEOUT_S`), ``connect`` its connect and login
            (default ``connect_timeout_s``); the other phases have no work here.
        flags: how messages name the arguments (:func:`fleetctl.api.inputs.arg_name`: the CLI
            passes its flags, ``--phase-timeout``; None: ``phase_timeout``).
        secrets: more secret values to mask wherever the run writes or prints them, from the
            first line on: the CLI's ``-e`` secrets (:func:`fleetctl.util.redact.unwrap`), which the
            recorded ``command`` holds.

    Returns:
        ``(run, record)``; each host's outcome holds ``facts`` (a dict, for an unreachable host too) and
        its ``status``/``error``.

    Raises:
        InputError: a bad ``phase_timeout``, or the run record cannot be written (before anything runs).
    """
    from ..engine.adhoc import facts_on_hosts

    limits = {"connect_timeout_s": connect_timeout_s}  # the facts deadline: facts_on_hosts' default
    if phase_timeout is not None:  # deploy's parser and deadlines, imported only when asked (facts stays near the floor)
        from ..engine.deadlines import Deadlines
        from .inputs import arg_name
        from .play import phase_timeouts

        deadlines = Deadlines(overrides=phase_timeouts(phase_timeout, arg_name(flags, "phase_timeout")),
                              connect_s=connect_timeout_s)
        limits = {"connect_timeout_s": deadlines.connect, "timeout_s": deadlines.facts}
    run, record, obs = new_run("facts", command=command, observers=observers, verbose=verbose, secrets=secrets)
    run.pattern = pattern
    await guarded_async(run, obs, facts_on_hosts(hosts, run=run, observers=obs, forks=forks,
                                                 **limits, accept_new_host_keys=accept_new_host_keys,
                                                 ssh_options=ssh_options), hosts)
    finish_run(run, obs, "failed" if run.failed_hosts else "ok")
    return run, record


def facts_document(run: Any) -> dict[str, dict[str, Any]]:
    """host -> what ``fleetctl facts --json`` shows for it (:func:`facts_entry`). Not redacted."""
    return {name: facts_entry(run, name) for name in run.hosts}


def facts_entry(run: Any, host: str) -> dict[str, Any]:
    """What ``fleetctl facts --json`` shows for one host of ``run``: every entry has ``status``
    (:func:`facts_status`: ``ok``, ``failed`` or ``unreachable``; ``interrupted`` or ``not
    started`` in an interrupted run's document; as the API's
    :attr:`HostFacts.status <fleetctl.api.facts.HostFacts.status>`) and ``reachable``; a host
    with facts has them beside; a host that is not ok has ``error`` (one that was reached, its
    facts gathered and then refused: a broken GPU stack, keeps the facts; an unreachable one has
    what its connection kind knows without reaching it). ``warnings``: the ``warning:`` notes, each
    a problem a deploy refuses (then the host is ``failed``, ``error`` naming the first:
    :mod:`fleetctl.facts.refusals`) or an operator must see (the host stays ``ok``; its line
    reads ``WARNING``). Not redacted."""
    out = run.hosts[host]
    entry = {**(out.facts or {}), "reachable": bool(out.reachable), "status": facts_status(out),
             "warnings": list(out.warnings or [])}
    if entry["status"] != "ok":
        entry["error"] = out.error
    return entry


def facts_status(outcome: Any) -> str:
    """A facts run's host status: ``ok``, ``unreachable``, ``interrupted`` or ``not started`` (a
    signal ended the run: docs/contracts.md's words), or ``failed`` (anything else: a host that was
    never finished is not ok), for ``fleetctl facts --json`` and the API's
    :class:`~fleetctl.api.facts.HostFacts` alike."""
    if outcome.status in ("unreachable", "interrupted", "not started") or \
            outcome.status == "ok" and outcome.facts is not None:
        return outcome.status
    return "failed"
