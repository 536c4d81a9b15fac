"""A login shell whose rc file sleeps or waits (``sleep 100`` in ``~/.zshenv``, a dead NFS mount
in ``~/.bashrc``) holds every ssh command before it starts. A new user's trial saw a bare
"timed out" (or a hang) with no cause; each command's marker (:mod:`fleetctl.connection.login_output`)
tells that the login shell had not started it, and the failure says so, naming the shell when it
is known and the files to look at. Real sshd on loopback, a dedicated login user per shell whose
rc file sleeps 30 s against deadlines of 3 s."""

from __future__ import annotations

import asyncio
import functools
import json
import pwd
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from fleetctl import Fleet
from fleetctl.connection.ssh import SSHConnection
from fleetctl.errors import CommandTimeout
from fleetctl.tasks import ACTIONS, command, steps
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

#: The rc file each shell reads for a non-interactive ``$SHELL -c`` (bash(1) INVOCATION: sshd
#: counts as a remote shell daemon; zsh(1) STARTUP FILES; tcsh(1) Startup and shutdown).
RC = {"bash": ".bashrc", "zsh": ".zshenv", "tcsh": ".tcshrc"}
#: What the failure names when the login shell is not known yet (the connection's first command).
ANY_SHELL = "look at ~/.bashrc, ~/.zshenv, ~/.tcshrc, ~/.cshrc, ~/.config/fish/config.fish, ~/.ssh/rc, /etc/ssh/sshrc"


class SlowRc:
    """The host's login user's rc file runs ``text`` (a sleep); emptied after."""

    def __init__(self, host, shell: str, text: str = "sleep 30\n") -> None:
        self.path = Path(pwd.getpwnam(host.user).pw_dir) / RC[shell]
        self.text = text

    def __enter__(self) -> "SlowRc":
        self.path.write_text(self.text)
        return self

    def __exit__(self, *exc) -> None:
        self.path.write_text("")


@pytest.mark.parametrize("shell", sorted(RC))
def test_a_command_the_login_shell_never_started_times_out_naming_the_shell_and_its_rc_file(sshd_farm, shell):
    host = sshd_farm.start(f"st-{shell}", shell=shell)
    login_shell = shutil.which(shell)
    rc = SlowRc(host, shell)
    notes: list[str] = []

    async def go():
        conn = SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                             key_file=str(host.client_key), known_hosts=str(sshd_farm.known_hosts),
                             connect_timeout_s=1.0)
        conn.on_note = notes.append
        async with conn:
            conn.learn_login(login_shell, rc.path.parent.as_posix())  # what the run's first command learns
            with rc:
                with pytest.raises(CommandTimeout) as err:
                    await conn.run(["echo", "hi"], timeout_s=3)
                stall = conn.login_stall()
            after = await conn.run(["echo", "hi"])  # the connection goes on once the rc file is fixed
            return err.value, stall, after

    err, stall, after = asyncio.run(go())
    files = {"bash": "~/.bashrc, /etc/bash.bashrc", "zsh": "~/.zshenv, /etc/zsh/zshenv",
             "tcsh": "~/.tcshrc, ~/.cshrc, /etc/csh.cshrc"}[shell]
    cause = (f"the remote login shell ({shell}) had not started the command after 3 s: a file it reads before every "
             f"ssh command is slow or waits (look at {files}, ~/.ssh/rc, /etc/ssh/sshrc; try: time "
             f"{host.ssh_hint(sshd_farm.known_hosts)} true)")
    assert str(err) == f"{host.name}: command timed out after 3 s: echo: {cause}", str(err)
    assert err.login_stall == cause
    # the engine's own deadlines (a task's, a transfer's) ask the connection after the fact
    assert stall is not None and stall.startswith(f"the remote login shell ({shell}) had not started the command after ")
    # a wait past the connect timeout (1 s here) is told while it lasts, once
    assert notes == [f"waiting: {cause.replace('after 3 s', 'after 1 s')}"], notes
    assert after.stdout == b"hi\n"


def test_run_and_fetch_say_the_login_shell_never_started_the_command(sshd_farm, tmp_path):
    """The connection's first command: the login shell is not known yet, so every usual rc file is named."""
    host = sshd_farm.start("st-run", shell="bash")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": host.inventory_vars(sshd_farm.known_hosts)}})
    with SlowRc(host, "bash"):
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--timeout", "3", "--", "true", home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("h: FAILED: "))
        assert line == (f"h: FAILED: command timed out after 3 s: true: the remote login shell had not started the "
                        f"command after 3 s: a file it reads before every ssh command is slow or waits ({ANY_SHELL}; "
                        f"try: time {host.ssh_hint(sshd_farm.known_hosts)} true)"), line
        assert json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["h"]["error"] == line[11:]
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", "--timeout", "3", "/etc/hostname",
                       str(tmp_path / "out"), home=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("h: FAILED: "))
    assert "the remote login shell had not started the command after " in line and ANY_SHELL in line, line


