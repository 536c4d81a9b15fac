"""A host's first command of a run: folders, login shell, deploy lock, facts and probes in ONE exec.

A fleet tool's cost is round trips and interpreter starts. Before this, a deploy spent one
command on the login shell, one on the run folder, an SFTP session and upload for the facts
script, one command for it, a second connection and command for the deploy lock, and one command
per planner probe. Here it is one exec of ``python3 -c BOOT`` whose stdin carries
``playbooks/scripts/session_start.py`` and a job (see that script for what it does and in which
order); nothing is uploaded first, and on a deploy the same process then holds the deploy lock
until the run lets go of it (:class:`Started.release`), as the lock script of
:mod:`fleetctl.engine.hostlock` would (same lock file and record, so old and new controllers
exclude each other).

The probes answered ahead are the ones the host's planners asked last time
(:mod:`fleetctl.engine.probeplan`); their answers go into :attr:`HostSession.prefetched`, keyed as
the step runner keys probes, so planners stay pure and unchanged: they ask as always, and the
engine answers from what the host said a moment ago, in this run, after the lock was taken.

Connections whose commands cannot keep their stdin open (:attr:`Connection.holds_stdin` false:
Slurm job steps) keep the older sequence (:func:`legacy_start`).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .aio import answer_or_end, drop_task
from ..connection.base import CommandResult, OutputLine
from ..connection.lifeline import lifeline_s
from ..connection.login_output import stdin_taken_message
from ..connection.sftp_fallback import STDIN_TAKEN_RC
from ..errors import HostUnreachable, TaskFailed
from ..util.retention import RetentionPolicy, policy_from_env
from ..facts.scripts import script_path
from .hostlock import HostLockBusy, HostLockError, controller_gone, holder_end, holder_record, parse_holder
from .probeplan import concrete, wanted
from .session import HostSession

#: The first line of the command's stdin: a login rc file that reads stdin (``read line`` in a
#: ``~/.bashrc`` for every non-interactive shell) takes it, and :data:`BOOT` then exits
#: :data:`~fleetctl.connection.sftp_fallback.STDIN_TAKEN_RC` having run nothing, which
#: :func:`_no_result` words (operator trial: facts failed with "printed no JSON object" and the
#: ``int()`` of the script's bytes, hiding the rc file).
STDIN_MARK = b"@@FLEETCTL_STDIN@@"
#: What ``python3 -c`` runs: check :data:`STDIN_MARK`, read a length-prefixed script from stdin and
#: run it as ``__main__``. One line without backslash or ``!``, so that every login shell passes it
#: through alike.
BOOT = ("import sys,zlib;r=sys.stdin.buffer;r.readline().strip()==b'" + STDIN_MARK.decode() + "' or sys.exit("
        + str(STDIN_TAKEN_RC) + ");n=int(r.readline());"
        "exec(compile(zlib.decompress(r.read(n)),'fleetctl-session-start','exec'),{'__name__':'__main__'})")
MARK = "@@FLEETCTL_SESSION@@ "
#: Bytes of stdout or stderr a probe may print and still be answered ahead.
PROBE_LIMIT_BYTES = 4 * 1024 * 1024
#: Tries to take over a stale lock whose holder was stopped (0.2 s apart).
TAKEOVER_TRIES = 50


@dataclass
class Started:
    """What the first command found.

    Attributes:
        facts: the facts (empty when not gathered).
        lock_path: the deploy lock file (absolute), when one was taken.
        run_lock: the deploy lock file another host of this run holds (one workdir), when this
            host goes on under it (no ``lock_path``).
        stale: the record of a dead run whose lock was taken over, or ``None``.
        answered: probes answered ahead (count).
        kept: of those, answers the host kept from an earlier run, its files unchanged (count).
        duration_s: the command's own run time on the host (seconds).
    """

    facts: dict[str, Any] = field(default_factory=dict)
    lock_path: str | None = None
    run_lock: str | None = None
    stale: dict | None = None
    answered: int = 0
    kept: int = 0
    duration_s: float = 0.0
    _holder: asyncio.Task | None = None
    _lock: Any = None

    def ended(self) -> str | None:
        """How the deploy lock's holder ended before the run let go of it (killed, or the lock
        file no longer named it: :func:`fleetctl.engine.hostlock.holder_end`); ``None`` while it
        holds the lock, without one, or after :meth:`release`."""
        return self._lock.ended() if self._lock is not None else holder_end(self._holder)

    async def release(self) -> None:
        """Let go of the deploy lock: the holder's stdin closes, it clears the record and exits."""
        task, self._holder = self._holder, None
        await drop_task(task)
        if self._lock is not None:
            await self._lock.release()



