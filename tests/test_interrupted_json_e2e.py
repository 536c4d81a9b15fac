"""``--json`` still prints its one document when a signal ends the run (operator trial: the nightly
job's ``timeout`` ends it with SIGTERM, and stdout was 0 bytes, so the summary an alert reads never
reached cron.log): after the run is wound down, stdout holds the command's own document, each
host's status (``ok``, ``interrupted``...) in it, and the exit status stays 130 / 143.

Real fleetctl processes, real signals, real sshd test hosts on loopback: one host's work ends at
once, the other's sleeps until the signal (:mod:`fleetctl.cli.runend`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_faults_e2e import wait_for
from tests.test_interrupt_cleanup_e2e import _running

pytestmark = pytest.mark.sshd


def _hosts(home: Path) -> dict:
    """run.json's host statuses (rewritten as hosts finish), {} before there is one."""
    try:
        record = json.loads((last_run(home) / "run.json").read_text())
    except (OSError, ValueError, IndexError):
        return {}
    return {h: o.get("status") for h, o in (record.get("hosts") or {}).items()}


def _farm(sshd_farm, tmp_path: Path, token: str, job: bool = True) -> tuple[Path, Path]:
    """Hosts ``quick`` and ``slow`` and their inventory; with ``job``, each host's PATH has a
    ``job``: quick's prints a line and ends, slow's notes it started in ``mark`` and sleeps."""
    mark = tmp_path / "slow-started"
    hosts = {}
    for name in ("quick", "slow"):
        h = sshd_farm.start(f"js-{name}")
        if job:
            script = "echo quick-said-this\n" if name == "quick" else f"echo $$ >> {mark}\nexec sleep {token}\n"
            (h.bin_dir / "job").write_text("#!/bin/sh\n" + script)
            (h.bin_dir / "job").chmod(0o755)
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / f"w-{name}")}
    return write_inventory(tmp_path / "inv.yaml", {"g": hosts}), mark


def _interrupted(argv: list[str], home: Path, ready, sig: int) -> subprocess.CompletedProcess:
    """Run ``fleetctl ARGV``, send it ``sig`` once ``ready()``, and wait for its end."""
    env = {**os.environ, "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", *argv], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not wait_for(ready, 90):
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{argv}: not ready (rc {proc.returncode}): {out[-1500:]} {err[-2500:]}")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _started_and_quick_done(home: Path, mark: Path):
    return lambda: mark.exists() and _hosts(home).get("quick") == "ok"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_an_interrupted_run_json_prints_its_document_with_each_hosts_status(sshd_farm, tmp_path, sig):
    token = str(910000 + os.getpid() % 9999)  # this test's sleep, told apart from any other
    inv, mark = _farm(sshd_farm, tmp_path, token)
    try:
        done = _interrupted(["-i", str(inv), "run", "--hosts", "g", "--json", "--metrics-file",
                             str(tmp_path / "m.prom"), "--", "job"], tmp_path, _started_and_quick_done(tmp_path, mark),
                            sig)
    finally:
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)
    assert done.returncode == 128 + sig, (done.returncode, done.stderr[-2000:])
    assert done.stderr.rstrip().endswith("ok 1, failed 0, unreachable 0, interrupted 1"), done.stderr[-2000:]
    doc = json.loads(done.stdout)  # exactly one document
    assert {h: e["status"] for h, e in doc.items()} == {"quick": "ok", "slow": "interrupted"}, doc
    assert doc["quick"]["rc"] == 0 and doc["quick"]["stdout"] == "quick-said-this\n", doc  # what it printed stays
    assert doc["slow"]["rc"] is None and doc["slow"]["error"] == "run interrupted", doc
    assert 'status="interrupted"' in (tmp_path / "m.prom").read_text()  # as before: the metrics say so too
    # the record names the signal, so the report shows the exit status the process had (a fresh
    # trial: SIGTERM exited 143, the HTML report said 130 for every interrupted run)
    run_dir = last_run(tmp_path)
    assert json.loads((run_dir / "run.json").read_text())["interrupted_by"] == sig.name
    page = tmp_path / "report.html"
    shown = fleetctl("report", run_dir.name, "--html", str(page), home=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"<b>{128 + sig}</b>: interrupted ({sig.name})" in page.read_text(), page.read_text()[:3000]


def test_an_interrupted_deploy_json_says_the_run_and_each_host_status(sshd_farm, tmp_path):
    """As the nightly job ends: ``timeout`` sends SIGTERM to ``deploy --force --json --metrics-file``."""
    token = str(920000 + os.getpid() % 9999)
    inv, mark = _farm(sshd_farm, tmp_path, token)
    play = tmp_path / "p.yaml"
    play.write_text("name: nightly\nhosts: all\ngather_facts: false\ntasks:\n"
                    "  - name: work\n    command: {argv: [job]}\n")
    try:
        done = _interrupted(["-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--force", "--json",
                             "--metrics-file", str(tmp_path / "m.prom")], tmp_path,
                            _started_and_quick_done(tmp_path, mark), signal.SIGTERM)
    finally:
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)
    assert done.returncode == 143, (done.returncode, done.stderr[-2000:])
    assert "fleetctl: terminated (SIGTERM)" in done.stderr, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert doc["status"] == "interrupted" and doc["mode"] == "apply" and doc["run_id"] == record["run_id"], doc
    assert {h: e["status"] for h, e in doc["hosts"].items()} == {"quick": "ok", "slow": "interrupted"}, doc
    assert doc["hosts"] == record["hosts"]  # the record's own entries
    assert 'status="interrupted"' in (tmp_path / "m.prom").read_text()


