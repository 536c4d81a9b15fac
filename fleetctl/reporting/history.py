"""Past runs on disk: listing them, reading one, its host logs, and the retry set.

Run records live in ``<state_dir>/runs/<run_id>/`` (:func:`fleetctl.util.paths.state_dir`:
``$FLEETCTL_HOME``, else ``$XDG_STATE_HOME/fleetctl``), so ``fleetctl runs`` lists every run of the
user wherever it was started.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..util.paths import safe_name, state_dir


def runs_root() -> Path:
    """``<state_dir>/runs``."""
    return state_dir() / "runs"


def valid_run_id(run_id: str) -> bool:
    """Run ids are folder names fleetctl made: no path separators, no dot-dot."""
    return bool(run_id) and "/" not in run_id and run_id not in (".", "..") and not run_id.startswith(".")


def list_runs(root: Path | None = None) -> list[dict]:
    """Every run's ``run.json``, the one made last first (:mod:`fleetctl.reporting.order`: not by
    the clock its id was made with); unreadable ones are reported with an error key."""
    from .order import newest_first

    root = root or runs_root()
    out = []
    if not root.exists():
        return out
    for path in newest_first(root.iterdir()):
        rj = path / "run.json"
        if not rj.exists():
            continue
        try:
            out.append(read_record(rj))
        except (OSError, ValueError) as exc:
            out.append({"run_id": path.name, "error": str(exc)})
    return out


def read_record(path: Path) -> dict:
    """A ``run.json`` read and checked for the shape every reader relies on: an object whose
    ``hosts``, when present, maps each host name to an object (docs/schema). A file edited by hand
    or by another tool is refused with one line naming it, never a traceback in ``runs``, ``runs
    show``, ``report`` or ``logs`` (operator trial 10: ``"hosts": [...]``).

    Raises:
        OSError: it cannot be read.
        ValueError: it is not JSON, or not of that shape (names the path and what is wrong).
    """
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: their words name no file
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON object but {type(record).__name__}")
    hosts = record.get("hosts")
    if hosts is not None and not isinstance(hosts, dict):
        raise ValueError(f"{path}: 'hosts' is a {type(hosts).__name__}, not an object of host -> outcome")
    for name, outcome in (hosts or {}).items():
        if not isinstance(outcome, dict):
            raise ValueError(f"{path}: host {name!r} is a {type(outcome).__name__}, not an object")
    return record


GONE = "interrupted (controller gone)"


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, field 22 of ``/proc/PID/stat``), or None
    when there is no such process or no ``/proc``. Told apart from a later process that got the
    same pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    if fields[0] == "Z":  # a zombie: dead, not yet reaped
        return None
    return int(fields[19])


def _alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid
        pass
    if not Path("/proc/self/stat").exists():
        return True
    now = process_start(pid)
    return now is not None and (start is None or now == start)


def shown_status(record: dict) -> str:
    """A run's status as listings show it: the recorded one, but a record still ``running`` whose
    controller process (``controller_pid`` on ``controller``, this machine) is gone is shown as
    ``interrupted (controller gone)``: it was killed (SIGKILL, a crash) before it could say so.
    Runs of another machine, or recorded before the pid was, are shown as recorded. Nothing is
    rewritten."""
    import socket

    status = str(record.get("status", "?"))
    pid = record.get("controller_pid")
    if status != "running" or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return status
    if record.get("controller") != socket.gethostname():
        return status
    start = record.get("controller_start")
    return status if _alive(pid, start if isinstance(start, int) else None) else GONE


def settled(record: dict) -> dict:
    """The record as listings read it: when :func:`shown_status` says the controller is gone, a
    copy whose run ``status`` is :data:`GONE` and whose hosts still ``running`` are what the
    controller would have recorded had it ended on SIGTERM (:func:`fleetctl.engine.outcomes.
    interrupt_rest`): ``interrupted`` when they had started, ``not started`` otherwise. Any other
    record is returned as it is. Nothing is rewritten."""
    status = shown_status(record)
    if status != GONE or not isinstance(record.get("hosts"), dict):
        return record
    hosts = {}
    for name, h in record["hosts"].items():
        if isinstance(h, dict) and h.get("status") == "running":
            h = {**h, "status": "interrupted" if h.get("started") else "not started",
                 "error": h.get("error") or "the controller is gone (killed before it could say so)"}
        hosts[name] = h
    return {**record, "status": status, "hosts": hosts}


def load_run(run_id: str, root: Path | None = None) -> dict:
    """One run's ``run.json``.

    Raises:
        FileNotFoundError: no such run (names the path).
        ValueError: the file is not JSON, or not a run record's shape (:func:`read_record`).
    """
    return read_record((root or runs_root()) / run_id / "run.json")


def host_log_path(run_id: str, host: str, root: Path | None = None) -> Path:
    """``<runs>/<run_id>/logs/<host>.log``."""
    return (root or runs_root()) / run_id / "logs" / f"{safe_name(host)}.log"


def newest_run(host: str | None = None, root: Path | None = None) -> str | None:
    """The run ``fleetctl logs`` shows (or follows, ``--follow``) when no run id is given: the
    id of the newest run (the one made last, as :func:`list_runs`: a record made under a clock
    set ahead is not newer for it), or with ``host`` the newest that
    has a log for ``host`` or names it among its hosts (a host never reached has its reason in
    ``run.json``); None when there is none. One choice for both: the newest run of all may not
    have that host (a run on other hosts came after, or is running beside it), and following that
    one showed nothing of the host and ended with another run's status (operator trial)."""
    from .order import newest_first

    root = root or runs_root()
    if not root.is_dir():
        return None
    for path in newest_first(root.iterdir()):
        record = path / "run.json"
        if not valid_run_id(path.name) or not record.is_file():
            continue
        if host is None or host_log_path(path.name, host, root).exists():
            return path.name
        try:
            hosts = json.loads(record.read_text()).get("hosts")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(hosts, dict) and host in hosts:
            return path.name
    return None


