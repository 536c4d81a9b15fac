"""Per-host deploy locks on the controller, so two runs never work on the same host at once.

One lock file per inventory host in the user's state folder (:func:`fleetctl.paths.locks_dir`:
``$FLEETCTL_HOME/locks``, else ``$XDG_STATE_HOME/fleetctl/locks``), never the working directory, so
two runs of one user started from two folders exclude each other. Each is held with
``fcntl.flock`` for the whole run: the kernel drops the lock when the holding process dies, so a
crashed run can never leave a host locked forever. The file also records the holder (run id, pid,
start time); finding a record whose pid is gone means the previous run died, and is reported as a
stale lock that is being taken over.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path

from .errors import FleetError


class HostsLocked(FleetError):
    """Some hosts are locked by another live run; ``holders`` maps host -> holder record."""

    def __init__(self, holders: dict[str, dict]) -> None:
        self.holders = holders
        first = next(iter(holders.values()))
        super().__init__(
            f"{', '.join(sorted(holders))} locked by run {first.get('run_id')} (pid {first.get('pid')}, "
            f"started {first.get('started')}); wait for it to finish"
        )


def locks_dir() -> Path:
    """The user's controller-side locks folder (see :mod:`fleetctl.paths`)."""
    from .paths import locks_dir as user_locks_dir

    return user_locks_dir()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class HostLocks:
    """Acquire every host's lock or none (raises :class:`HostsLocked`); release with :meth:`release`.

    ``stale`` lists ``(host, previous holder)`` taken over from runs whose process is gone.
    """

    def __init__(self, hosts: Iterable[str], run_id: str, root: Path | None = None) -> None:
        self.root = root or locks_dir()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.run_id = run_id
        self.hosts = list(hosts)
        self._fds: dict[str, int] = {}
        self.stale: list[tuple[str, dict]] = []

    def _path(self, host: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_.[]" else "_" for c in host)
        return self.root / f"{safe}.lock"

    def acquire(self) -> "HostLocks":
        busy: dict[str, dict] = {}
        for host in self.hosts:
            fd = os.open(self._path(host), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy[host] = _read(fd)
                os.close(fd)
                continue
            previous = _read(fd)
            if previous.get("pid") and not _pid_alive(int(previous["pid"])):
                self.stale.append((host, previous))
            record = {"run_id": self.run_id, "pid": os.getpid(),
                      "started": dt.datetime.now(dt.timezone.utc).isoformat(), "host": host}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
            self._fds[host] = fd
        if busy:
            self.release()
            raise HostsLocked(busy)
        return self

    def release(self) -> None:
        """Clear the records and drop the locks (safe to call twice)."""
        for fd in self._fds.values():
            try:
                os.ftruncate(fd, 0)
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
