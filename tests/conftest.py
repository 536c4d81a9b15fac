"""Shared fixtures: real sshd test hosts on loopback (see tests/support/sshd.py), and a hermetic
controller environment.

Hermetic: before any test runs, HOME, the XDG folders and FLEETCTL_HOME point into one temporary
folder for the whole session, and SSH_AUTH_SOCK is unset, so nothing a test runs (fleetctl in
process or as a subprocess, pip, torch, ssh) reads or writes the real ``~`` (``~/.ssh``,
``~/.cache``, ``~/.local/state``, ``~/.fleetctl``) or talks to the user's ssh-agent. Tests that
want their own state folder pass ``FLEETCTL_HOME`` explicitly (``tests.support.fleet.fleetctl``
does). The sshd test hosts that log in as the current user get their own HOME too (see
:func:`tests.support.sshd.start_sshd`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.hermetic import SESSION_ROOT, hermetic_environment
from tests.support.sshd import SshdHost, SshdUnavailable, ensure_client_key, start_sshd

hermetic_environment()
# A suite started in the background (`nohup ... &`, some CI runners) inherits SIGINT ignored, and
# every process it starts would too (an ignored signal stays ignored across exec): the tests that
# press Ctrl-C on fleetctl would see it ignored. Python's own handler here: children start with
# SIGINT at its default, as from a terminal.
signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config) -> None:
    if not config.option.basetemp:  # pytest's tmp_path folders inside the session root, not /tmp/pytest-of-USER
        config.option.basetemp = str(SESSION_ROOT / "pytest")


def pytest_sessionfinish(session, exitstatus) -> None:
    from tests.support import leftovers
    from tests.support.slurm import STATE_ROOT, stop_leftovers

    leftovers.remove_session_users()
    try:
        stop_leftovers()  # clusters of killed sessions (this session's own are stopped by their fixtures)
    except (OSError, subprocess.SubprocessError):
        pass
    leftovers.remove_tagged_tmp_entries()
    shutil.rmtree(SESSION_ROOT, ignore_errors=True)
    try:
        STATE_ROOT.rmdir()  # the shared Slurm test folder, when no cluster of any session is in it
    except OSError:
        pass
    left = leftovers.leftovers(SESSION_ROOT, (STATE_ROOT,))
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("the test session left behind: " + "; ".join(left), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def client_key(tmp_path_factory) -> Path:
    return ensure_client_key(tmp_path_factory.mktemp("client"))


class SshdFarm:
    """Starts sshd test hosts on demand and stops them all at teardown."""

    def __init__(self, root: Path, client_key: Path) -> None:
        self.root = root
        self.client_key = client_key
        self.hosts: list[SshdHost] = []
        root.mkdir(parents=True, exist_ok=True)
        self.known_hosts = root / "known_hosts"
        self.known_hosts.touch()

    def start(self, name: str, **kwargs) -> SshdHost:
        try:
            host = start_sshd(name, self.root / name, self.client_key, **kwargs)
        except SshdUnavailable as exc:
            pytest.fail(f"sshd test host could not start: {exc}")
        self.hosts.append(host)
        with self.known_hosts.open("a") as fh:
            fh.write(host.known_hosts_line + "\n")
        return host

    def stop_all(self) -> None:
        for host in self.hosts:
            host.stop()


@pytest.fixture
def sshd_farm(client_key):
    # Not under pytest's tmp_path: that is private to root (0700), and sshd reads
    # authorized_keys as the logging-in user, who may be a dedicated test user.
    root = Path(tempfile.mkdtemp(prefix="fleetctl-sshd-"))
    os.chmod(root, 0o755)
    farm = SshdFarm(root, client_key)
    yield farm
    farm.stop_all()
    shutil.rmtree(root, ignore_errors=True)