def play_key(inventory: list[str], playbook: str) -> str:
    """The retry set's key for a play: its inventory sources (in ``-i`` order) and its playbook, each
    made absolute when it is a path (``slurm:`` stays as given)."""
    import hashlib

    def norm(p: str) -> str:
        return os.path.abspath(os.path.expanduser(p)) if os.path.exists(os.path.expanduser(p)) else p

    doc = json.dumps({"inventory": [norm(p) for p in inventory], "playbook": norm(playbook)}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def retry_path(key: str, root: Path | None = None) -> Path:
    """``<runs>/.retry-<key>.json``: one retry set per play (see :func:`play_key`)."""
    return (root or runs_root()) / f".retry-{key}.json"


def write_retry_set(run_id: str, failed: list[str], root: Path | None = None, *, key: str,
                    inventory: list[str] = (), playbook: str = "") -> Path:  # type: ignore[assignment]
    """Record the hosts to retry for one play (inventory sources + playbook, as Ansible keeps one
    ``.retry`` file per playbook): replaced only by the next run of that same play."""
    root = root or runs_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = retry_path(key, root)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    doc = {"run_id": run_id, "failed_hosts": failed, "inventory": list(inventory), "playbook": playbook}
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def retry_hosts(run_id: str | None = None, root: Path | None = None, *, key: str | None = None
                ) -> tuple[str, list[str]]:
    """``(run_id, failed hosts)`` of a given run, or of the retry set the last run of the play
    ``key`` left.

    Raises:
        FileNotFoundError: no such run, or no run of that play has written a retry set yet.
    """
    root = root or runs_root()
    if run_id:
        data = load_run(run_id, root)
        return run_id, list(data.get("failed_hosts", []))
    if key is None:
        raise FileNotFoundError("no play given")
    data = json.loads(retry_path(key, root).read_text())
    return data["run_id"], list(data["failed_hosts"])
