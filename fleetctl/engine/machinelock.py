"""Per-machine deploy locks on the controller, so two runs of one user never work on one machine at once.

One lock file per *machine* in the user's state folder (:func:`fleetctl.util.paths.locks_dir`:
``$FLEETCTL_HOME/locks``, else ``$XDG_STATE_HOME/fleetctl/locks``), never the working directory, so
two runs of one user started from two folders exclude each other. A machine is what the host's
connection will reach (:meth:`fleetctl.connection.registry.ConnectionKind.machine`: for SSH
``ssh:user@address:port`` after ssh_config, for a local host the controller's host name), not
the inventory name: two inventories that call two different machines ``s1`` do not exclude each
other, two names for one machine do. Hosts of one run that name one machine share its lock.

Each lock is held with ``fcntl.flock`` for the whole run: the kernel drops it when the holding
process dies, so a crashed run can never leave a machine locked forever. The file also records
the holder (run id, pid, start time, machine); finding a record whose pid is gone means the
previous run died, and is reported as a stale lock that is being taken over.

A lock is per host: a host whose machine another live run holds is *refused* (:attr:`HostLocks.refused`:
host -> one line naming the run), and the run goes on with the others.

Lock files do not pile up: the holder removes its file on release, *while still holding the
lock*; a run that opened the file before it was removed and then gets the lock finds that the
path no longer names the file it locked (``st_ino`` differs, or it is gone) and opens it again.
So at any time at most one live lock exists per path, and a crashed run's file (the kernel lock
gone, the record left) is taken over and removed by the next run.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path


def locks_dir() -> Path:
    """The user's controller-side locks folder (see :mod:`fleetctl.util.paths`)."""
    from ..util.paths import locks_dir as user_locks_dir

    return user_locks_dir()


def machine_of(host) -> str:
    """The machine an inventory host's connection will reach (see the module docstring); its
    kind and name when its settings cannot say (it then fails to connect anyway)."""
    from ..connection.registry import load_kind

    try:
        return load_kind(host.connection).machine(host.ref)
    except Exception:  # noqa: BLE001 - an unknown kind or bad settings: reported when connecting
        return f"{host.connection}:{host.name}"


def lock_path(machine: str, root: Path | None = None) -> Path:
    """The lock file of ``machine``: a readable name plus a hash of the exact key (two keys that
    read alike once made file-name safe never share a file)."""
    safe = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in machine)[:96]
    digest = hashlib.sha256(machine.encode()).hexdigest()[:12]
    return (root or locks_dir()) / f"{safe}.{digest}.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def refused_reason(holder: dict, machine: str) -> str:
    """One line: who holds ``machine``'s lock."""
    return (f"locked by run {holder.get('run_id')} (pid {holder.get('pid')}, started {holder.get('started')}), "
            f"deploying to the same machine ({machine}); wait for it to finish")


class HostLocks:
    """The controller-side lock of each host's machine.

    Args:
        hosts: inventory host name -> its machine (:func:`machine_of`).

    After :meth:`acquire`: ``refused`` maps each host whose machine another live run holds to one
    line naming that run (``holders``: to the holder's record); ``stale`` lists ``(host, previous
    holder)`` taken over from runs whose process is gone. Release with :meth:`release`.
    """

    def __init__(self, hosts: Mapping[str, str], run_id: str, root: Path | None = None) -> None:
        self.root = root or locks_dir()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.run_id = run_id
        self.hosts = dict(hosts)
        self._fds: dict[str, tuple[int, Path]] = {}  # machine -> (fd, path)
        self.refused: dict[str, str] = {}
        self.holders: dict[str, dict] = {}
        self.paths: dict[str, Path] = {}
        self.stale: list[tuple[str, dict]] = []

    def acquire(self) -> "HostLocks":
        """Take every host's machine lock that is free (each machine once); never raises for a busy one."""
        taken: dict[str, dict | None] = {}  # machine -> None (ours) or the live holder's record
        for host, machine in self.hosts.items():
            path = self.paths[host] = lock_path(machine, self.root)
            if machine not in taken:
                taken[machine] = self._take(machine, path, host)
            holder = taken[machine]
            if holder is not None:
                self.holders[host] = holder
                self.refused[host] = refused_reason(holder, machine)
        return self

    def _take(self, machine: str, path: Path, host: str) -> dict | None:
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                return holder
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # its holder released (and removed) it between our open and flock
                os.close(fd)
                continue
            break
        previous = _read(fd)
        if previous.get("pid") and not _pid_alive(int(previous["pid"])):
            self.stale.append((host, previous))
        record = {"run_id": self.run_id, "pid": os.getpid(), "started": dt.datetime.now(dt.timezone.utc).isoformat(),
                  "host": host, "machine": machine}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fds[machine] = (fd, path)
        return None

    def release(self) -> None:
        """Remove the lock files (while still holding them) and drop the locks (safe to call twice)."""
        for fd, path in self._fds.values():
            try:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "HostLocks":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}
