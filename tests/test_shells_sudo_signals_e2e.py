"""Login shells, sudo, rc-file banners and Ctrl-C/SIGTERM, end to end against real sshd test hosts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_faults_e2e import cmdline, pids_with, wait_for

pytestmark = pytest.mark.sshd

HOSTILE = ["it's", 'say "hi"', "$(touch /tmp/fleetctl-pwned)", "`id`", "a\nb", "*", "--help", "-n", "",
           "back\\slash", "!!", "é漢🚀", "$HOME", "{a,b}", "~", "%s", "a'b\"c"]
ENV = {"FLT_Q": "it's \"$(id)\" `x` \\ !! \n end", "FLT_PLAIN": "1"}


@pytest.mark.parametrize("shell", ["bash", "dash", "zsh", "fish", "tcsh"])
def test_every_login_shell_gets_argv_and_env_exactly(sshd_farm, tmp_path, shell):
    h = sshd_farm.start(f"sh-{shell}", shell=shell)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "h", "--json", "--", "/usr/bin/printf", "%s\\0", *HOSTILE,
                   home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["h"]["stdout"].split("\0")[:-1] == HOSTILE
    assert not os.path.exists("/tmp/fleetctl-pwned")
    # the environment too, through a playbook task's env
    play = tmp_path / "env.yaml"
    play.write_text("name: env\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: dump\n    command: {argv: [/usr/bin/env, '-0']}\n    register: out\n"
                    f"    env: {json.dumps(ENV)}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "h", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:]
    log = (last_run(tmp_path) / "logs" / "h.log").read_bytes()
    for k, v in ENV.items():
        assert f"{k}={v}".encode() in log.replace(b"\nout| ", b"\n")


DASHED = ["-fltprintf", "--fltprintf", "-fl=t"]


@pytest.mark.parametrize("shell", ["bash", "dash", "zsh", "fish", "tcsh"])
def test_a_first_word_starting_with_a_dash_is_the_program_under_every_login_shell(sshd_farm, tmp_path, shell):
    h = sshd_farm.start(f"sh-{shell}", shell=shell)
    for name in DASHED:  # programs whose names start with `-` (one holding `=`), found on PATH
        prog = h.bin_dir / name
        prog.write_text('#!/bin/sh\nexec /usr/bin/printf "%s\\0" "$0" "$@"\n')
        prog.chmod(0o755)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)},
                                                  "l": {"loc": {"ansible_connection": "local"}}})
    for name in DASHED:
        res = fleetctl("-i", str(inv), "run", "--hosts", "h", "--json", "--", name, *HOSTILE, home=tmp_path)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout)["h"]["stdout"].split("\0")[:-1]
        assert got[0].endswith("/" + name) and got[1:] == HOSTILE
    # a program that does not exist: "not found", 127, over SSH as over a local connection,
    # never a wrapper's (setsid's, env's, the login shell's) own --version or -n
    for word in ["--version", "-n", "--help", "A=1"]:
        res = fleetctl("-i", str(inv), "run", "--hosts", "h,loc", "--json", "--", word, "x", home=tmp_path)
        doc = json.loads(res.stdout)
        assert (doc["h"]["rc"], doc["loc"]["rc"]) == (127, 127), (word, doc)
        assert "util-linux" not in doc["h"]["stdout"] + doc["h"]["stderr"] and "GNU" not in doc["h"]["stdout"]


def test_rc_file_banner_does_not_break_uploads(sshd_farm, tmp_path):
    h = sshd_farm.start("banner", shell="bash")
    home = Path(os.path.expanduser(f"~{h.user}"))
    (home / ".bashrc").write_text('echo "Welcome to the cluster! Be nice."\n')
    try:
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"b": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                  "workdir": str(home / "fl")}}})
        src = tmp_path / "payload.txt"
        src.write_text("payload\n")
        os.chmod(tmp_path, 0o755)
        play = tmp_path / "up.yaml"
        play.write_text(f"name: up\nhosts: all\ngather_facts: false\ntasks:\n"
                        f"  - name: upload\n    copy: {{src: {src}, dest: '{{{{ workdir }}}}/payload.txt'}}\n")
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
        assert res.returncode == 0, res.stdout[-3000:]
        assert (home / "fl" / "payload.txt").read_text() == "payload\n"
    finally:
        (home / ".bashrc").write_text("")


SUDOERS = Path("/etc/sudoers.d/fleetctl-tests")


def test_become_fails_at_once_when_sudo_wants_a_password_and_keeps_env(sshd_farm, tmp_path):
    if not Path("/usr/bin/sudo").exists():
        pytest.fail("sudo is not installed (.ci/run installs it)")
    pw = sshd_farm.start("sudo-pw", shell="dash")      # user with a password rule
    ok = sshd_farm.start("sudo-ok", shell="zsh")        # user with NOPASSWD
    SUDOERS.write_text(f"{pw.user} ALL=(ALL) ALL\n{ok.user} ALL=(ALL) NOPASSWD: ALL\n"
                       f'Defaults:{ok.user} secure_path="/usr/sbin:/usr/bin:/sbin:/bin", env_reset\n')
    os.chmod(SUDOERS, 0o440)
    try:
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {
            "pw": {**pw.inventory_vars(sshd_farm.known_hosts), "workdir": f"/tmp/fltest-work-{pw.user}"},
            "ok": {**ok.inventory_vars(sshd_farm.known_hosts), "workdir": f"/tmp/fltest-work-{ok.user}"}}})
        play = tmp_path / "become.yaml"
        play.write_text("name: become\nhosts: all\ngather_facts: false\ntasks:\n"
                        "  - name: as root\n    become: true\n    env: {FLT_MARK: kept, PATH: /opt/fleet/bin:/usr/bin:/bin}\n"
                        "    command: {argv: [sh, -c, 'echo \"uid=$(id -u) mark=$FLT_MARK path=$PATH\"']}\n")
        started = time.monotonic()
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=120)
        assert time.monotonic() - started < 60  # never hangs on a prompt
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        assert record["hosts"]["pw"]["status"] == "failed"
        assert "password is required" in record["hosts"]["pw"]["error"]
        assert record["hosts"]["ok"]["status"] == "ok"
        log = (last_run(tmp_path) / "logs" / "ok.log").read_bytes()
        assert b"uid=0 mark=kept path=/opt/fleet/bin:/usr/bin:/bin" in log
        assert res.returncode == 1
    finally:
        SUDOERS.unlink(missing_ok=True)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_stops_remote_work_and_keeps_the_record(sshd_farm, tmp_path, sig, code):
    h = sshd_farm.start(f"int-{code}")
    marker = f"fleetctl-int-{code}-{os.getpid()}"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)}})
    play = tmp_path / "long.yaml"
    play.write_text("name: long\nhosts: all\ngather_facts: false\ntasks:\n"
                    f"  - name: build\n    command: {{argv: [sh, -c, 'echo compiling; sleep 300 # {marker}']}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "g", "--playbook",
                             str(play)], cwd=REPO, env={**os.environ, "FLEETCTL_HOME": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(b"out| compiling" in p.read_bytes() for p in (tmp_path / "runs").glob("*/logs/h.log")), 30)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    # README: the last line is the counts, an interrupted run's too
    assert err.splitlines()[-1] == "ok 0, failed 0, unreachable 0, interrupted 1", err[-2000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["status"] == "interrupted"
    assert record["hosts"]["h"]["status"] == "interrupted"
    assert b"out| compiling" in (last_run(tmp_path) / "logs" / "h.log").read_bytes()
    assert wait_for(lambda: not [p for p in pids_with(marker) if b"sleep 300" in cmdline(p)], 15)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_ad_hoc_run_ends_with_the_counts_line(sshd_farm, tmp_path, sig, code):
    """`fleetctl run` cut off by Ctrl-C or SIGTERM ends as deploy does: its last line on stderr is
    `ok N, failed N, unreachable N, interrupted N` (README), not only `fleetctl: interrupted`."""
    h = sshd_farm.start(f"int-{code}")
    marker = f"fleetctl-runint-{code}-{os.getpid()}"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)}})
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "g", "--",
                             "sh", "-c", f"echo started; sleep 300 # {marker}"], cwd=REPO,
                            env={**os.environ, "FLEETCTL_HOME": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(b"started" in p.read_bytes() for p in (tmp_path / "runs").glob("*/logs/h.log")), 30)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    lines = err.splitlines()
    assert lines[-2:] == [f"fleetctl: {'interrupted (SIGINT)' if code == 130 else 'terminated (SIGTERM)'}",
                          "ok 0, failed 0, unreachable 0, interrupted 1"], err[-2000:]
    assert wait_for(lambda: not [p for p in pids_with(marker) if b"sleep 300" in cmdline(p)], 15)
