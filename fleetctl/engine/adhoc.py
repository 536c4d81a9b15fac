"""Ad-hoc work across hosts: ``fleetctl run`` (one argv each) and ``fleetctl facts``.

Both go straight to the connection: one connection and one command per host, no playbook, no
planning pass, so ``run`` stays close to the floor of a bare SSH client. Outcomes land in the run
model and reach the observers as for a playbook run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..connection.base import OutputLine
from ..connection.command import not_found_on_path
from ..connection.registry import ConnectOptions
from ..errors import CommandTimeout, FleetError, HostUnreachable, host_message
from ..facts.refusals import refusal_error
from .deadlines import CONNECT_TIMEOUT_S, FACTS_TIMEOUT_S
from .fanout import for_each_host
from .model import RunModel, utc_now
from .observer import Observers
from .scopes import enter_scopes, prepare_hosts
from .session import HostSession, host_ref, unreachable_facts

#: Bytes of each stream ``fleetctl run`` keeps per host for its summary and ``--json`` (the last
#: ones, whole lines); the host's log in the run record keeps every byte.
RUN_CAPTURE_BYTES = 1024 * 1024


async def run_on_hosts(hosts: Sequence[Any], argv: Sequence[str], *, run: RunModel, observers: Observers,
                       forks: int = 50, timeout_s: float = 600.0, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                       accept_new_host_keys: bool = False, ssh_options: Sequence[str] = (),
                       outputs: dict[str, tuple[str, str]] | None = None) -> dict[str, tuple[str, str]]:
    """Run ``argv`` exactly as given on every host, concurrently (``forks`` at once).

    Each host's outcome: ``rc`` (and ``signal``), or ``status: unreachable`` with ``error``; its
    output goes line by line to the observers (and so to its log). ``outputs``: the caller's dict
    to fill as each host finishes (a new one when None), so that what the finished hosts printed
    outlives an interrupted run (``fleetctl run --json``'s document, :mod:`fleetctl.cli.runend`).

    Returns:
        ``outputs``: host -> ``(stdout, stderr)`` as the connection kept them (for ``--json``).
    """
    import contextlib

    options = ConnectOptions(accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s,
                             run_id=run.run_id, ssh_options=tuple(ssh_options))
    run.argv = list(argv)
    outputs = {} if outputs is None else outputs
    async with contextlib.AsyncExitStack() as stack:
        scopes = await enter_scopes(stack, hosts, options, run=run, observers=observers)
        unavailable = await prepare_hosts(scopes, hosts)

        async def one(host: Any) -> None:
            out = run.host(host.name)
            t0, out.started = time.monotonic(), utc_now()  # started: interrupted, not "not started", if cut off
            observers.emit("host.started", host.name)
            conn = None
            try:
                if host.name in unavailable:
                    raise HostUnreachable(host.name, unavailable[host.name])
                conn = scopes[host.connection].connection(host_ref(host))
                # what the connection learns on its own (a login shell's banner) goes to the record
                conn.on_note = lambda message, name=host.name: observers.emit("note.added", name, message=message)
                conn.on_login_line = lambda ln, name=host.name: observers.line(name, ln, False)  # the log keeps it
                await conn.open()

                def line(ln: OutputLine) -> None:
                    observers.line(host.name, ln, True)

                res = await conn.run(list(argv), timeout_s=timeout_s, on_line=line, capture_bytes=RUN_CAPTURE_BYTES)
                out.rc, out.signal = res.rc, res.signal
                outputs[host.name] = (res.stdout_text, res.stderr_text)
                if res.truncated:  # memory stays bounded: only the tail is kept; the log has every byte
                    out.output_truncated = {**res.truncated, "kept": "the last bytes of each stream, whole lines"}
                out.status = "ok" if res.rc == 0 else "failed"
                if res.rc != 0:
                    out.error = (f"rc={res.rc}{_exec_meaning(res.rc, argv, res.stderr_text)}" if res.rc is not None
                                 else f"signal {res.signal or '?'}")
            except HostUnreachable as exc:
                out.status, out.error, out.reachable = "unreachable", exc.cause, False
            except (CommandTimeout, FleetError) as exc:
                out.status, out.error = "failed", host_message(host.name, exc)
            finally:
                if conn is not None:
                    if getattr(conn, "stats", None):  # handshake retries, jump hosts, recorded keys
                        out.connection = dict(conn.stats)
                    await conn.close()
            out.duration_s = round(time.monotonic() - t0, 3)
            observers.emit("host.finished", host.name, status=out.status, rc=out.rc, error=out.error,
                           duration_s=out.duration_s)

        await for_each_host(hosts, one, forks=forks)
    run.failed_hosts = [h for h, o in run.hosts.items() if o.status != "ok"]
    return outputs


async def facts_on_hosts(hosts: Sequence[Any], *, run: RunModel, observers: Observers, forks: int = 50,
                         timeout_s: float = FACTS_TIMEOUT_S, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                         accept_new_host_keys: bool = False, ssh_options: Sequence[str] = ()) -> RunModel:
    """Gather facts on every host (one command each: see :mod:`fleetctl.engine.session_start`);
    each host's outcome holds ``facts`` or ``reachable: false`` with ``error``; its ``warnings``
    are the facts' ``warning:`` notes, and one a deploy refuses the host for makes it ``failed``
    with ``error`` naming it (:func:`fleetctl.facts.refusals.refusal_error`), facts kept. ``timeout_s`` limits
    each host's gathering, ``connect_timeout_s`` its connect and login, seconds (defaults:
    :mod:`fleetctl.engine.deadlines`)."""
    import contextlib

    from .reach import connect
    from .session_start import legacy_start, start_host

    options = ConnectOptions(accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s,
                             run_id=run.run_id, ssh_options=tuple(ssh_options))
    async with contextlib.AsyncExitStack() as stack:
        scopes = await enter_scopes(stack, hosts, options, run=run, observers=observers)
        unavailable = await prepare_hosts(scopes, hosts)
        shared = _SharedSoFar(hosts, run, observers)

        async def one(host: Any) -> None:
            out = run.host(host.name)
            t0, out.started = time.monotonic(), utc_now()  # started: interrupted, not "not started", if cut off
            observers.emit("host.started", host.name)
            session: HostSession | None = None
            try:
                session = await connect(host, scopes[host.connection], run, timeout_s=connect_timeout_s,
                                        unavailable=unavailable)
                # what the connection learns on its own (a login shell's banner) goes to the record
                session.conn.on_note = lambda message, name=host.name: observers.emit("note.added", name,
                                                                                      message=message)
                session.conn.on_login_line = lambda ln, name=host.name: observers.line(name, ln, False)
                if session.conn.holds_stdin:
                    # facts change nothing on a host (as Ansible's setup module): no run folder, no id file
                    started = await start_host(session, facts=True, lock=False, remembered=[], timeout_s=timeout_s,
                                               read_only=True)
                else:
                    started = await legacy_start(session, facts=True, lock=False, timeout_s=timeout_s,
                                                 connect_timeout_s=connect_timeout_s, read_only=True)
                facts = started.facts
                out.facts, out.status, out.reachable = facts, "ok", True
                notes = [str(n) for n in (facts.get("build") or {}).get("notes", [])]
                for note in notes:
                    observers.emit("note.added", host.name, message=note)
                out.warnings = [n for n in notes if n.startswith("warning: ")] or None
                refused = refusal_error(notes)  # a host a deploy refuses is never "ok" (facts/refusals.py)
                if refused:
                    out.status, out.error = "failed", refused
                observers.emit("facts.gathered", host.name, gpus=len(facts.get("gpus") or []),
                               arch_list=(facts.get("build") or {}).get("torch_cuda_arch_list"))
            except HostUnreachable as exc:
                out.status, out.error, out.reachable = "unreachable", exc.cause, False
                out.facts = unreachable_facts(scopes[host.connection], host, exc.cause)
            except FleetError as exc:
                out.status, out.error = "failed", host_message(host.name, exc)
                out.reachable = session is not None
                if isinstance(getattr(exc, "facts", None), dict):  # gathered, then refused (a broken GPU stack)
                    out.facts = exc.facts  # type: ignore[attr-defined]
            finally:
                if session is not None:
                    await session.conn.close()
            out.duration_s = round(time.monotonic() - t0, 3)
            shared.host_done(host.name)
            observers.emit("host.finished", host.name, status=out.status, error=out.error, duration_s=out.duration_s)

        await for_each_host(hosts, one, forks=forks)
    shared.restore()
    _refuse_shared_venvs(hosts, run, observers)
    run.failed_hosts = [h for h, o in run.hosts.items() if o.status != "ok"]
    return run


class _SharedSoFar:
    """The shared-venv rule (:func:`_refuse_shared_venvs`) applied as facts come in, so a host's
    live line never reads ``ok`` for a venv a host gathered before it shares: the later host
    finishes ``failed``; the earlier one, whose line was printed, gets ``host.refused`` (its
    correction line). :meth:`restore` hands the end of the run back its states, whose notes and
    final words :func:`_refuse_shared_venvs` writes from every host's facts."""

    def __init__(self, hosts: Sequence[Any], run: RunModel, observers: Observers) -> None:
        self.hosts, self.run, self.observers = hosts, run, observers
        self.done: set[str] = set()
        self.before: dict[str, tuple[str, str | None]] = {}  # host -> (status, error) before the rule

    def host_done(self, name: str) -> None:
        from ..facts.refusals import warning
        from ..tasks.install_target import shared_message
        from .targets import shared_in_facts

        self.done.add(name)
        outs = self.run.hosts
        gathered = {h.name: outs[h.name].facts for h in self.hosts
                    if h.name in self.done and outs[h.name].reachable and outs[h.name].facts}
        for other, shared in shared_in_facts(gathered).items():
            out = outs[other]
            if other in self.before or out.status != "ok":
                continue  # marked already, or its line said failed for a cause of its own
            self.before[other] = (out.status, out.error)
            out.status, out.error = "failed", refusal_error([warning(shared_message(other, shared))])
            if other != name:  # its line is out: say it again
                self.observers.emit("host.refused", other, task="facts", msg=out.error)

    def restore(self) -> None:
        for name, (status, error) in self.before.items():
            self.run.hosts[name].status, self.run.hosts[name].error = status, error


