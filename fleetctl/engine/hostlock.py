"""The deploy lock ON the host, so two controllers (two folders, two people, the nightly timer and
a person) never deploy to one host at once.

A small POSIX sh script takes ``flock(1)`` (util-linux; flock(2) underneath) on a lock file in the
host's fleetctl working folder (:func:`lock_path`) and then waits. It runs as a supervised remote process
(:mod:`fleetctl.connection.command`) on a companion connection
(:meth:`Connection.open_companion`, so it never takes a session the deploy needs: a host with
``MaxSessions 1`` still gets its deploy done) for the whole run:

- released on purpose (:meth:`HostLock.release`): a second command sends the script SIGTERM by
  its id on the host (:data:`RELEASE_SCRIPT`, only while the lock file still names it), its trap
  clears the holder record and it exits 0; only then is its command stopped. Stopping the
  command alone is not enough: srun stops a job step with SIGKILL (Slurm 22.05: ``srun: error:
  n1: task 0: Killed``), which no trap sees, and the next run found the finished run's record
  and warned that it took over a stale lock;
- the controller dies or the connection drops: sshd closes the session, the supervisor stops the
  script the same way; the kernel drops the flock whatever happens to the process;
- the script itself is killed (``kill -9``, OOM, reboot): the lock is free but the holder record
  stays, and the next run takes it over with a warning naming the dead run (:attr:`HostLock.stale`);
- a run of THIS controller machine whose process is gone but whose lock process still runs on the
  host (the network went away before sshd noticed): taken over with a warning too, after
  stopping that lock process;
- the lock lost DURING the run (its process killed, or the lock file removed and made anew or
  rewritten by another controller: the process reads the file every 3 s and exits
  :data:`LOST_RC` once it no longer names it): :meth:`HostLock.ended` says so, and
  :mod:`fleetctl.engine.lockwatch` decides what the host's result says.

The lock file holds one line, ``REMOTE_PID JSON``: the lock process's id on the host and the holder
record (``run_id``, ``controller`` host name, ``pid``, ``user``, ``started``).

Usage (engine-independent)::

    lock = await acquire_host_lock(session.conn, lock_path(conn, workdir), run_id=run_id)
    try: ... the run ...
    finally: await lock.release()
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import getpass
import json
import os
import posixpath
import socket
from dataclasses import dataclass, field

from .aio import answer_or_end, drop_task
from ..connection.base import Connection, OutputLine
from ..errors import FleetError
from ..util.within import within

#: Seconds to wait for the lock script to answer.
ACQUIRE_TIMEOUT_S = 60.0

# Fixed text; the path and the record arrive as positional parameters. Exit 75 (EX_TEMPFAIL): held.
# Held, it reads the lock file every 3 s (LOCK_CHECK_S of playbooks/scripts/session_start.py) and
# exits 4 once the file no longer names it (removed and made anew, or rewritten, by another
# controller), leaving the file alone; its TERM trap clears the record only while it names it.
# After LOCKED nothing more is written to the channel: once the connection is gone, a write (the
# shell's own "Terminated" report) would kill the script by SIGPIPE before its trap clears the record.
LOCK_SCRIPT = r'''f=$1; rec=$2
command -v flock >/dev/null 2>&1 || { echo "NOFLOCK"; exit 127; }
umask 077
mkdir -p -- "$(dirname -- "$f")" || exit 3
if [ -L "$f" ]; then echo "LINK $(stat -c %U -- "$f" 2>/dev/null)"; exit 3; fi
if [ -e "$f" ] && [ ! -w "$f" ]; then echo "NOOPEN $(stat -c '%U %a' -- "$f" 2>/dev/null)"; exit 3; fi
exec 9<>"$f" || exit 3
if ! flock -n 9; then printf 'BUSY '; head -c 4096 -- "$f"; echo; exit 75; fi
printf 'PREVIOUS '; head -c 4096 -- "$f"; echo
printf '%s %s\n' "$$" "$rec" > "$f"
trap 'kill "$!" 2>/dev/null; read -r p r < "$f" 2>/dev/null; [ "$p" = "$$" ] && : > "$f"; exit 0' TERM HUP INT
echo "LOCKED $$"
exec >/dev/null 2>&1
while :; do sleep 3 9>&- & wait $!; read -r p r < "$f" 2>/dev/null; [ "$p" = "$$" ] || exit 4; done
'''

# Sent on release with the lock file and the lock process's id: SIGTERM to that process, but only
# while the lock file names it (the record's first word), so no other process is ever signalled.
RELEASE_SCRIPT = r'''read -r pid rest < "$1" 2>/dev/null || exit 0
[ "$pid" = "$2" ] || exit 0
exec kill -TERM "$2"
'''

#: The exit status of a lock process whose lock file no longer names it (the lock was taken from it).
LOST_RC = 4


def holder_end(task: asyncio.Future | None) -> str | None:
    """How a lock process's command (``task``) ended before the run let go of it, in words
    (``"exit 4"``, ``"killed by SIGKILL"``, ``"its connection ended: ..."``); ``None`` while it
    still runs (the lock is held) or when there is none."""
    if task is None or not task.done() or task.cancelled():
        return None
    exc = task.exception()
    if exc is not None:
        return f"its connection ended: {exc}"
    res = task.result()
    if res.rc == LOST_RC:
        return f"exit {LOST_RC}: the lock file no longer named it"
    return f"exit {res.rc}" if res.rc is not None else f"killed by SIG{res.signal}" if res.signal else "ended"


#: Seconds the release command, then the released lock process, each get before its command is stopped.
RELEASE_WAIT_S = 10.0


class HostLockBusy(FleetError):
    """Another run holds the host's deploy lock; ``holder`` is its record (``run_id``,
    ``controller``, ``pid``, ``user``, ``started``, ``remote_pid``). ``run_id``: this run's id; a
    holder of that id is another inventory host of this run whose workdir is the same folder,
    said as such (operator trial: the line named the current run and advised killing its lock)."""

    def __init__(self, host: str, path: str, holder: dict, run_id: str | None = None) -> None:
        self.host = host
        self.path = path
        self.holder = holder
        if run_id and holder.get("run_id") == run_id:  # another host of this run: never advise killing it
            super().__init__(f"{host}: deploy lock {path} is held by this run itself ({run_id}): another inventory "
                             "host of this run has the same workdir; give each host its own workdir")
            return
        if not holder.get("run_id"):  # flock(1) by hand, a backup script, a controller killed while writing
            who = "a process that left no fleetctl run record in the file (not a fleetctl run)"
            hint = (f"find it on the host with: fuser -v {path} (or lsof {path}); wait for it to end, or stop it "
                    "if nothing should hold the host")
            super().__init__(f"{host}: deploy lock {path} is held by {who}: {hint}")
            return
        who = (f"run {holder.get('run_id', '?')} (controller {holder.get('controller', '?')}, pid {holder.get('pid', '?')}"
               f", user {holder.get('user', '?')}, started {holder.get('started', '?')})")
        hint = "wait for it to finish"
        if holder.get("remote_pid"):
            hint += (f"; if that run is dead, stop its lock process on the host (kill -TERM -- "
                     f"-{holder['remote_pid']}) or wait until sshd drops its connection")
        super().__init__(f"{host}: deploy lock {path} is held by {who}: {hint}")


class HostLockError(FleetError):
    """The lock could not be taken for another reason (no flock, unwritable folder...)."""


@dataclass
class HostLock:
    """A held deploy lock.

    Attributes:
        host: the inventory host name.
        path: the lock file on the host.
        holder: the record written (this run's).
        stale: the record of a dead run whose lock was taken over, or ``None``.
        remote_pid: the lock process's id on the host (the first word of the lock file), or ``None``.
    """

    host: str
    path: str
    holder: dict
    stale: dict | None = None
    remote_pid: int | None = None
    _task: asyncio.Task | None = field(default=None, repr=False)
    _conn: Connection | None = field(default=None, repr=False)
    _owner: Connection | None = field(default=None, repr=False)

    def ended(self) -> str | None:
        """How the lock process ended while the lock should have been held (:func:`holder_end`),
        or ``None`` while it holds the lock (or after :meth:`release`)."""
        return holder_end(self._task)

    async def release(self) -> None:
        """Let go of the lock: the lock process is sent SIGTERM on the host (:data:`RELEASE_SCRIPT`;
        its trap clears the record, the flock goes with it) and given :data:`RELEASE_WAIT_S` seconds
        to end; its command is stopped whatever happens, and the companion connection closed. When
        the host cannot be reached the record stays, and the next run takes it over as stale.
        Safe to call twice."""
        task, self._task = self._task, None
        conn = self._conn
        try:
            if task is not None and not task.done() and conn is not None and self.remote_pid:
                with contextlib.suppress(Exception):  # the host is gone, or slow: the record stays
                    await conn.run(["/bin/sh", "-c", RELEASE_SCRIPT, "fleetctl-unlock", self.path,
                                    str(self.remote_pid)], timeout_s=RELEASE_WAIT_S)
                    await within(asyncio.shield(task), RELEASE_WAIT_S)
        finally:
            await drop_task(task)
            self._conn = None
            if conn is not None and conn is not self._owner:
                await conn.close()


def lock_path(conn: Connection, workdir: str | None = None, override: str | None = None) -> str:
    """The lock file: ``override`` (the ``deploy_lock`` host var), else ``<workdir>/deploy.lock``.

    The host's working folder is per inventory host by default (``~/.fleetctl/<host>``), so the
    lock is too (a ``workdir`` var naming one folder for several hosts gives them one lock; within
    one run that is the run's own: :func:`fleetctl.engine.session_start.start_host`): hosts that share a home folder over NFS never share a lock (flock on NFS is
    cluster-wide), several inventory names for one machine in one run do not block each other,
    and every deploy of that inventory host, from any folder or controller, meets the same lock.
    When different inventories name one machine differently (or several users deploy into one
    shared venv), set ``deploy_lock`` to one path for all of them (e.g. ``/var/lock/fleetctl.lock``,
    or a file beside the shared venv), writable by each of those login users (``chmod 0666``, or
    0660 and a group: the first one makes it 0600, and the others are then told whose it is and
    its mode). Several login users given one workdir each have their own (``<workdir>/<user>``,
    ``own_workdir`` in ``playbooks/scripts/session_start.py``), so their locks are their own too.
    A lock path that is a symbolic link is never opened. Without a workdir, ``~/.fleetctl/deploy.lock``.
    """
    if override:
        return override
    if workdir:
        return posixpath.join(workdir, "deploy.lock")
    return posixpath.join(conn.home or ".", ".fleetctl", "deploy.lock")


def holder_record(run_id: str) -> dict:
    """The holder record this controller writes into the lock file: ``run_id``, ``controller``
    (this machine's host name), ``pid``, ``user``, ``started`` (ISO 8601 UTC, seconds)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"run_id": run_id, "controller": socket.gethostname(), "pid": os.getpid(), "user": user,
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def parse_holder(text: str) -> dict:
    """The lock file's text: ``REMOTE_PID JSON`` (or bare JSON from an older writer) -> the record; ``{}`` if empty."""
    text = text.strip()
    if not text:
        return {}
    pid, _, rest = text.partition(" ")
    try:
        if pid.isdigit():
            return {**json.loads(rest), "remote_pid": int(pid)}
        return json.loads(text)
    except ValueError:
        return {"raw": text[:200]}


def controller_gone(holder: dict) -> bool:
    """True when the holder record (:func:`parse_holder`) names this machine and a ``pid`` that no
    longer exists (``kill(pid, 0)`` fails with ESRCH, POSIX); False for another machine, a live
    process, or one of another user (EPERM)."""
    if holder.get("controller") != socket.gethostname() or not str(holder.get("pid", "")).isdigit():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


async def _try(conn: Connection, host: str, path: str, record: dict, timeout_s: float) -> HostLock:
    lines: list[str] = []
    locked = asyncio.get_running_loop().create_future()

    def on_line(line: OutputLine) -> None:
        text = line.text
        lines.append(text)
        if text.startswith("LOCKED") and not locked.done():
            locked.set_result(text)

    task = asyncio.create_task(conn.run(["/bin/sh", "-c", LOCK_SCRIPT, "fleetctl-lock", path, json.dumps(record)],
                                        on_line=on_line, timeout_s=None, capture_bytes=64 * 1024))
    how = await answer_or_end(locked, task, timeout_s)
    if how == "answer":
        previous = next((parse_holder(t[len("PREVIOUS "):]) for t in lines if t.startswith("PREVIOUS ")), {})
        pid = locked.result()[len("LOCKED"):].strip()
        return HostLock(host, path, record, stale=previous or None, remote_pid=int(pid) if pid.isdigit() else None,
                        _task=task)
    if how == "silent":
        stall = conn.login_stall()  # the login shell had not started the lock script
        raise HostLockError(f"{host}: the deploy lock {path} did not answer within {timeout_s:g} s"
                            + (f": {stall}" if stall else ""))
    res = task.result()  # HostUnreachable propagates
    if res.rc == 75:
        busy = next((t[len("BUSY "):] for t in lines if t.startswith("BUSY ")), "")
        raise HostLockBusy(host, path, parse_holder(busy), record.get("run_id"))
    if res.rc == 127 and any("NOFLOCK" in t for t in lines):
        raise HostLockError(f"{host}: flock(1) is not installed on the host, so the deploy lock cannot be taken "
                            f"(install util-linux)")
    said = next((t.split(" ", 1) for t in lines if t.startswith(("LINK ", "NOOPEN "))), None)
    if said is not None:
        raise HostLockError(f"{host}: cannot take the deploy lock {path}: " + _refusal(path, *said))
    raise HostLockError(f"{host}: cannot take the deploy lock {path}: exit {res.rc}: "
                        f"{res.stderr_text.strip()[-300:] or res.stdout_text.strip()[-300:]}")


def _refusal(path: str, what: str, stat_text: str) -> str:
    """The lock script's ``LINK OWNER`` / ``NOOPEN OWNER MODE`` as one clause (the words of
    ``lock_refusal`` in playbooks/scripts/session_start.py, which the SSH start uses)."""
    owner, _, mode = stat_text.strip().partition(" ")
    if what == "LINK":
        return (f"{path} is a symbolic link (owner {owner or '?'}): never followed (it could point to any file of "
                f"the login user's, which taking the lock would truncate); remove it, or set deploy_lock to a file "
                f"of its own")
    return (f"Permission denied: {path} (owner {owner or '?'}, mode {mode.zfill(4) if mode else '?'}) is not "
            f"writable by the login user; to share one lock among the users that deploy here, make it writable "
            f"by each (chmod 0666 {path}, or 0660 and a group of theirs), else leave deploy_lock unset (each user "
            f"then has its own, in its workdir)")


async def _take_over(conn: Connection, host: str, path: str, record: dict, timeout_s: float,
                     holder: dict) -> HostLock:
    """Take the lock once the stopped lock process has let go of it (polled, up to 10 s)."""
    for _ in range(50):
        try:
            lock = await _try(conn, host, path, record, timeout_s)
        except HostLockBusy as busy:
            if busy.holder.get("remote_pid") != holder.get("remote_pid"):
                raise
            await asyncio.sleep(0.2)  # the stopped process is still exiting
            continue
        lock.stale = holder
        return lock
    raise HostLockBusy(host, path, holder)


async def acquire_host_lock(conn: Connection, path: str, *, run_id: str,
                            timeout_s: float = ACQUIRE_TIMEOUT_S) -> HostLock:
    """Take the deploy lock of ``conn``'s host, held until :meth:`HostLock.release`.

    Args:
        conn: an open connection to the host (the lock runs on its companion connection).
        path: the lock file on the host (:func:`lock_path`).
        run_id: this run's id, recorded for whoever finds the lock held.
        timeout_s: seconds to wait for the lock script to answer (not for the lock: a held lock
            is refused at once).

    Raises:
        HostLockBusy: another live run holds it (naming that run).
        HostLockError: flock missing, folder not writable, no answer.
        HostUnreachable: the companion connection could not be opened.
    """
    lock_conn = await conn.open_companion()
    record = holder_record(run_id)
    try:
        try:
            lock = await _try(lock_conn, conn.host, path, record, timeout_s)
        except HostLockBusy as busy:
            holder = busy.holder
            if not (holder.get("remote_pid") and controller_gone(holder)):
                raise
            # a run of this machine died but its lock process lives on: stop it, take over
            await lock_conn.run(["kill", "-TERM", "--", f"-{holder['remote_pid']}"], timeout_s=30)
            lock = await _take_over(lock_conn, conn.host, path, record, timeout_s, holder)
    except BaseException:
        if lock_conn is not conn:
            await lock_conn.close()
        raise
    lock._conn = lock_conn
    lock._owner = conn
    return lock