def host_policy(settings: Any) -> RetentionPolicy:
    """The retention policy for a host's run folders: its ``keep_runs``/``keep_days`` vars, else
    the controller's (:func:`fleetctl.util.retention.policy_from_env`)."""
    policy = policy_from_env()
    return RetentionPolicy(keep_runs=settings.keep_runs or policy.keep_runs,
                           keep_days=settings.keep_days or policy.keep_days)


def _job(session: HostSession, *, facts: bool, lock: bool, remembered: list[list],
         read_only: bool = False) -> dict[str, Any]:
    job: dict[str, Any] = {"workdir": session.base_workdir(), "run_id": session.run_id,
                           "probes": wanted(remembered), "probe_limit_bytes": PROBE_LIMIT_BYTES, "facts": facts,
                           "read_only": read_only}
    if lock:
        job["lock"] = {"path": session.host.settings.deploy_lock or "", "record": json.dumps(holder_record(session.run_id))}
        if session.conn.heartbeat_s:  # the holder lets go once the heartbeats stop (the controller cut off)
            job["lock"]["lifeline_s"] = lifeline_s(session.conn.heartbeat_s)
        job["prune"] = host_policy(session.host.settings).as_job()  # under the lock: one deploy prunes at a time
    if facts:
        from ..facts.gather import facts_options

        settings = session.host.settings
        job["facts_argv"] = facts_options(venv=session.venv, cuda_home=settings.cuda_home,
                                          gpu_timeout_s=settings.gpu_probe_timeout_s)
    return job


@functools.lru_cache(maxsize=8)
def _compressed(name: str, mtime_ns: int) -> bytes:
    """A host script's text, zlib-compressed (read and compressed once per process and version)."""
    return zlib.compress(script_path(name).read_bytes(), 6)


def _script(name: str) -> bytes:
    return _compressed(name, script_path(name).stat().st_mtime_ns)


def boot_stdin(job: dict[str, Any]) -> bytes:
    """What the command reads: :data:`STDIN_MARK`, the script (compressed; :data:`BOOT` runs it), the facts script
    (compressed, empty without facts), the job (JSON); each block after a line holding its size."""
    from ..facts.gather import FACTS_SCRIPT

    src = _script("session_start.py")
    facts = _script(FACTS_SCRIPT) if job.get("facts") else b""
    data = json.dumps(job).encode()
    return b"".join((STDIN_MARK + b"\n", b"%d\n" % len(src), src, b"%d\n" % len(facts), facts, b"%d\n" % len(data),
                     data))


async def _exec(session: HostSession, job: dict[str, Any], *, hold: bool,
                timeout_s: float) -> tuple[dict | None, CommandResult | None, asyncio.Task | None]:
    """Run the first command; ``(result, finished command, holder task)``."""
    conn = session.conn
    argv = ["python3", "-S", "-c", BOOT]  # -S: no site (its imports and .pth files): the scripts are stdlib only
    # the stdin stays open after the job wherever it can, and the script stops itself and its
    # children (the facts' nvidia-smi runs in a session of its own) once it closes: as a
    # supervised command is stopped (fleetctl/connection/command.py), which a command given
    # stdin cannot be (operator trial: a hung nvidia-smi left running after Ctrl-C on facts)
    watch = bool(conn.holds_stdin)
    stdin = boot_stdin({**job, "watch_stdin": watch})
    if not hold:
        held = {"hold_stdin": True} if watch else {}  # a kind that cannot hold stdin takes no such argument
        res = await conn.run(argv, stdin=stdin, timeout_s=timeout_s, **held)
        return _result(res.stdout_text), res, None
    got: asyncio.Future = asyncio.get_running_loop().create_future()
    box: list[asyncio.Future] = [got]  # emptied once read: the holder lives for the run, its result need not
    pieces: list[bytes] = []

    def on_line(line: OutputLine) -> None:
        if line.stream != "stdout" or not box:
            return
        pieces.append(line.data)
        if line.partial:
            return
        text = b"".join(pieces).decode("utf-8", "replace")
        pieces.clear()
        if text.startswith(MARK) and not box[0].done():
            box[0].set_result(text)

    task = asyncio.ensure_future(conn.run(argv, stdin=stdin, on_line=on_line, hold_stdin=True, timeout_s=None,
                                          capture_bytes=2048))
    del stdin
    how = await answer_or_end(got, task, timeout_s)
    box.clear()
    if how == "answer":
        return _result(got.result()), None, task
    if how == "silent":  # the login shell still in its rc files, or the command itself waiting
        raise TaskFailed(session.name, f"the run's first command did not answer within {timeout_s:g} s: "
                         + (conn.login_stall() or f"(it runs under the login shell: an rc file that waits, e.g. on "
                                                  f"a dead NFS mount, or a hung nvidia-smi"
                                                  + (f"; try: {conn.ssh_hint()} true)" if conn.ssh_hint() else ")")))
    res = task.result()  # HostUnreachable propagates
    return _result(res.stdout_text), res, None


