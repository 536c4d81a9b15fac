"""A login rc file that reads stdin (operator trial: ``read -t 2 -r line && echo "bashrc ate:
$line" >&2`` in ``~/.bashrc`` for non-interactive shells) takes the first bytes of an upload sent
through the shell, before the put script runs. ``fleetctl copy`` failed with "the upload was cut
off", and the host's log held nothing of what the login shell printed; over SFTP the same file
took SFTP's first packet and the copy hung until its deadline. The failure now names the login
shell reading stdin, quotes what it printed (naming .bashrc), and the host's log keeps it; nothing
is written and an existing file is kept. Real sshd hosts on loopback, with and without SFTP."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

#: The trial's ~/.bashrc line: only non-interactive shells (every ssh command) read stdin.
EATER = 'case $- in *i*) ;; *) read -t 2 -r line && echo "bashrc ate: $line" >&2;; esac\n'


@pytest.mark.parametrize("sftp", [False, True], ids=["exec", "sftp"])
def test_an_upload_whose_stdin_the_login_shell_read_names_it_and_the_log_keeps_what_it_printed(sshd_farm, tmp_path,
                                                                                                sftp):
    h = sshd_farm.start(f"eat{int(sftp)}", shell="bash", sftp=sftp)
    home = Path(pwd.getpwnam(h.user).pw_dir)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"n-bash": h.inventory_vars(sshd_farm.known_hosts)}})
    src = tmp_path / "three.txt"
    src.write_text("one\ntwo\nthree\n")
    dst = home / "dst.txt"
    dst.write_text("kept\n")
    (home / ".bashrc").write_text(EATER)
    try:
        # a short connect timeout bounds the SFTP start that never answers (its first packet was read)
        res = fleetctl("-i", str(inv), "copy", str(src), str(dst), "--hosts", "n-bash", "--connect-timeout", "4",
                       home=tmp_path, timeout_s=60)
        assert res.returncode == 1, res.stdout + res.stderr
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("n-bash: FAILED: "))
        assert f"upload {src} -> {dst}: the remote login shell read the upload's stdin before it ran the command" \
            in line, line
        assert "~/.bashrc" in line and "it printed: bashrc ate: " in line, line
        assert "cut off" not in line and "nothing was written" in line, line
        # the host's log keeps what the login shell printed, as the host's stderr
        log = fleetctl("logs", last_run(tmp_path).name, "n-bash", home=tmp_path)
        assert any(ln.startswith("err| bashrc ate: ") for ln in log.stdout.splitlines()), log.stdout
        # nothing partial is left, the file that was there is kept
        assert dst.read_text() == "kept\n"
        assert sorted(p.name for p in home.iterdir() if p.name.startswith(".dst")) == []
    finally:
        (home / ".bashrc").write_text("")
        dst.unlink(missing_ok=True)


def test_facts_on_a_host_whose_login_shell_reads_stdin_name_it_not_a_python_error(sshd_farm, tmp_path):
    """The same rc file takes the first line of the run's first command's stdin (the host script
    fleetctl sends to ``python3 -c BOOT``): facts failed with "printed no JSON object (exit 1):
    ValueError: invalid literal for int()", hiding the rc file. That line is a mark now: taken, the
    command runs nothing and the failure names the login shell reading stdin, quoting what it printed."""
    h = sshd_farm.start("eatfacts", shell="bash")
    home = Path(pwd.getpwnam(h.user).pw_dir)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"n-bash": h.inventory_vars(sshd_farm.known_hosts)}})
    (home / ".bashrc").write_text(EATER)
    try:
        res = fleetctl("-i", str(inv), "facts", "--hosts", "n-bash", home=tmp_path, timeout_s=60)
        assert res.returncode == 1, res.stdout + res.stderr
        said = " ".join((res.stdout + res.stderr).split())
        assert "facts script did not run: the remote login shell read the command's stdin (the host script " \
               "fleetctl sends) before it ran the command" in said, said
        assert "~/.bashrc" in said and "bashrc ate: @@FLEETCTL_STDIN@@" in said, said
        assert "invalid literal" not in said, said
    finally:
        (home / ".bashrc").write_text("")
