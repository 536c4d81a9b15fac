"""A wheel whose build finished is not lost when the connection drops before its checks and stamp.

A fresh operator's trial: the host's sshd session processes were killed during ``deploy --hosts
good`` after ``Successfully built``; the wheel stayed in the host's ``wheels/<key>/`` with the build's
record, without its stamp, and the next deploy rebuilt from scratch (24 s). The build's folder is
named by the build key (the sources, archs, CUDA, torch, Python, flags), so a complete wheel there with
the build's record is the build of these inputs: the next deploy checks it as a fresh build's wheel
is checked (what the build used, one wheel, a whole zip, the SASS), stamps it and goes on. Real sshd
test host, a real venv, the toy CUDA package really built."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import make_host_venv
from tests.test_faults_e2e import children

pytestmark = pytest.mark.sshd


def _wait_for(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_a_built_wheel_whose_connection_dropped_before_its_stamp_is_checked_and_kept_next_run(sshd_farm, tmp_path):
    h = sshd_farm.start("good")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    hold, reached = tmp_path / "hold", tmp_path / "reached"
    real = shutil.which("sha256sum")
    # the host's sha256sum stops at the built wheel while `hold` exists: the moment after the build
    # (the wheel whole, its stamp not written yet), when the test drops the connection
    (h.bin_dir / "sha256sum").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *.whl) [ -e {hold} ] && touch {reached}; while [ -e {hold} ]; do sleep 0.1; done ;; esac
        exec {real} "$@"
        """))
    (h.bin_dir / "sha256sum").chmod(0o755)
    work = tmp_path / "work" / "good"
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"good": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(work),
        "venv": make_host_venv(tmp_path / "venv-good")}}})
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    argv = ("-i", str(inv), "deploy", "--hosts", "good", "--playbook", str(play))

    hold.touch()
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        assert _wait_for(reached.exists, 600), proc.stderr
        for pid in children(h.proc.pid):  # the per-connection sshd processes die: the connection drops
            try:
                if b"sshd" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        out, err = proc.communicate(timeout=120)
    finally:
        hold.unlink()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, out[-2000:] + err[-2000:]
    (folder,) = (work / "wheels").iterdir()
    assert [p.name for p in folder.glob("*.whl")] and not (folder / ".fleetctl-build.json").exists()

    res = fleetctl(*argv, home=tmp_path, timeout_s=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = last_run(tmp_path)
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] == "build.started"], "built again"
    tasks = {t["action"]: t for t in json.loads((run_dir / "run.json").read_text())["hosts"]["good"]["tasks"]}
    assert tasks["build_wheel"]["status"] == "changed", tasks["build_wheel"]
    assert "interrupted" in tasks["build_wheel"]["msg"], tasks["build_wheel"]["msg"]
    assert tasks["pip_install"]["status"] == "changed", tasks["pip_install"]
    assert (folder / ".fleetctl-build.json").exists()
    again = fleetctl(*argv, home=tmp_path, timeout_s=600)  # stamped: an ordinary reuse from now on
    assert again.returncode == 0 and "unchanged inputs: reusing" in json.dumps(
        json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["good"]), again.stdout[-2000:]


def test_a_wheel_that_failed_its_checks_is_never_kept_as_an_interrupted_builds(sshd_farm, tmp_path):
    """The toy wheel holds no SASS: its check fails, the wheel stays in its build folder marked
    refused, and the next deploy builds again (and fails alike) rather than keep it unstamped."""
    h = sshd_farm.start("sass")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"sass": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(work), "venv": make_host_venv(tmp_path / "venv")}}})
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)).replace("check_sass: false", "check_sass: true"))
    for _ in range(2):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "sass", "--playbook", str(play), home=tmp_path)
        run_dir = last_run(tmp_path)
        build = next(t for t in json.loads((run_dir / "run.json").read_text())["hosts"]["sass"]["tasks"]
                     if t["action"] == "build_wheel")
        assert res.returncode == 1 and "lacks sm_90a" in build["msg"], build["msg"]
        assert '"build.started"' in (run_dir / "events.jsonl").read_text(), build["msg"]
        (folder,) = (work / "wheels").iterdir()
        assert list(folder.glob("*.whl")) and (folder / ".fleetctl-refused").exists()
