"""A login shell whose rc file ends it before the command (``[ -z "$PS1" ] && exit 0`` in
``~/.bashrc``, ``exit 0`` in ``~/.zshenv``, ``exec true``) runs no ssh command at all, yet the
channel ends with the shell's exit status: a new user's trial saw ``fleetctl run -- false`` report
ok, rc 0. Each command's marker (:mod:`fleetctl.connection.login_output`) tells that the command
never ran: run, facts and deploy fail the host naming the login shell and its rc files. Real sshd
on loopback, the suite's dedicated login user per shell (its rc file emptied after)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetctl.connection.ssh import SSHConnection
from fleetctl.errors import CommandNotStarted
from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

#: (login shell, its rc file read for every ``$SHELL -c`` (bash(1) INVOCATION, zsh(1) STARTUP
#: FILES), what the rc file holds).
CASES = {
    "bash-exit": ("bash", ".bashrc", '[ -z "$PS1" ] && exit 0\n'),
    "zsh-exit": ("zsh", ".zshenv", "exit 0\n"),
    "bash-exec": ("bash", ".bashrc", "exec true\n"),
}
#: The first command's cause: the login shell is not known yet, so every usual rc file is named;
#: the hint is the real ssh command (the inventory's address, port and user), never the alias ``h``.
NOT_RUN = ("the remote login shell exited with status 0 before running the command: a file it reads before every "
           "ssh command ends it (an `exit`, `exec` or `logout` there; look at ~/.bashrc, ~/.zshenv, ~/.tcshrc, "
           "~/.cshrc, ~/.config/fish/config.fish), or the login shell does not run commands (nologin); "
           "try: {ssh} echo ok")


class EndingRc:
    """The host's login user's rc file holds ``text``; emptied after."""

    def __init__(self, host, rc: str, text: str) -> None:
        self.path = Path(pwd.getpwnam(host.user).pw_dir) / rc
        self.text = text

    def __enter__(self) -> "EndingRc":
        self.path.write_text(self.text)
        return self

    def __exit__(self, *exc) -> None:
        self.path.write_text("")


def _failed_line(res) -> str:
    return next(ln for ln in res.stderr.splitlines() if ln.startswith("h: FAILED: "))


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_facts_and_deploy_fail_a_host_whose_login_shell_exits_before_the_command(sshd_farm, tmp_path, case):
    shell, rc, text = CASES[case]
    host = sshd_farm.start(f"ex-{case}", shell=shell)
    not_run = NOT_RUN.format(ssh=host.ssh_hint(sshd_farm.known_hosts))
    home = Path(pwd.getpwnam(host.user).pw_dir)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": {**host.inventory_vars(sshd_farm.known_hosts),
                                                              "workdir": str(home / "fl")}}})
    play = tmp_path / "play.yaml"
    play.write_text("name: p\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    try:
        with EndingRc(host, rc, text):
            for argv in (["false"], ["true"]):  # `true` never ran either: not ok
                res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", *argv, home=tmp_path)
                assert res.returncode == 1, res.stdout + res.stderr
                assert _failed_line(res) == f"h: FAILED: {not_run}", res.stderr
                assert json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["h"]["error"] == not_run
            src = tmp_path / "payload.txt"
            src.write_text("x\n")
            transfers = ([["copy", "--hosts", "g", str(src), str(home / "payload.txt")],
                          ["fetch", "--hosts", "g", "/etc/hostname", str(tmp_path / "out")]]
                         if case == "bash-exit" else [])  # transfers: one case is enough (same path)
            for args in transfers:
                res = fleetctl("-i", str(inv), *args, home=tmp_path)
                assert res.returncode == 1, res.stdout + res.stderr
                assert not_run in _failed_line(res), res.stderr
            res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
            assert res.returncode == 1, res.stdout + res.stderr
            assert json.loads(res.stdout)["h"]["error"] == not_run, res.stdout
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
            assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
            error = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["h"]["error"]
            assert not_run in error, error
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "true", home=tmp_path)  # fixed: runs again
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        shutil.rmtree(home / "fl", ignore_errors=True)


def test_a_command_after_the_first_names_the_known_login_shell_and_what_it_printed(sshd_farm, tmp_path):
    """Once the run learnt the login shell, the cause names it and only its rc files; what the
    shell printed before it exited is quoted. The host is reached through the inventory's own
    ssh_config and known_hosts files (in a folder with a space), and the hint names both."""
    host = sshd_farm.start("ex-known", shell="zsh")
    rc = EndingRc(host, ".zshenv", "echo 'maintenance: logins are closed'\nexit 3\n")
    site = tmp_path / "site dir"
    site.mkdir()
    # the key is known only under the alias the ssh_config names: ssh without this -F, or without
    # this known_hosts file, finds no key for the host and (BatchMode) refuses it
    cfg, kh = site / "ssh_config", site / "known_hosts"
    cfg.write_text("Host *\n  HostKeyAlias ex-known-alias\n  GlobalKnownHostsFile /dev/null\n")
    kh.write_text("ex-known-alias " + host.known_hosts_line.split(" ", 1)[1] + "\n")

    async def go():
        conn = SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                             key_file=str(host.client_key), known_hosts=str(kh), ssh_config=str(cfg))
        async with conn:
            first = await conn.run(["echo", "hi"])
            conn.learn_login(shutil.which("zsh"), str(rc.path.parent))
            with rc:
                with pytest.raises(CommandNotStarted) as err:
                    await conn.run(["false"])
            return first, err.value

    first, err = asyncio.run(go())
    assert first.stdout == b"hi\n"
    hint = host.ssh_hint(f'"{kh}"', cfg)  # the known_hosts path, one ssh_config word (a space in it)
    assert err.cause == ("the remote login shell (zsh) exited with status 3 before running the command: a file it "
                         "reads before every ssh command ends it (an `exit`, `exec` or `logout` there; look at "
                         "~/.zshenv, /etc/zsh/zshenv), or the login shell does not run commands (nologin); try: "
                         f"{hint} echo ok; it printed: maintenance: logins are closed"), err.cause
    assert str(err) == f"{host.name}: {err.cause}"
    # the hint works as typed, with the inventory's key only (operator trial: it lacked -i KEY, and
    # ssh found no key of its own: this HOME has none, no agent), and the inventory's ssh_config and
    # known_hosts (operator trial: without them the hint reached another host config); BatchMode
    # only keeps ssh from asking
    words = shlex.split(err.cause.split("try: ", 1)[1].split(" echo ok", 1)[0])
    assert words[words.index("-i") + 1] == str(host.client_key), words
    said = subprocess.run([words[0], "-o", "BatchMode=yes", *words[1:], "echo", "ok"], capture_output=True,
                          text=True, timeout=60, env=_no_agent(), stdin=subprocess.DEVNULL)
    assert (said.returncode, said.stdout) == (0, "ok\n"), said.stderr


def _no_agent() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "SSH_AGENT_PID")}


def test_a_nologin_account_is_named_as_the_cause_and_its_words_are_no_command_output(sshd_farm, tmp_path):
    """New-user trial: with a nologin login shell, ``run -- true`` showed ``u5 | This account is
    currently not available.`` as if ``true`` had printed it, and the cause said ``try: ssh
    u5-brokendriver echo ok``, an inventory alias ssh cannot resolve. The account is named as one
    that runs no commands, nologin's words are only quoted in the cause, and the hint is the real
    ssh command (ansible_host, ansible_port, ansible_user)."""
    host = sshd_farm.start("ex-nologin", shell="nologin")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"u5-nologin": host.inventory_vars(sshd_farm.known_hosts)}})
    cause = ("the login shell of the account is nologin: it runs no commands, so none ran (the account cannot be "
             "deployed to); give the account a login shell (as root: chsh -s /bin/bash USER) or log in as another "
             f"account (ansible_user); try: {host.ssh_hint(sshd_farm.known_hosts)} echo ok; it printed: This "
             "account is currently not available.")
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "true", home=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "not available" not in res.stdout, res.stdout  # no line of `true`'s
    assert f"u5-nologin: FAILED: {cause}" in res.stderr.splitlines(), res.stderr
    doc = json.loads(fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "true", home=tmp_path).stdout)
    assert doc["u5-nologin"]["stdout"] == "" and doc["u5-nologin"]["error"] == cause, doc
    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
    assert facts.returncode == 1 and json.loads(facts.stdout)["u5-nologin"]["error"] == cause, facts.stdout


def test_a_login_shell_that_dies_is_quoted_on_both_streams_and_its_bytes_are_in_the_host_log(sshd_farm, tmp_path):
    """Operator trial: ``.zshenv`` ending ``echo "zshenv: broken module" >&2; exit 3`` failed the
    host quoting only its stdout line, and ``logs/hzsh.log`` was empty (the stderr line only in
    events.jsonl). The cause quotes both streams, stderr first; the host's log holds every byte
    (never as the command's output on the terminal); ``fleetctl logs`` shows them."""
    host = sshd_farm.start("ex-zsh-stderr", shell="zsh")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"hzsh": host.inventory_vars(sshd_farm.known_hosts)}})
    with EndingRc(host, ".zshenv", 'echo "zshenv says hi"\necho "zshenv: broken module" >&2\nexit 3\n'):
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "true", home=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    failed = next(ln for ln in res.stderr.splitlines() if ln.startswith("hzsh: FAILED: "))
    assert failed.endswith("; it printed on stderr: zshenv: broken module; on stdout: zshenv says hi"), failed
    assert "zshenv says hi" not in res.stdout, res.stdout  # not `true`'s output
    run = last_run(tmp_path)
    log = (run / "logs" / "hzsh.log").read_bytes()
    assert b"out| zshenv says hi\n" in log and b"err| zshenv: broken module\n" in log, log
    shown = fleetctl("logs", run.name, "--host", "hzsh", home=tmp_path)
    assert "zshenv: broken module" in shown.stdout and "zshenv says hi" in shown.stdout, shown.stdout + shown.stderr