def _refuse_shared_venvs(hosts: Sequence[Any], run: RunModel, observers: Observers) -> None:
    """Hosts whose venv another gathered host shares are refused by a deploy while planning (one
    venv, several installs: :mod:`fleetctl.engine.targets`); their facts say so with the
    deploy's line, cross-host as that rule is: a :func:`~fleetctl.facts.refusals.warning` in
    ``warnings`` and, on a host that was ``ok``, ``failed`` with the line as ``error`` (operator
    trial: ``facts`` said ``s1: ok``, ``s2: ok`` for two logins on one venv that ``--plan``
    refused). The note joins the host's ``build.notes`` too, as its other refusals do."""
    from ..facts.refusals import warning
    from ..tasks.install_target import shared_message
    from .targets import shared_in_facts

    gathered = {h.name: run.hosts[h.name].facts for h in hosts
                if h.name in run.hosts and run.hosts[h.name].reachable and run.hosts[h.name].facts}
    for name, shared in shared_in_facts(gathered).items():
        out = run.hosts[name]
        build = dict((out.facts or {}).get("build") or {})
        notes = [str(n) for n in build.get("notes", [])]
        before = refusal_error(notes)
        note = warning(shared_message(name, shared))
        build["notes"] = [*notes, note]
        out.facts = {**(out.facts or {}), "build": build}
        out.warnings = [*(out.warnings or []), note]
        observers.emit("note.added", name, message=note)
        if out.status == "ok" or (out.status == "failed" and out.error == before):  # refused: the first cause leads
            out.status, out.error = "failed", refusal_error(build["notes"])


