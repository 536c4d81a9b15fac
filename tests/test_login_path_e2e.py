"""A login PATH without /usr/bin (``export PATH=$HOME/bin:$HOME/.local/bin`` in ``~/.zshenv``, the
usual typo with ``$PATH`` left off): operator trial, ``fleetctl run -- /usr/bin/id -un`` failed
three times in five with a bare ``rc=143``, and ``/bin/sh -c 'echo start; /bin/sleep 3; echo end'``
was killed after ``start``. fleetctl's supervisor looked up its own helpers (``cat``, ``timeout``,
``setsid``) on the login's PATH: its watcher found no ``cat``, ended at once and stopped the
command. The supervisor's helpers now come from a fixed standard PATH (the command keeps the
login's), and a command not found on the login's PATH is said to be so, naming that PATH. Real sshd
on loopback, the suite's zsh login user (its ``~/.zshenv`` emptied after)."""

from __future__ import annotations

import asyncio
import json
import pwd
from pathlib import Path

import pytest

from fleetctl.connection.ssh import SSHConnection
from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

#: The login's PATH the rc file sets: no /usr/bin, no /bin.
TYPO = "export PATH=$HOME/bin:$HOME/.local/bin\n"


class LoginPath:
    """The zsh login user's ``~/.zshenv`` sets :data:`TYPO`; emptied after."""

    def __init__(self, host) -> None:
        self.home = Path(pwd.getpwnam(host.user).pw_dir)
        self.path = self.home / ".zshenv"
        self.login_path = f"{self.home}/bin:{self.home}/.local/bin"

    def __enter__(self) -> "LoginPath":
        self.path.write_text(TYPO)
        return self

    def __exit__(self, *exc) -> None:
        self.path.write_text("")


def test_commands_under_a_login_path_without_usr_bin_run_to_their_end(sshd_farm):
    """Many short commands (the race: the watcher used to TERM the command as soon as it found no
    ``cat``), one that outlives the watcher's start, and one with an environment and a working
    directory (``env`` and the cd script are fleetctl's too): each runs to its end, rc 0, and the
    command still sees the login's PATH."""
    host = sshd_farm.start("lp-run", shell="zsh")

    async def go(login_path: str):
        conn = SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                             key_file=str(host.client_key), known_hosts=str(sshd_farm.known_hosts))
        async with conn:
            shorts = [await conn.run(["/usr/bin/id", "-un"]) for _ in range(12)]
            slow = await conn.run(["/bin/sh", "-c", "echo start; /bin/sleep 1; echo end"])
            seen = await conn.run(["/bin/sh", "-c", 'echo "$PATH"'], env={"A": "b"}, cwd="/")
            return shorts, slow, seen

    with LoginPath(host) as lp:
        shorts, slow, seen = asyncio.run(go(lp.login_path))
    assert [(r.rc, r.stdout) for r in shorts] == [(0, f"{host.user}\n".encode())] * 12, [
        (r.rc, r.stdout, r.stderr) for r in shorts]
    assert (slow.rc, slow.stdout, slow.stderr) == (0, b"start\nend\n", b""), slow
    assert (seen.rc, seen.stdout) == (0, f"{lp.login_path}\n".encode()), seen  # the login's PATH, untouched


def test_run_says_a_command_is_not_found_on_the_login_path(sshd_farm, tmp_path):
    """``run -- id -un`` (a bare name the login's PATH does not hold) ends rc 127 with one line that
    names the login's PATH, as ``/nonexistent/cmd`` says it could not start; ``run -- /usr/bin/id
    -un`` is ok."""
    host = sshd_farm.start("lp-cli", shell="zsh")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": host.inventory_vars(sshd_farm.known_hosts)}})
    with LoginPath(host) as lp:
        ok = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "/usr/bin/id", "-un", home=tmp_path)
        missing = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "id", "-un", home=tmp_path)
    assert ok.returncode == 0 and f"{host.user}" in ok.stdout, ok.stdout + ok.stderr
    assert missing.returncode == 1, missing.stdout + missing.stderr
    cause = f"rc=127: id could not start on the host: not found on the login's PATH ({lp.login_path})"
    assert f"h: FAILED: {cause}" in missing.stderr.splitlines(), missing.stderr
    assert json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["h"]["error"] == cause


def test_copy_and_fetch_under_a_login_path_without_usr_bin(sshd_farm, tmp_path):
    """Operator trial: ``copy`` failed with ``base64: not found`` (the ``/bin/sh`` wrapper of a line
    no login shell may parse alike decoded it with ``base64`` looked up on the login's PATH); it
    comes from the fixed helper PATH now, and copy and fetch both work."""
    host = sshd_farm.start("lp-copy", shell="zsh")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": host.inventory_vars(sshd_farm.known_hosts)}})
    src = tmp_path / "payload.txt"
    src.write_text("x\n")
    with LoginPath(host) as lp:
        dest = lp.home / "payload.txt"
        try:
            copied = fleetctl("-i", str(inv), "copy", "--hosts", "g", str(src), str(dest), home=tmp_path)
            fetched = fleetctl("-i", str(inv), "fetch", "--hosts", "g", str(dest), str(tmp_path / "out"),
                               home=tmp_path)
        finally:
            dest.unlink(missing_ok=True)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    got = [p.read_text() for p in (tmp_path / "out").rglob("payload.txt")]
    assert got == ["x\n"], list((tmp_path / "out").rglob("*"))
