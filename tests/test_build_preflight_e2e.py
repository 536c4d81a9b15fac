"""Build faults that fail in preflight (while planning: nothing uploaded, nothing compiled), end to
end on real sshd test hosts: one line naming the host, the cause and the fix.

Only the GPU and the driver are faked (a fake nvidia-smi); the rest is real: the torch extension
and CMake project of tests/data/ext, a noexec tmpfs, memory cgroups, a venv without build tools,
the login environment sshd gives every session.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.support.fake_gpu import B200, H200, RTX_PRO_6000, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import cmake_ext, memory_cgroup, tmpfs, tool_venv, torch_ext

import pytest

pytestmark = pytest.mark.sshd

BUILD_PLAY = """\
name: build a tiny extension
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      archs: "{{{{ archs | default(facts.build.torch_cuda_arch_list) }}}}"
      no_build_isolation: "{{{{ build_in_venv | default(true) }}}}"
      max_jobs: 1
"""


def play(tmp_path: Path, src: Path, name: str = "play.yaml") -> Path:
    path = tmp_path / name
    path.write_text(BUILD_PLAY.format(src=src))
    return path


def entry(farm, host, tmp_path: Path, **extra) -> dict:
    return {**host.inventory_vars(farm.known_hosts), "workdir": str(tmp_path / "work" / host.name), **extra}


def build_task(home: Path, host: str) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return [t for t in record["hosts"][host]["tasks"] if t["action"] == "build_wheel"][0]


def refused_before_upload(res, home: Path, tmp_path: Path, host: str, *expected: str) -> str:
    """The host's build failed in preflight with every ``expected`` piece in its message, the
    summary has it on one line with the host's name, and nothing reached the host's workdir."""
    build = build_task(home, host)
    assert build["status"] == "failed" and build["msg"].startswith("preflight: "), build
    assert "found while planning: nothing was uploaded or run" in build["msg"], build["msg"]
    for piece in expected:
        assert piece in build["msg"], (piece, build["msg"])
    lines = [ln for ln in res.stdout.splitlines()
             if ln.split(" |")[0].strip() == host and "FAILED" in ln and "build: preflight: " in ln]
    assert lines, res.stdout[-3000:]
    assert not (tmp_path / "work" / host / "src").exists()  # the sources were never uploaded
    return build["msg"]


def test_driver_older_than_the_toolkit_fails_naming_both(sshd_farm, tmp_path):
    h = sshd_farm.start("old-driver")
    write_fake_nvidia_smi(h.bin_dir, [H200], driver="535.104.05")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"old-driver": entry(sshd_farm, h, tmp_path,
                                                                            venv=tool_venv(tmp_path / "venv"))}})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play(tmp_path, torch_ext(tmp_path / "ext"))),
                   home=tmp_path)
    assert res.returncode == 1
    refused_before_upload(res, tmp_path, tmp_path, "old-driver",
                          "driver 535.104.05 is older than nvcc 13.0 at /usr/local/cuda/bin/nvcc needs "
                          "(CUDA 13.x needs driver >= 580.65.06): install driver >= 580")


def test_arch_tokens_torch_or_nvcc_reject_are_named_before_compiling(sshd_farm, tmp_path):
    venv = tool_venv(tmp_path / "venv")
    hosts = {}
    for name, gpus, archs in (("f-arch", [RTX_PRO_6000], "12.0f"), ("volta", [H200], "7.0;9.0a"),
                              ("uncovered", [H200, B200], "9.0a"), ("ptx-ok", [H200, B200], "8.0+PTX;9.0a")):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, gpus)
        hosts[name] = entry(sshd_farm, h, tmp_path, venv=venv, archs=archs)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    src = torch_ext(tmp_path / "ext")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--plan", "--json", "--playbook", str(play(tmp_path, src)),
                   home=tmp_path)
    plans = json.loads(res.stdout)
    assert plans["ptx-ok"]["builds"][0]["action"] == "build", plans["ptx-ok"]  # B200 runs compute_80 PTX (JIT)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--limit", "f-arch:volta:uncovered",
                   "--playbook", str(play(tmp_path, src)), home=tmp_path)
    assert res.returncode == 1
    refused_before_upload(res, tmp_path, tmp_path, "f-arch", "arch 12.0f: torch 2.13.0+cpu's torch.utils.cpp_extension "
                          "rejects it (Unknown CUDA arch (12.0f) or GPU not supported)")
    refused_before_upload(res, tmp_path, tmp_path, "volta", "nvcc 13.0 at /usr/local/cuda/bin/nvcc rejects compute_70")
    refused_before_upload(res, tmp_path, tmp_path, "uncovered", "arch list 9.0a runs on none of GPU 1 (NVIDIA B200, 10.0)",
                          "add the GPU's own arch, or an older arch with +PTX")
    assert sorted(p.name for p in src.iterdir()) == ["csrc", "pyproject.toml", "setup.py", "tiny_torch_ext"]


def test_noexec_workdir_and_cgroup_memory_limits_are_read_before_building(sshd_farm, tmp_path):
    venv = tool_venv(tmp_path / "venv")
    hosts, started = {}, {}
    for name in ("noexec", "tight", "roomy"):
        h = started[name] = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = entry(sshd_farm, h, tmp_path, venv=venv)
    hosts["noexec"]["workdir"] = str(tmp_path / "noexec-fs" / "work")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    with tmpfs(tmp_path / "noexec-fs", "64m", "noexec"), \
            memory_cgroup(started["tight"].proc.pid, 320, "tight"), memory_cgroup(started["roomy"].proc.pid, 3000, "roomy"):
        facts = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
        assert facts["noexec"]["workdir_fs"]["noexec"] is True
        roomy = facts["roomy"]
        assert roomy["mem_limit_mib"] == 3000 and roomy["cgroup"]["version"] in (1, 2)
        assert roomy["build"]["max_jobs"] == 1  # 3000 MiB less 1024 MiB headroom holds no 6144 MiB job
        assert any("limit 3000 MiB" in n and "usable" in n for n in roomy["build"]["notes"]), roomy["build"]["notes"]
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--limit", "noexec:tight",
                       "--playbook", str(play(tmp_path, torch_ext(tmp_path / "ext"))), home=tmp_path)
    assert res.returncode == 1
    refused_before_upload(res, tmp_path, tmp_path / "noexec-fs", "noexec",
                          f"the workdir's file system ({tmp_path / 'noexec-fs' / 'work'}/runs/", ") is mounted noexec",
                          "set the host var workdir to a folder on an exec, writable file system")
    refused_before_upload(res, tmp_path, tmp_path, "tight", "MiB of memory for the build (cgroup v",
                          "limit 320 MiB", "it needs 1024 MiB (min_free_mem_mib)")


def test_build_isolation_hints_and_the_packages_own_requirements(sshd_farm, tmp_path):
    import subprocess
    import sys

    bare = tmp_path / "bare-venv"  # a venv with ensurepip's pip and setuptools only: no torch, no build tools
    subprocess.run([sys.executable, "-m", "venv", str(bare)], check=True)
    venv = tool_venv(tmp_path / "venv")
    own = cmake_ext(tmp_path / "cmake-ext")
    pyproject = own / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('requires = ["scikit-build-core>=0.10"]',
                                                       'requires = ["scikit-build-core>=0.10", "tiny-codegen>=1.0"]'))
    hosts = {}
    for name, extra in (("bare", {"venv": str(bare)}), ("isolated", {"venv": venv, "build_in_venv": False}),
                        ("own-reqs", {"venv": venv})):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = entry(sshd_farm, h, tmp_path, **extra)
    torch_src = torch_ext(tmp_path / "ext")
    inv = write_inventory(tmp_path / "inv.yaml", {"t": {k: v for k, v in hosts.items() if k != "own-reqs"},
                                                  "c": {"own-reqs": hosts["own-reqs"]}})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "t", "--playbook", str(play(tmp_path, torch_src)), home=tmp_path)
    assert res.returncode == 1
    msg = refused_before_upload(res, tmp_path, tmp_path, "bare", f"torch does not import in {bare}",
                                f"build requirements missing in {bare}: packaging, wheel",
                                f"install them into the venv: {bare}/bin/python3 -m pip install packaging wheel")
    assert "no_build_isolation: false" not in msg and "build-isolation" not in msg  # never the setting that fails
    # the venv probe's own lines (its start marker, its JSON answer) are fleetctl's protocol, not the
    # host's words: kept in the log marked apart, left out of `fleetctl logs RUN` (fresh operator's
    # trial: "bare: @@FLEETCTL_PROBE_STARTED@@" and raw JSON shown as if the host printed them)
    raw = (last_run(tmp_path) / "logs" / "bare.log").read_text()
    assert "out~ @@FLEETCTL_PROBE_STARTED@@\n" in raw and "out| @@FLEETCTL" not in raw, raw[-3000:]
    shown = fleetctl("logs", last_run(tmp_path).name, home=tmp_path)
    assert shown.returncode == 0 and "bare: ==> build: FAILED preflight: " in shown.stdout, shown.stderr
    assert "@@FLEETCTL" not in shown.stdout and '": {' not in shown.stdout, shown.stdout[-3000:]
    refused_before_upload(res, tmp_path, tmp_path, "isolated",
                          "an isolated build cannot import torch (ModuleNotFoundError: No module named 'torch')",
                          "no_build_isolation: true (the default)")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "c", "--playbook", str(play(tmp_path, own, "own.yaml")),
                   home=tmp_path)
    assert res.returncode == 1
    refused_before_upload(res, tmp_path, tmp_path, "own-reqs", f"build requirements missing in {venv}: tiny-codegen>=1.0 "
                          "(the package's own [build-system] requires)")


def test_stray_login_environment_is_unset_for_every_step_and_named(sshd_farm, tmp_path):
    shadow = tmp_path / "shadow"  # what a stray PYTHONPATH would import instead of the venv's torch
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text("__version__ = '0.0.0-shadow'\n")
    h = sshd_farm.start("stray", env={"VIRTUAL_ENV": "/home/u/old-venv", "CONDA_PREFIX": "/opt/conda",
                                      "PYTHONPATH": str(shadow)})
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = tool_venv(tmp_path / "venv")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"stray": entry(sshd_farm, h, tmp_path, venv=venv)}})
    pb = tmp_path / "env.yaml"
    pb.write_text(textwrap.dedent("""\
        name: show the environment
        hosts: all
        tasks:
          - name: env
            command: {argv: [/usr/bin/env]}
            register: shown
          - name: check
            fail: {msg: "stray variables reached the step"}
            when: "'VIRTUAL_ENV=' in shown.stdout or 'CONDA_PREFIX=' in shown.stdout"
        """))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(pb), home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    assert ("the login environment sets VIRTUAL_ENV=/home/u/old-venv, CONDA_PREFIX=/opt/conda: every step runs "
            "with them unset") in res.stdout, res.stdout
    log = (last_run(tmp_path) / "logs" / "stray.log").read_text()
    assert "VIRTUAL_ENV=" not in log and "CONDA_PREFIX=" not in log and f"PYTHONPATH={shadow}" in log
    facts = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["stray"]["facts"]
    assert facts["python"]["torch"] == __import__("torch").__version__  # the probe ignored the stray PYTHONPATH
    assert facts["login_env"]["PYTHONPATH"] == str(shadow)
