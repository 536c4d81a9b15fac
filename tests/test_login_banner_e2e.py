"""What a login shell's rc file prints (bash ``~/.bashrc``, zsh ``~/.zshenv``, tcsh ``~/.tcshrc``:
each runs for every ssh command) is never taken for command output, as a new user's trial hit it:
a failure named the banner instead of its cause, a pushed wheel's stamp read the banner as its size
and hash (a re-push on every deploy), and ``pip check`` reported the banner as a problem. Real sshd
on loopback, a dedicated login user per shell."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pwd
import shutil
from pathlib import Path

import pytest

from fleetctl.connection.ssh import LOGIN_OUTPUT_NOTE, SSHConnection
from fleetctl.tasks.base import first_error_line
from fleetctl.tasks.build_keys import parse_stat
from fleetctl.tasks.venv_state import check_problems
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv
from tests.test_class_receivers_e2e import PLAY as PUSH_PLAY  # the toy play: upload, build once, install

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
        ran = fleetctl("-i", str(inv), "run", "--hosts", "gpu04", "--json", "--", "echo", "hi", home=tmp_path)
    assert json.loads(ran.stdout)["gpu04"]["stdout"] == "hi\n", ran.stdout  # `run` shows the command's own
    assert LOGIN_OUTPUT_NOTE + banner.text in (last_run(tmp_path) / "events.jsonl").read_text()
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    failed = [ln for ln in (res.stdout + res.stderr).splitlines() if "FAILED" in ln]
    assert failed and all(banner.text not in ln for ln in failed), failed
    # the cause in facts' words (the venv is not there), named while planning, not env's raw line
    assert any("venv-moved-away" in ln and "names an environment that is not there" in ln for ln in failed), failed
    # kept, as a note about the host (the run record's events), not as command output
    verify_run = sorted(p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()
                        and json.loads((p / "run.json").read_text())["kind"] == "verify")[-1]
    assert LOGIN_OUTPUT_NOTE + banner.text in (verify_run / "events.jsonl").read_text()


def test_a_pushed_wheel_on_a_host_with_a_login_banner_is_not_pushed_again(sshd_farm, tmp_path):
    """The receiver logs in with bash, whose ~/.bashrc prints a banner (the builder does not):
    the second deploy changes nothing and pushes nothing, and pip check invents no problem."""
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(PUSH_PLAY.format(src=src))
    hosts, started = {}, {}
    for name in ("builder", "receiver"):
        h = started[name] = sshd_farm.start(f"lp-{name}")
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_venv(tmp_path / f"venv-{name}", "virtualenv", torch=False, build_tools=True),
                       "build_host": "builder"}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    banner = "Welcome to gpu01 (bashrc)"
    # a current-user host's HOME is its own folder (sshd SetEnv), where bash reads ~/.bashrc
    (started["receiver"].home / ".bashrc").write_text(f'echo "{banner}"\n')
    first = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=900)
    assert first.returncode == 0, first.stdout[-4000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    build = next(t for t in record["hosts"]["receiver"]["tasks"] if t["action"] == "build_wheel")
    assert build["data"]["pushed_from"] == "builder"
    install = next(t for t in record["hosts"]["receiver"]["tasks"] if t["action"] == "pip_install")
    assert banner not in json.dumps(install), install  # no made-up pip check problem
    for _ in range(2):  # two deploys in a row: nothing changes, nothing is pushed again
        again = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path,
                         timeout_s=600)
        assert again.returncode == 0, again.stdout[-4000:]
        assert "nothing changed: every host was already up to date" in again.stdout, again.stdout[-4000:]
        assert "changed since it was built" not in again.stdout and banner not in again.stdout
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        for name in hosts:
            assert {t["status"] for t in record["hosts"][name]["tasks"]} == {"ok"}, record["hosts"][name]["tasks"]


@pytest.mark.parametrize("shell", sorted(RC))
def test_a_banner_on_stderr_is_not_command_stderr(sshd_farm, tmp_path, shell):
    """An rc file echoing to STDERR (fresh operator's trial: it was in ``run``'s output and in
    ``--json``'s "stderr", where a stdout banner is not): the marker on stderr
    (``marked_both``) tells it apart, on every login shell; a supervised command's stderr too."""
    host = sshd_farm.start(f"le-{shell}", shell=shell)
    rc = Path(pwd.getpwnam(host.user).pw_dir) / RC[shell]
    to_err = "> /dev/stderr" if shell == "tcsh" else ">&2"  # csh's >& is both streams
    rc.write_text(f'echo "Welcome to gpu01 ({shell})"\necho "Quota warning ({shell})" {to_err}\n')
    try:
        notes: list[str] = []

        async def go():
            conn = connect(host, sshd_farm)
            conn.on_note = notes.append
            async with conn:
                both = await conn.run(["sh", "-c", "echo out; echo err >&2"])
                supervised = await conn.run(["sh", "-c", "echo err2 >&2; exit 3"], supervise=True)
                missing = await conn.run(["no-such-program-here"], supervise=True)
                return both, supervised, missing

        both, supervised, missing = asyncio.run(go())
        assert (both.stdout, both.stderr) == (b"out\n", b"err\n"), (both.stdout, both.stderr)
        assert (supervised.rc, supervised.stderr) == (3, b"err2\n"), supervised.stderr
        # setsid's own words still taken out of the first line, now that the banner is not before it
        assert missing.rc == 127 and missing.stderr.startswith(b"no-such-program-here: "), missing.stderr
        assert notes == [f"{LOGIN_OUTPUT_NOTE}Welcome to gpu01 ({shell}) | Quota warning ({shell})"], notes
        if shell == "bash":  # the CLI: run's lines and --json's "stderr"
            inv = write_inventory(tmp_path / "inv.yaml", {"g": {"le": host.inventory_vars(sshd_farm.known_hosts)}})
            res = fleetctl("-i", str(inv), "run", "--hosts", "le", "--json", "--", "sh", "-c", "echo out; echo err >&2",
                           home=tmp_path)
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["le"]["stderr"] == "err\n", res.stdout
            res = fleetctl("-i", str(inv), "run", "--hosts", "le", "--", "sh", "-c", "echo err >&2", home=tmp_path)
            assert "Quota warning" not in res.stdout + res.stderr and "le | err" in res.stdout + res.stderr, res
    finally:
        rc.write_text("")
