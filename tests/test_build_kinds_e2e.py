"""Build faults that show during or after a real build, end to end: real sshd test hosts, real
nvcc builds of the tiny extensions in tests/data/ext, real pip installs into real venvs. Only the
GPU and the driver are faked.

One torch extension build (``torch_build``, shared by the tests of this module: archs
``8.0+PTX;9.0a`` on an H200 + B200 host, MAX_JOBS=1) serves the torch drift, +PTX and verify tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import SshdFarm
from tests.support.fake_gpu import B200, H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import (cmake4, cmake_ext, fake_torch_files, link_into, site_packages, tmpfs, tool_venv,
                                    torch_ext, without_local_cuda, wrapper_nvcc, write_wheel)

pytestmark = pytest.mark.sshd

LEFTOVERS = ("build", "_skbuild", ".eggs", "dist")

BUILD_PLAY = """\
name: build, install and verify a tiny extension
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      archs: "{{{{ archs | default(facts.build.torch_cuda_arch_list) }}}}"
      max_jobs: 1
    register: build
  - name: install
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
  - name: verify
    verify: {{package: {package}, device: "{{{{ verify_device | default('auto') }}}}"}}
"""

INSTALL_PLAY = """\
name: install a built wheel and verify it
hosts: all
tasks:
  - name: install
    pip_install: {wheel: "{{ wheel }}"}
  - name: verify
    verify: {package: "{{ package }}", smoke: false, needs_torch: "{{ needs_torch | default(true) }}"}
