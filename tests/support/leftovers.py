"""What a test session leaves on the machine, and taking it away (see tests/conftest.py).

Several sessions run side by side on one machine (engineers, CI jobs), so everything a session
makes outside its own temporary root carries the session's tag (:data:`SESSION_TAG`, the pytest
process's pid) and records its owner (pid and process start time), and a session removes only
what is its own, or what a session that is gone (killed) left behind:

- system users ``fltest-<shell>-<tag>`` and ``fltest-nohome-<tag>`` (:func:`session_user`,
  :func:`create_user`): their GECOS field says ``fleetctl test session PID START``; removed with
  their processes and home folders (:func:`remove_user`);
- the session root ``/tmp/fleetctl-test-home-*`` (HOME, XDG folders, FLEETCTL_HOME, pytest's
  ``tmp_path`` folders and every ``tempfile`` folder of the session): its ``owner`` file;
- ``/tmp`` entries whose name ends in ``-<tag>`` (remote work folders of tests that need a path
  every test user can reach).

:func:`leftovers` lists what is still there at the end: ``tests/conftest.py`` fails the session
when it is not empty.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

#: This session's tag: the pytest process's pid (told apart from a later process by its start time).
SESSION_TAG = str(os.getpid())
#: The GECOS prefix of every test user; the owner's pid and start time follow.
GECOS = "fleetctl test session"
#: Users tests create: ``fltest-<what>-<tag>``.
USER_RE = re.compile(r"fltest-[a-z0-9]+-([0-9]+)$")
TMP = Path("/tmp")


def start_time(pid: int) -> str:
    """A process's start time (clock ticks since boot, field 22 of ``/proc/PID/stat``), ``""`` when
    there is no such process (or it is a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = text[text.rindex(")") + 2:].split()
    return "" if fields[0] == "Z" else fields[19]


OWNER = f"{SESSION_TAG} {start_time(os.getpid())}"


def owner_alive(owner: str) -> bool:
    """Whether the session of an owner string (``"PID START"``) still runs."""
    pid, _, started = owner.strip().partition(" ")
    return pid.isdigit() and bool(started) and start_time(int(pid)) == started


def session_user(what: str) -> str:
    """This session's user name for ``what`` (``bash``, ``zsh``, ``nohome``): ``fltest-WHAT-TAG``
    (at most 32 characters, useradd's limit)."""
    return f"fltest-{what}-{SESSION_TAG}"


def create_user(name: str, *args: str) -> None:
    """``useradd ARGS... NAME`` with the owner in the GECOS field (needs root).

    Raises:
        subprocess.CalledProcessError: useradd failed.
    """
    subprocess.run(["useradd", "-c", f"{GECOS} {OWNER}", *args, name], check=True, capture_output=True)


def _pids_of(uid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def remove_user(name: str, timeout_s: float = 5.0) -> None:
    """Stop the user's processes (each by pid: TERM, then KILL after ``timeout_s`` seconds) and
    ``userdel -r`` it (its home folder and mail spool go too). A user that is not there is fine."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids_of(uid)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if start_time(p)]
            if pids:
                time.sleep(0.05)
        if not pids:
            break
    subprocess.run(["userdel", "-r", name], capture_output=True)
    if Path(f"/var/mail/{name}").exists():  # userdel -r leaves a spool it did not find in the config
        Path(f"/var/mail/{name}").unlink(missing_ok=True)


def test_users() -> list[pwd.struct_passwd]:
    """Every user some test session made (named ``fltest-*-N`` with the test GECOS)."""
    return [e for e in pwd.getpwall() if USER_RE.match(e.pw_name) and e.pw_gecos.startswith(GECOS)]


def remove_session_users() -> None:
    """Remove this session's users, and those of sessions that are gone."""
    for entry in test_users():
        owner = entry.pw_gecos[len(GECOS):]
        if owner.strip().split(" ")[0] == SESSION_TAG or not owner_alive(owner):
            remove_user(entry.pw_name)


def remove_stale_roots(prefix: str = "fleetctl-test-home-") -> None:
    """Remove session roots (``/tmp/PREFIX*`` with an ``owner`` file) whose session is gone."""
    for owner in TMP.glob(f"{prefix}*/owner"):
        try:
            text = owner.read_text()
        except OSError:
            continue
        if not owner_alive(text):
            shutil.rmtree(owner.parent, ignore_errors=True)


def tagged_tmp_entries() -> list[Path]:
    """``/tmp`` entries whose name ends in ``-<tag>`` (this session's remote work folders)."""
    return sorted(TMP.glob(f"*-{SESSION_TAG}"))


def remove_tagged_tmp_entries() -> None:
    for path in tagged_tmp_entries():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def leftovers(session_root: Path, shared_roots: tuple[Path, ...] = ()) -> list[str]:
    """What this session still leaves on the machine: its users and their home folders, its root,
    its ``/tmp`` entries, and folders under ``shared_roots`` (the Slurm test clusters' folder)
    whose ``owner`` file names this session."""
    out = [f"user {e.pw_name} (home {e.pw_dir})" for e in test_users()
           if e.pw_gecos[len(GECOS):].strip().split(" ")[0] == SESSION_TAG]
    out += [f"home folder {p}" for p in Path("/home").glob(f"fltest-*-{SESSION_TAG}")]
    if session_root.exists():
        out.append(f"session root {session_root}")
    out += [f"{p}" for p in tagged_tmp_entries()]
    for root in shared_roots:
        out += [str(o.parent) for o in root.glob("*/owner") if o.read_text().strip() == OWNER]
    return out
