"""What a login shell's rc file prints (bash ``~/.bashrc``, zsh ``~/.zshenv``, tcsh ``~/.tcshrc``:
each runs for every ssh command) is never taken for command output, as a new user's trial hit it:
a failure named the banner instead of its cause, a pushed wheel's stamp read the banner as its size
and hash (a re-push on every deploy), and ``pip check`` reported the banner as a problem. Real sshd
on loopback, a dedicated login user per shell."""

from __future__ import annotations

import asyncio
import hashlib
import pwd
from pathlib import Path

import pytest

from fleetctl.connection.ssh import LOGIN_OUTPUT_NOTE, SSHConnection
from fleetctl.tasks.base import first_error_line
from fleetctl.tasks.build_keys import parse_stat
from fleetctl.tasks.venv_state import check_problems
from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

#: The rc file each shell reads for a non-interactive ``$SHELL -c`` (bash(1) INVOCATION: sshd
#: counts as a remote shell daemon; zsh(1) STARTUP FILES; tcsh(1) Startup and shutdown).
RC = {"bash": ".bashrc", "zsh": ".zshenv", "tcsh": ".tcshrc"}


class Banner:
    """An rc file that prints ``Welcome to gpu01 (SHELL)`` for the host's login user, emptied after."""

    def __init__(self, host, shell: str) -> None:
        self.text = f"Welcome to gpu01 ({shell})"
        self.path = Path(pwd.getpwnam(host.user).pw_dir) / RC[shell]

    def __enter__(self) -> "Banner":
        self.path.write_text(f'echo "{self.text}"\n')
        return self

    def __exit__(self, *exc) -> None:
        self.path.write_text("")


def connect(host, farm) -> SSHConnection:
    return SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                         key_file=str(host.client_key), known_hosts=str(farm.known_hosts))


@pytest.mark.parametrize("shell", sorted(RC))
def test_command_output_never_holds_the_login_banner(sshd_farm, shell):
    host = sshd_farm.start(f"lb-{shell}", shell=shell)
    with Banner(host, shell) as banner:
        wheel = Path(pwd.getpwnam(host.user).pw_dir) / "w.whl"
        wheel.write_bytes(b"wheel bytes\n" * 100)
        notes, lines = [], []

        async def go():
            conn = connect(host, sshd_farm)
            conn.on_note = notes.append
            async with conn:
                stat = await conn.run(["stat", "-c", "%s %Y", str(wheel)], on_line=lines.append)
                digest = await conn.run(["sha256sum", str(wheel)])
                pip = await conn.run(["sh", "-c", "echo 'No broken requirements found.'"])
                missing = await conn.run(["/nonexistent/venv/bin/python3", "-c", "pass"], env={"X": "1"})
                silent = await conn.run(["true"])
                return stat, digest, pip, missing, silent

        stat, digest, pip, missing, silent = asyncio.run(go())
        # the stamp's stat and hash read the wheel, not the banner
        assert parse_stat(stat.stdout_text)[0] == 1200, stat.stdout
        assert stat.stdout.count(b"\n") == 1 and banner.text not in stat.stdout_text
        assert [ln.text for ln in lines] == [stat.stdout_text.strip()]  # streamed lines too
        assert digest.stdout_text.split()[0] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        # pip check's clean answer is no problem at all
        assert check_problems(pip) == [], pip.stdout
        # the failure names its cause
        assert missing.rc == 127
        assert "No such file or directory" in first_error_line(missing), (missing.stdout, missing.stderr)
        assert silent.stdout == b""
        # the banner is not lost: one note per connection says what the login shell printed
        assert notes == [LOGIN_OUTPUT_NOTE + banner.text], notes
        wheel.unlink()


@pytest.mark.parametrize("shell", sorted(RC))
def test_verify_with_a_missing_venv_names_the_cause_not_the_banner(sshd_farm, tmp_path, shell):
    host = sshd_farm.start(f"lv-{shell}", shell=shell)
    home = Path(pwd.getpwnam(host.user).pw_dir)
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"gpu04": {
        **host.inventory_vars(sshd_farm.known_hosts), "workdir": str(home / "fl"),
        "venv": str(home / "venv-moved-away"), "verify_device": "cpu"}}})
    with Banner(host, shell) as banner:
        res = fleetctl("-i", str(inv), "verify", "--hosts", "gpu04", home=tmp_path, timeout_s=300)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    failed = [ln for ln in (res.stdout + res.stderr).splitlines() if "FAILED" in ln]
    assert failed and all(banner.text not in ln for ln in failed), failed
    assert any("No such file or directory" in ln for ln in failed), failed
    run_dir = last_run(tmp_path)
    # kept, as a note about the host (the run record's events), not as command output
    assert LOGIN_OUTPUT_NOTE + banner.text in (run_dir / "events.jsonl").read_text()