"""


def entry(farm, host, work: Path, **extra) -> dict:
    return {**host.inventory_vars(farm.known_hosts), "workdir": str(work / host.name), **extra}


def tasks_of(home: Path, host: str) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return {t["action"]: t for t in record["hosts"][host]["tasks"]}


def no_leftovers(src: Path) -> None:
    names = [p.name for p in src.iterdir()]
    assert not [n for n in names if n in LEFTOVERS or n.endswith(".egg-info")], names


@pytest.fixture(scope="module")
def torch_build(client_key):
    """One real build of the torch extension for ``8.0+PTX;9.0a`` on an H200 + B200 host, installed
    and verified (on the CPU: the GPUs are fake); the host and its run record for the tests."""
    root = Path(tempfile.mkdtemp(prefix="fleetctl-sshd-"))
    os.chmod(root, 0o755)
    farm = SshdFarm(root, client_key)
    home = Path(tempfile.mkdtemp(prefix="fleetctl-torch-build-"))
    try:
        h = farm.start("builder")
        write_fake_nvidia_smi(h.bin_dir, [H200, B200])
        venv = tool_venv(home / "venv")
        inv = write_inventory(home / "inv.yaml", {"g": {"builder": entry(farm, h, home / "work", venv=venv,
                                                                        archs="8.0+PTX;9.0a", verify_device="cpu")}})
        src = torch_ext(home / "torch_ext")
        play = home / "build.yaml"
        play.write_text(BUILD_PLAY.format(src=src, package="tiny_torch_ext.ops"))
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=home, timeout_s=900)
        assert res.returncode == 0, res.stdout[-5000:]
        yield {"home": home, "venv": venv, "tasks": tasks_of(home, "builder"), "farm": farm, "stdout": res.stdout,
               "remote_src": home / "work" / "builder" / "src"}
    finally:
        farm.stop_all()
        subprocess.run(["rm", "-rf", str(root), str(home)], check=False)


def test_torch_drift_is_read_inside_the_build_and_a_later_torch_change_is_refused(torch_build, sshd_farm, tmp_path):
    import torch

    build = torch_build["tasks"]["build_wheel"]
    seen = build["data"]["build_record"]["torch"]
    assert seen and {t["torch"] for t in seen} == {torch.__version__}  # read inside the build, by its own Python
    assert all(os.path.realpath(t["torch_file"]) == os.path.realpath(torch.__file__) for t in seen)  # base site: links
    # torch is upgraded in a venv after the build: installing that wheel there is refused, naming both
    venv = tool_venv(tmp_path / "venv")
    for rel, text in fake_torch_files("2.99.0+cpu").items():
        (site_packages(venv) / rel).parent.mkdir(parents=True, exist_ok=True)
        (site_packages(venv) / rel).write_text(text)
    h = sshd_farm.start("upgraded")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"upgraded": entry(sshd_farm, h, tmp_path / "work", venv=venv,
                                                                         wheel=build["data"]["wheel"],
                                                                         package="tiny_torch_ext.ops")}})
    play = tmp_path / "install.yaml"
    play.write_text(INSTALL_PLAY)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    install = tasks_of(tmp_path, "upgraded")["pip_install"]
    wheel = Path(build["data"]["wheel"]).name
    assert (f"torch drift: {wheel} was built against torch {torch.__version__} (CPU, recorded inside the build), "
            f"but {venv} runs torch 2.99.0+cpu (CPU): rebuild it") in install["msg"], install["msg"]
    assert not (site_packages(venv) / "tiny_torch_ext").exists()  # nothing was installed


def test_ptx_is_kept_every_gpu_is_covered_and_the_source_tree_left_clean(torch_build):
    build = torch_build["tasks"]["build_wheel"]
    data = build["data"]
    assert data["archs"] == "8.0+PTX;9.0a"
    assert data["sass"] == ["sm_80", "sm_90a"] and data["ptx"] == ["compute_80"]
    assert data["coverage"] == {"GPU 0 (NVIDIA H200, 9.0)": "SASS sm_90a", "GPU 1 (NVIDIA B200, 10.0)": "PTX compute_80 (JIT)"}
    assert data["build_record"]["cuda_compiler"]["path"] == "/usr/local/cuda/bin/nvcc"  # from the compile commands
    no_leftovers(torch_build["remote_src"])
    assert not Path(data["tmpdir"]).exists()  # the build's TMPDIR, in the workdir, is gone
    assert torch_build["tasks"]["verify"]["status"] == "ok"


def test_verify_tells_the_truth(torch_build, sshd_farm, tmp_path):
    wheel = torch_build["tasks"]["build_wheel"]["data"]["wheel"]
    shadow = tmp_path / "shadow" / "tiny_torch_ext"  # a source checkout on a stray PYTHONPATH
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('the source checkout was imported, not the install')\n")
    wheels = tmp_path / "wheels"
    pure = write_wheel(wheels, "tiny_pure", "0.1.0", {"tiny_pure/__init__.py": "VALUE = 1\n"},
                       requires=("tiny-missing-dep>=1",))
    write_wheel(wheels, "torch", "2.0.0", fake_torch_files("2.0.0"))
    evil = write_wheel(tmp_path / "evil", "tiny_evil", "0.1.0", {"tiny_evil/__init__.py": "",
                                                                  "torch/version.py": "__version__ = '9.9.9'\ncuda = None\n"})
    plain = tmp_path / "plain-venv"  # ensurepip's pip, no torch: the pure and the torch-moving installs
    for v in ("pure", "evil"):
        subprocess.run([sys.executable, "-m", "venv", str(plain / v)], check=True)
    subprocess.run([str(plain / "evil" / "bin" / "python3"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    str(wheels / "torch-2.0.0-py3-none-any.whl")], check=True)
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    hosts = {}
    for name, gpus, env, extra in (
            ("cpu-torch", [H200], {}, {"package": "tiny_torch_ext.ops"}),
            ("order", [], {}, {"package": "tiny_torch_ext._C"}),
            ("shadowed", [], {"PYTHONPATH": str(shadow.parent)}, {"package": "tiny_torch_ext.ops"}),
            ("pure", [H200], offline, {"package": "tiny_pure", "wheel": str(pure), "venv": str(plain / "pure"),
                                       "needs_torch": False}),
            ("evil", [], offline, {"package": "tiny_evil", "wheel": str(evil), "venv": str(plain / "evil")})):
        h = sshd_farm.start(name, env=env)
        if gpus:  # the others are build hosts: no NVIDIA driver (an nvidia-smi listing none is a broken stack)
            write_fake_nvidia_smi(h.bin_dir, gpus)
        hosts[name] = entry(sshd_farm, h, tmp_path / "work", **{"venv": tool_venv(tmp_path / f"venv-{name}"),
                                                               "wheel": wheel, **extra})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    play = tmp_path / "install.yaml"
    play.write_text(INSTALL_PLAY)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    t = {h: tasks_of(tmp_path, h) for h in hosts}
    assert t["cpu-torch"]["verify"]["status"] == "failed"  # refused while planning, before the install
    assert ("is a CPU-only build (its version.py says cuda = None) and the host has 1 GPU(s) nvidia-smi lists"
            in t["cpu-torch"]["verify"]["msg"]), t["cpu-torch"]["verify"]["msg"]
    assert "pip_install" not in t["cpu-torch"] or t["cpu-torch"]["pip_install"]["status"] != "changed"
    assert t["order"]["verify"]["status"] == "failed"
    assert "import-order: tiny_torch_ext._C imports only after torch (ImportError: libc10.so" in t["order"]["verify"]["msg"]
    shadowed = t["shadowed"]["verify"]
    # installed and checked isolated (python -I: the stray PYTHONPATH is not on sys.path), the venv's copy...
    assert [c for c in shadowed["data"]["checks"] if c["name"] == "location"][0]["detail"].startswith(
        str(site_packages(hosts["shadowed"]["venv"]).resolve()))
    # ...but the host's users import the checkout on their PYTHONPATH: verify fails, naming it
    assert shadowed["status"] == "failed", shadowed
    assert (f"login-import: as the host's users import it (the venv's python with PYTHONPATH={shadow.parent}), "
            "`import tiny_torch_ext.ops` fails: ImportError: the source checkout was imported, not the install; "
            f"tiny_torch_ext comes from {shadow.resolve()}/__init__.py") in shadowed["msg"], shadowed["msg"]
    assert t["pure"]["pip_install"]["status"] == "changed"
    assert "pip check: tiny-pure 0.1.0 requires tiny-missing-dep" in t["pure"]["pip_install"]["msg"]
    assert t["pure"]["verify"]["status"] == "ok"  # no torch in that venv, a GPU host: a plain import and the checks
    assert "torch not installed: verifying tiny_pure without torch" in json.dumps(t["pure"]["verify"]["data"])
    evil_msg = t["evil"]["pip_install"]["msg"]
    assert t["evil"]["pip_install"]["status"] == "failed"
    assert ("the install changed torch: 2.0.0 (cu None) -> 9.9.9 (cu None); rolled back: removed tiny_evil, "
            "reinstalled torch 2.0.0") in evil_msg, evil_msg
    torch_version = next((plain / "evil").glob("lib/python3*/site-packages/torch/version.py")).read_text()
    assert "'2.0.0'" in torch_version


def test_a_failed_build_is_summarised_by_the_compilers_first_error(sshd_farm, tmp_path):
    src = torch_ext(tmp_path / "broken")
    kernel = src / "csrc" / "kernel.cu"
    kernel.write_text(kernel.read_text().replace("if (i < n) x[i] *= a;", "if (i < n) x[i] *= ;"))
    h = sshd_farm.start("broken")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    # the tool venv's torch is the controller's CPU build: verify on the CPU (on the GPU it is refused while planning)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"broken": entry(sshd_farm, h, tmp_path / "work",
                                                                       venv=tool_venv(tmp_path / "venv"),
                                                                       verify_device="cpu")}})
    play = tmp_path / "build.yaml"
    play.write_text(BUILD_PLAY.format(src=src, package="tiny_torch_ext.ops"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    run_id = last_run(tmp_path).name
    build = tasks_of(tmp_path, "broken")["build_wheel"]
    remote_src = tmp_path / "work" / "broken" / "src"
    assert build["msg"] == (f"build failed (pip): {remote_src}/csrc/kernel.cu(4): error: expected an expression "
                            f"(full log: fleetctl logs {run_id} broken)"), build["msg"]
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("broken") and "FAILED" in ln and "kernel.cu(4)" in ln]
    logs = fleetctl("logs", run_id, "broken", home=tmp_path)
    assert "Failed to build" in logs.stdout and "kernel.cu(4): error: expected an expression" in logs.stdout
    no_leftovers(remote_src)


def test_cmake4_fetchcontent_externalproject_generator_and_a_noexec_login_tmpdir(sshd_farm, tmp_path):
    with tmpfs(tmp_path / "login-tmp", "1m", "noexec") as login_tmp:
        h = sshd_farm.start("cmake4", env={"TMPDIR": str(login_tmp)})
        write_fake_nvidia_smi(h.bin_dir, [H200])
        venv = tool_venv(tmp_path / "venv")
        link_into(Path(venv) / "bin", cmake4())  # as `pip install cmake` puts CMake 4 in a venv
        src = cmake_ext(tmp_path / "cmake_ext")
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"cmake4": entry(sshd_farm, h, tmp_path / "work", venv=venv,
                                                                           verify_device="cpu")}})
        play = tmp_path / "build.yaml"
        play.write_text(BUILD_PLAY.format(src=src, package="tiny_cmake_ext"))
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    assert f"TMPDIR {login_tmp} is noexec: builds use a folder in the workdir instead" in res.stdout
    t = tasks_of(tmp_path, "cmake4")
    record = t["build_wheel"]["data"]["build_record"]
    assert record["cmake"]["version"].startswith("4.") and record["cmake"]["path"].endswith("/cmake")
    assert record["cmake"]["policy_version_minimum"] == "3.5"  # from the environment: the dependencies got it too
    assert record["cuda_compiler"]["path"] == "/usr/local/cuda/bin/nvcc" and record["cuda_compiler"]["version"].startswith("13.0")
    assert t["build_wheel"]["data"]["sass"] == ["sm_90a"]
    log = (last_run(tmp_path) / "logs" / "cmake4.log").read_text()
    assert "Linking C executable gen" in log and "Performing configure step for 'extdep'" in log
    assert t["verify"]["status"] == "ok", t["verify"]["msg"]
    no_leftovers(tmp_path / "work" / "cmake4" / "src")


def test_the_compiler_fleetctl_asks_for_is_the_one_used_and_found_where_cuda_lives(sshd_farm, tmp_path):
    versioned = without_local_cuda(sshd_farm, "versioned", keep_versioned=True)
    toolkit = sshd_farm.root / "opt-cuda"  # where the login user can reach it (pytest's tmp_path is private to root)
    login = without_local_cuda(sshd_farm, "login-only", shell="bash", login_path_toolkit=toolkit)
    other = wrapper_nvcc(tmp_path / "other-cuda")
    picky = sshd_farm.start("picky", env={"TINY_CUDA_COMPILER": str(other)})  # the project picks its own nvcc
    for h in (versioned, login, picky):
        write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = tool_venv(tmp_path / "venv")
    inv = write_inventory(tmp_path / "inv.yaml", {
        "f": {"versioned": entry(sshd_farm, versioned, tmp_path / "work"),
              "login-only": {**login.inventory_vars(sshd_farm.known_hosts)}},
        "b": {"picky": entry(sshd_farm, picky, tmp_path / "work", venv=venv, verify_device="cpu")}})
    facts = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "f", "--json", home=tmp_path).stdout)
    assert facts["versioned"]["cuda"]["home"] == "/usr/local/cuda-13.0"
    assert facts["versioned"]["cuda"]["source"] == "/usr/local/cuda-*"
    assert facts["login-only"]["cuda"]["home"] == str(toolkit)
    assert facts["login-only"]["cuda"]["source"] == "interactive login PATH"
    assert any("nvcc is only on the interactive login PATH" in n for n in facts["login-only"]["build"]["notes"])
    play = tmp_path / "build.yaml"
    play.write_text(BUILD_PLAY.format(src=cmake_ext(tmp_path / "cmake_ext"), package="tiny_cmake_ext"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "b", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    build = tasks_of(tmp_path, "picky")["build_wheel"]
    assert (f"build failed (pip): the build used the CUDA compiler {other} (13.0.88), not /usr/local/cuda/bin/nvcc (13.0) "
            "that fleetctl asked for (seen in the CMake configure)") in build["msg"], build["msg"]
    log = (last_run(tmp_path) / "logs" / "picky.log").read_text()
    assert "Building CUDA object" not in log  # stopped at configure, before anything compiled