def _exec_meaning(rc: int, argv: Sequence[str], stderr: str) -> str:
    """Why the command did not start, when rc is 126 or 127 (POSIX sh's "cannot execute" / "not
    found") AND the host's own last stderr line says the program could not be executed: ``env: 'X':
    REASON``, or ``X: REASON`` (the local connection's, and the SSH connection's once it has taken its
    wrapper's ``setsid: failed to execute`` away: :class:`fleetctl.connection.command.OwnWrapperStderr`).
    A bare name the login's PATH does not hold (the supervisor's own line,
    :func:`fleetctl.connection.command.not_found_on_path`; operator trial: ``rc=127`` and nothing
    more under a ``~/.zshenv`` PATH without /usr/bin) gives ``": X could not start on the host: not
    found on the login's PATH (PATH)"``.
    Returns ``": X could not start on the host: REASON"``, else ""
    (a command that exits 127 itself keeps its bare status: the code alone cannot tell)."""
    if rc not in (126, 127) or not argv:
        return ""
    name = argv[0]
    path = not_found_on_path(stderr, name) if rc == 127 else None
    if path is not None:
        return f": {name} could not start on the host: not found on the login's PATH ({path})"
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else ""
    for lead in (f"env: '{name}': ", f"env: {name}: ", f"{name}: "):
        reason = last[len(lead):] if last.startswith(lead) else ""
        if reason in _EXEC_ERRORS and len(lines) <= 2:
            return f": {name} could not start on the host: {reason}"
    return ""


#: execve(2)'s errors as strerror(3) words them: the program itself did not start.
_EXEC_ERRORS = frozenset({"No such file or directory", "Permission denied", "Exec format error", "Not a directory",
                          "Is a directory", "Text file busy", "Too many levels of symbolic links"})