def test_a_deploy_task_whose_command_the_login_shell_never_started_names_the_shell(sshd_farm, tmp_path):
    """The first command learnt the login shell (zsh): the task that times out names it and ~/.zshenv."""
    host = sshd_farm.start("st-deploy", shell="zsh")
    home = Path(pwd.getpwnam(host.user).pw_dir)
    flag = home / "stall-next"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": {**host.inventory_vars(sshd_farm.known_hosts),
                                                              "workdir": str(home / "fl")}}})
    play = tmp_path / "play.yaml"
    play.write_text("name: stall\nhosts: all\ngather_facts: false\ntasks:\n"
                    f"  - name: mark\n    command: {{argv: [touch, {flag}]}}\n"
                    "  - name: next\n    command: {argv: ['true']}\n    timeout: 3\n")
    try:
        # the one command after `mark` stalls in ~/.zshenv; those before and after it run at once
        with SlowRc(host, "zsh", f"if [ -e {flag} ]; then rm -f {flag}; sleep 30; fi\n"):
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path,
                           timeout_s=300)
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        task = next(t for t in record["hosts"]["h"]["tasks"] if t["name"] == "next")
        assert task["status"] == "failed"
        assert re.fullmatch(r"timed out after 3 s: the remote login shell \(zsh\) had not started the command after "
                            r"[\d.]+ s: a file it reads before every ssh command is slow or waits \(look at "
                            r"~/\.zshenv, /etc/zsh/zshenv, ~/\.ssh/rc, /etc/ssh/sshrc; try: time "
                            rf"{re.escape(host.ssh_hint(sshd_farm.known_hosts))} true\)",
                            task["msg"]), task["msg"]
        assert "the remote login shell (zsh) had not started the command" in res.stdout, res.stdout[-3000:]
        # the run's first command (folders, lock, facts) in a login shell that never starts it: the
        # facts deadline names the cause too (the login shell is not known yet)
        with SlowRc(host, "zsh"):
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--phase-timeout",
                           "facts=3", home=tmp_path, timeout_s=300)
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
        error = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["h"]["error"]
        assert re.fullmatch(r"the run's first command did not answer within 3 s: the remote login shell had not "
                            r"started the command after [\d.]+ s: a file it reads before every ssh command is slow "
                            rf"or waits \({re.escape(ANY_SHELL)}; try: time "
                            rf"{re.escape(host.ssh_hint(sshd_farm.known_hosts))} true\)",
                            error), error
    finally:
        shutil.rmtree(home / "fl", ignore_errors=True)


@pytest.mark.parametrize("phase", ["build", "install", "command"])
def test_a_step_whose_own_limit_fires_on_a_login_that_starts_hanging_mid_run_names_that_limit(
        sshd_farm, tmp_path, monkeypatch, phase):
    """An operator's trial: ``sleep 900`` appended to ``~/.zshenv`` during ``deploy --force``; the
    class wheel's ``mkdir`` (its own limit, 60 s) stopped waiting for the login shell, and the host
    was reported ``FAILED Build the wheel ...: timed out after 7200 s`` (the build phase's deadline,
    never reached). A step stopped by its own limit says that limit, in every phase. Here the step
    is ``command``'s ``creates`` probe (its limit, 120 s, cut to 2 s), the task's deadline 7200 s."""
    host = sshd_farm.start(f"st-lim-{phase}", shell="zsh")
    home = Path(pwd.getpwnam(host.user).pw_dir)
    flag = home / "stall-next"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": {**host.inventory_vars(sshd_farm.known_hosts),
                                                              "workdir": str(home / "fl")}}})
    play = tmp_path / "play.yaml"
    play.write_text("name: stall\nhosts: all\ngather_facts: false\ntasks:\n"
                    f"  - name: mark\n    command: {{argv: [touch, {flag}]}}\n"
                    f"  - name: next\n    command: {{argv: ['true'], creates: {home / 'nothing-here'}}}\n")
    monkeypatch.setitem(ACTIONS, "command", replace(ACTIONS["command"], phase=phase, timeout_s=7200.0))
    monkeypatch.setattr(command, "probe", functools.partial(steps.probe, timeout_s=2))
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)
    try:
        # the one command after `mark` (the probe `test -e`) stalls in ~/.zshenv: a new login that hangs
        with SlowRc(host, "zsh", f"if [ -e {flag} ]; then rm -f {flag}; sleep 30; fi\n"):
            res = Fleet.from_inventory(inv).select("g").deploy(play)
        record = json.loads((res.record_dir / "run.json").read_text())
        task = next(t for t in record["hosts"]["h"]["tasks"] if t["name"] == "next")
        assert task["status"] == "failed" and task["phase"] == phase, task
        assert re.fullmatch(r"command timed out after 2 s: test: the remote login shell \(zsh\) had not started the "
                            r"command after 2 s: a file it reads before every ssh command is slow or waits \(look at "
                            r"~/\.zshenv, /etc/zsh/zshenv, ~/\.ssh/rc, /etc/ssh/sshrc; try: time "
                            rf"{re.escape(host.ssh_hint(sshd_farm.known_hosts))} true\)",
                            task["msg"]), task["msg"]
        assert task["duration_s"] < 30, task  # it failed as the step's 2 s ran out, far from 7200 s
    finally:
        shutil.rmtree(home / "fl", ignore_errors=True)