def _result(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                return json.loads(line[len(MARK):])
            except ValueError:
                return None
    return None


def _no_result(session: HostSession, res: CommandResult | None, facts: bool) -> TaskFailed:
    """The command ended without its result line: what it said instead (``python3: not found``)."""
    rc = res.rc if res is not None else None
    what = "facts script" if facts else "the run's first command"
    if res is not None and rc == STDIN_TAKEN_RC and not res.stdout_text.strip():
        return TaskFailed(session.name, f"{what} did not run: " + stdin_taken_message(
            "", printed=res.login_printed[0], printed_err=res.login_printed[1] or res.stderr,
            what="the command's stdin (the host script fleetctl sends)", lost="its first line never reached it"))
    text = (res.stderr_text + "\n" + res.stdout_text) if res is not None else ""
    cause = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
    status = f"exit {rc}" if rc is not None else "killed by a signal"
    return TaskFailed(session.name, f"{what} printed no JSON object ({status}): {cause}")


async def start_host(session: HostSession, *, facts: bool, lock: bool, remembered: list[list],
                     timeout_s: float, on_stale: Callable[[dict], Awaitable[None] | None] | None = None,
                     read_only: bool = False) -> Started:
    """The first command of ``session``'s host (see the module docstring).

    Args:
        facts: gather facts (``session.facts`` is set).
        lock: take the deploy lock (held until :meth:`Started.release`). One held by this run
            (another inventory host of it whose workdir is the same folder) is the run's own: the
            host goes on without one of its own (no ``lock_path``), so that its planners, not the
            lock, refuse hosts sharing a workdir, as ``--plan`` does (operator trial: one twin
            failed on "a lock held by run R", R the current run, the other deployed).
        remembered: probes to answer ahead (:meth:`fleetctl.engine.probeplan.ProbeMemory.entries`).
        timeout_s: seconds for the command to answer (seconds).
        read_only: write nothing on the host (``fleetctl facts``, like Ansible's setup module): no
            run folder, no id file, no kept answers saved (``playbooks/scripts/session_start.py``
            says what is read instead); takes no lock.

    Raises:
        HostUnreachable: the connection was lost.
        TaskFailed: the command could not run (no python3...), the run folder cannot be made.
        HostLockBusy, HostLockError: the deploy lock is held by a live run, or cannot be taken.
        FleetError: the facts cannot plan a build.
    """
    hold = lock and session.conn.holds_stdin
    hold = hold and not read_only
    job = _job(session, facts=facts, lock=hold, remembered=[] if read_only else remembered, read_only=read_only)
    stale_taken: dict | None = None
    holder: asyncio.Task | None = None
    run_lock: str | None = None
    try:
        for attempt in range(TAKEOVER_TRIES):
            await drop_task(holder)  # an earlier try's (it found the lock busy)
            out, res, holder = await _exec(session, job, hold=hold, timeout_s=timeout_s)
            if out is None:
                raise _no_result(session, res, facts)
            login = out.get("login") or {}
            session.conn.learn_login(login.get("shell", ""), login.get("home", ""),
                                     home_missing=bool(login.get("home_missing")))
            if out.get("workdir"):
                session.set_folders(out["workdir"])
            if out.get("error"):
                raise session.folder_error(out["error"])
            state = out.get("lock") or {}
            if hold and "busy" in state:
                holder_rec = parse_holder(state["busy"])
                if stale_taken is None and holder_rec.get("remote_pid") and controller_gone(holder_rec):
                    # a run of this machine died but its lock process lives on: stop it, take over
                    await session.conn.run(["kill", "-TERM", "--", f"-{holder_rec['remote_pid']}"], timeout_s=30)
                    stale_taken = holder_rec
                if stale_taken is not None and holder_rec.get("remote_pid") == stale_taken.get("remote_pid"):
                    await asyncio.sleep(0.2)  # the stopped process is still exiting
                    continue
                if holder_rec.get("run_id") == session.run_id:  # another host of this run: its lock is ours
                    hold, job = False, _job(session, facts=facts, lock=False, remembered=remembered)
                    run_lock = state.get("path", "?")
                    continue
                raise HostLockBusy(session.name, state.get("path", "?"), holder_rec, session.run_id)
            if hold and "locked" not in state:
                raise HostLockError(f"{session.name}: cannot take the deploy lock {state.get('path', '?')}: "
                                    f"{state.get('error', 'no answer')}")
            break
        else:
            raise HostLockBusy(session.name, "?", stale_taken or {})
    except BaseException:
        # the command that found the lock busy (or failed) still runs, or ended with the
        # connection: never leave it unobserved
        await drop_task(holder)
        raise
    started = Started(_holder=holder, duration_s=float(out.get("duration_s") or 0.0), kept=int(out.get("kept") or 0),
                      run_lock=run_lock)
    try:
        if hold:
            started.lock_path = state["path"]
            previous = parse_holder(state.get("previous", ""))
            started.stale = stale_taken or previous or None
        _take_answers(session, remembered, out.get("probes") or [], out.get("workdir", ""), started)
        if facts:
            started.facts = _facts(session, out)
    except BaseException:
        await started.release()
        raise
    return started


def _take_answers(session: HostSession, remembered: list[list], answers: list, workdir: str, started: Started) -> None:
    for entry, ans in zip(remembered, answers):
        if not ans:
            continue
        key, _ = concrete(entry, workdir)
        session.prefetched[key] = CommandResult(
            argv=list(key[0]), rc=ans.get("rc"), signal=ans.get("signal"), stdout=base64.b64decode(ans.get("out", "")),
            stderr=base64.b64decode(ans.get("err", "")), duration_s=float(ans.get("s") or 0.0))
        started.answered += 1


def _facts(session: HostSession, out: dict) -> dict[str, Any]:
    from ..facts.gather import complete_facts, parse_facts_output
    from ..facts.venv import installs_build_requirements
    from .wheelcache import class_wheel_like

    if out.get("facts_error"):
        raise TaskFailed(session.name, f"facts script failed: {out['facts_error']}")
    facts = parse_facts_output(session.name, 0, out.get("facts_stdout", ""), "")
    settings = session.host.settings
    facts = complete_facts(session.name, facts, fallback_archs=settings.fallback_archs, max_jobs=settings.max_jobs,
                           cuda_home=settings.cuda_home, extra=session.conn.extra_facts(),
                           verify_device=settings.verify_device,
                           install_requirements=installs_build_requirements(session.host.vars),
                           class_wheel=class_wheel_like)
    return session.finish_facts(facts)


async def _folders(session: HostSession, *, timeout_s: float, read_only: bool) -> None:
    """The login shell and home, the workdir (this user's own: see ``own_workdir`` in
    ``playbooks/scripts/session_start.py``) and, unless ``read_only``, the run folder, by the same
    host script as :func:`start_host` (no lock, facts or probes), in one command whose stdin is
    sent and closed.

    Raises:
        TaskFailed: the script could not run, or the workdir is another user's or cannot be made.
    """
    job = _job(session, facts=False, lock=False, remembered=[], read_only=read_only)
    out, res, _ = await _exec(session, job, hold=False, timeout_s=timeout_s)
    if out is None:
        raise _no_result(session, res, False)
    login = out.get("login") or {}
    session.conn.learn_login(login.get("shell", ""), login.get("home", ""), home_missing=bool(login.get("home_missing")))
    if out.get("workdir"):
        session.set_folders(out["workdir"])
    if out.get("error"):
        raise session.folder_error(out["error"])


async def legacy_start(session: HostSession, *, facts: bool, lock: bool, timeout_s: float,
                       connect_timeout_s: float, read_only: bool = False) -> Started:
    """The older sequence, for connections that cannot hold a command's stdin open: the run
    folder (:func:`_folders`), the facts script (uploaded), and the deploy lock on a companion connection;
    ``read_only`` (``fleetctl facts``): no folder made, the script run from a private temporary
    folder removed afterwards, nothing left on the host."""
    from .hostlock import acquire_host_lock, lock_path

    lock = lock and not read_only
    await _folders(session, timeout_s=connect_timeout_s, read_only=read_only)
    started = Started()
    if lock:
        path = lock_path(session.conn, session.workdir, session.host.settings.deploy_lock)
        try:
            held = await acquire_host_lock(session.conn, path, run_id=session.run_id)
            started.lock_path, started.stale, started._lock = path, held.stale, held
        except HostLockBusy as busy:  # another host of this run holds it (one workdir): the run's own
            if busy.holder.get("run_id") != session.run_id:
                raise
            started.run_lock = path
    if facts:
        try:
            started.facts = await session.gather_facts(timeout_s=timeout_s, read_only=read_only)
        except BaseException:
            await started.release()
            raise
    return started


__all__ = ["BOOT", "Started", "start_host", "legacy_start", "HostUnreachable"]