def test_an_interrupted_facts_json_names_the_interrupted_host(sshd_farm, tmp_path):
    """A hung ``nvidia-smi`` on one host holds its facts until SIGTERM; the other's are in."""
    token = str(930000 + os.getpid() % 9999)
    inv, mark = _farm(sshd_farm, tmp_path, token, job=False)
    slow_bin = Path(sshd_farm.hosts[-1].bin_dir)
    (slow_bin / "nvidia-smi").write_text(f"#!/bin/sh\necho $$ >> {mark}\nexec sleep {token}\n")
    (slow_bin / "nvidia-smi").chmod(0o755)
    try:
        done = _interrupted(["-i", str(inv), "facts", "--hosts", "g", "--json"], tmp_path,
                            _started_and_quick_done(tmp_path, mark), signal.SIGTERM)
    finally:
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)
    assert done.returncode == 143, (done.returncode, done.stderr[-2000:])
    doc = json.loads(done.stdout)
    assert {h: e["status"] for h, e in doc.items()} == {"quick": "ok", "slow": "interrupted"}, doc
    assert doc["slow"]["error"] == "run interrupted" and "cpu_count" in doc["quick"], doc


def test_an_interrupted_copy_json_names_the_interrupted_host(sshd_farm, tmp_path):
    """SIGTERM while slow's upload waits on its ``cat`` (its login has no SFTP: the exec fallback,
    ``cat > DEST.part``, whose ``cat`` there never reads); quick got the file at once."""
    token = str(940000 + os.getpid() % 9999)
    mark = tmp_path / "slow-started"
    hosts = {}
    for name in ("quick", "slow"):
        h = sshd_farm.start(f"jc-{name}", sftp=name == "quick")
        if name == "slow":  # only the upload's cat (its stdout a part file) hangs; any other is the real one
            (h.bin_dir / "cat").write_text(
                '#!/bin/sh\ncase "$(readlink /proc/$$/fd/1)" in *.part) echo $$ >> ' + str(mark)
                + f"; exec sleep {token};; esac\nexec /bin/cat \"$@\"\n")
            (h.bin_dir / "cat").chmod(0o755)
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / f"w-{name}")}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    src = tmp_path / "src.txt"
    src.write_bytes(b"x" * 300_000)  # more than a channel's window: the writer waits on the hung cat
    try:
        done = _interrupted(["-i", str(inv), "copy", "--hosts", "g", "--json", str(src), str(tmp_path / "d-{host}.txt")],
                            tmp_path, _started_and_quick_done(tmp_path, mark), signal.SIGTERM)
    finally:
        for pid in _running(token):
            os.kill(pid, signal.SIGKILL)
    assert done.returncode == 143, (done.returncode, done.stderr[-2000:])
    doc = json.loads(done.stdout)
    assert {h: e["status"] for h, e in doc.items()} == {"quick": "ok", "slow": "interrupted"}, doc
    assert doc["quick"]["bytes"] == 300_000 and doc["slow"]["error"] == "run interrupted", doc
