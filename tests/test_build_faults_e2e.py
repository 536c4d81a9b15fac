"""Build-time faults end to end: a full disk, and a compiler killed for memory."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs (needs root, which CI has): a disk that fills up."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_names_the_cause_and_leaves_no_partial_file(sshd_farm, tmp_path, small_tmpfs):
    h = sshd_farm.start("full")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"full": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                 "workdir": str(small_tmpfs / "work"),
                                                                 "venv": make_host_venv(tmp_path / "venv")}}})
    up = tmp_path / "up.yaml"
    up.write_text(f"name: up\nhosts: all\ngather_facts: false\ntasks:\n"
                  f"  - name: upload\n    copy: {{src: {big}, dest: '{{{{ workdir }}}}/big.bin'}}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(up), home=tmp_path)
    assert res.returncode == 1
    error = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["full"]["error"]
    assert "disk full" in error or "No space left" in error, error
    assert not [p for p in small_tmpfs.rglob("*") if p.is_file() and p.stat().st_size > 0 and "big" in p.name]
    # a build on that disk stops in preflight, before anything installed is touched
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", home=tmp_path)
    assert res.returncode == 1
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    failed = [t for t in record["hosts"]["full"]["tasks"] if t["status"] == "failed"][0]
    assert ("MiB free" in failed["msg"] and "needs" in failed["msg"]) or "disk full" in failed["msg"], failed
    assert not any(t["action"] == "pip_install" for t in record["hosts"]["full"]["tasks"])


def fake_cuda_home(root: Path) -> Path:
    """A CUDA home whose nvcc dies like an OOM-killed cicc when MAX_JOBS > 2, else is the real one."""
    real = Path("/usr/local/cuda")
    home = root / "cuda-oom"
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for tool in (real / "bin").iterdir():
        if tool.name != "nvcc":
            (home / "bin" / tool.name).symlink_to(tool)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(textwrap.dedent("""\
        #!/bin/sh
        if [ "${MAX_JOBS:-1}" -gt 2 ]; then
          echo "nvcc error   : 'cicc' died due to signal 9 (Kill signal)" >&2
          exit 1
        fi
        exec /usr/local/cuda/bin/nvcc "$@"
        """))
    nvcc.chmod(0o755)
    return home


def test_compiler_killed_for_memory_is_named_and_retried_with_half_the_jobs(sshd_farm, tmp_path):
    h = sshd_farm.start("oom")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"oom": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
        "venv": make_host_venv(tmp_path / "venv"), "cuda_home": str(fake_cuda_home(tmp_path))}}})
    # the toy CUDA package (tests/data/toy_kernels: real nvcc, seconds a build): the retry is the
    # build task's, whatever the package; kernel_src's own build is tested in test_deploy_e2e
    play = tmp_path / "build.yaml"
    play.write_text(textwrap.dedent(f"""\
        name: build with too many jobs
        hosts: all
        tasks:
          - name: upload
            copy: {{src: {REPO / 'tests' / 'data' / 'toy_kernels'}, dest: "{{{{ workdir }}}}/src"}}
          - name: build
            build_wheel: {{src: "{{{{ workdir }}}}/src", out_dir: "{{{{ workdir }}}}/wheels", max_jobs: 4,
                          required_build_packages: [], check_sass: false, tool: pip}}
        """))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=900)
    assert res.returncode == 0, res.stdout[-4000:]
    run = last_run(tmp_path)
    build = [t for t in json.loads((run / "run.json").read_text())["hosts"]["oom"]["tasks"] if t["action"] == "build_wheel"][0]
    assert build["status"] == "changed" and build["data"]["max_jobs"] == 2
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    retry = [e for e in events if e["event"] == "build.oom_retry"]
    assert retry and retry[0]["max_jobs"] == 4 and retry[0]["next_max_jobs"] == 2
    assert b"died due to signal 9" in (run / "logs" / "oom.log").read_bytes()
