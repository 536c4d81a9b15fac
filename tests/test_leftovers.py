"""The test session cleans up what it makes (tests/support/leftovers.py, tests/conftest.py): real
users with real processes, removed by this session only when they are its own or their session is
gone; another live session's users are left alone."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import leftovers
from tests.support.hermetic import SESSION_ROOT


def _sleeper(name: str) -> subprocess.Popen:
    import time

    entry = pwd.getpwnam(name)
    proc = subprocess.Popen(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
                             "sleep", "600"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}").stat().st_uid != entry.pw_uid:  # poll: it runs as the user now
        assert time.monotonic() < deadline, "setpriv did not switch to the test user"
        time.sleep(0.02)
    return proc


def test_a_session_user_is_listed_then_removed_with_its_processes_and_home():
    name = leftovers.session_user("probe")
    leftovers.create_user(name, "-m", "-p", "*", "-s", "/bin/sh")
    proc = _sleeper(name)
    try:
        left = leftovers.leftovers(SESSION_ROOT)
        assert f"user {name} (home /home/{name})" in left and f"home folder /home/{name}" in left
        leftovers.remove_user(name)
        assert proc.wait(10) != 0  # its process was stopped first
        assert name not in {e.pw_name for e in pwd.getpwall()}
        assert not Path(f"/home/{name}").exists()
        assert not any(name in item for item in leftovers.leftovers(SESSION_ROOT))
    finally:
        proc.kill()
        leftovers.remove_user(name)


def test_users_of_a_gone_session_are_removed_and_a_live_sessions_are_kept():
    """(This session's own users go too: ensure_user makes them again when a later test asks.)"""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    live = subprocess.Popen(["sleep", "600"])  # stands for another session still running
    dead_user, live_user = f"fltest-probe-{dead_pid}", f"fltest-probe-{live.pid}"
    try:
        subprocess.run(["useradd", "-c", f"{leftovers.GECOS} {dead_pid} 12345", "-M", "-s", "/bin/sh", dead_user],
                       check=True)
        subprocess.run(["useradd", "-c", f"{leftovers.GECOS} {live.pid} {leftovers.start_time(live.pid)}", "-M",
                        "-s", "/bin/sh", live_user], check=True)
        leftovers.remove_session_users()
        names = {e.pw_name for e in pwd.getpwall()}
        assert dead_user not in names and live_user in names
    finally:
        live.kill()
        live.wait()
        leftovers.remove_user(dead_user)
        leftovers.remove_user(live_user)


def test_temporary_folders_live_in_the_session_root_and_tagged_tmp_entries_are_found():
    folder = Path(tempfile.mkdtemp(prefix="fleetctl-probe-"))
    assert folder.parent == SESSION_ROOT / "tmp"
    tagged = Path(f"/tmp/fltest-work-probe-{leftovers.SESSION_TAG}")
    tagged.mkdir()
    (tagged / "f").write_text("x")
    assert str(tagged) in leftovers.leftovers(SESSION_ROOT)
    leftovers.remove_tagged_tmp_entries()
    assert not tagged.exists()
    assert (SESSION_ROOT / "owner").read_text().strip() == leftovers.OWNER
    assert leftovers.owner_alive(leftovers.OWNER) and not leftovers.owner_alive(f"{os.getpid()} 1")
