"""The sgl-kernel and nightly playbooks over sshd: patch stage for real, build stage planned (--dry-run).

The build itself is the same ``build_wheel`` that compiles kernel_src in test_deploy_e2e.py; here
the sgl-kernel tree is a small fixture the test writes (no upstream code in the repository)."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_gpu import RTX_PRO_6000, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.sgl_fixture import NEW_ROOT, OLD_ROOT, tree_digest, write_tree
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd


@pytest.mark.parametrize("layout", [OLD_ROOT, NEW_ROOT])
def test_sgl_kernel_play_patches_idempotently_and_plans_the_blackwell_build(sshd_farm, tmp_path, layout):
    h = sshd_farm.start("blackwell")
    write_fake_nvidia_smi(h.bin_dir, [RTX_PRO_6000])
    kdir = write_tree(tmp_path / "sglang", layout=layout)
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"bw": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
        "venv": make_host_venv(tmp_path / "venv")}}})
    play = str(REPO / "playbooks" / "sgl-kernel.yaml")
    args = ("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", play, "-e", f"sgl_kernel_dir={kdir}")

    first = fleetctl(*args, "--tags", "patch", home=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:]
    assert "Applied: cmake-policy-guards" in first.stdout
    assert "if(POLICY" in (kdir / "CMakeLists.txt").read_text()
    patched = tree_digest(kdir)
    again = fleetctl(*args, "--tags", "patch", home=tmp_path)
    assert again.returncode == 0
    assert "Already applied: cmake-policy-guards" in again.stdout and "Applied: " not in again.stdout.replace(
        "Already applied: ", "")
    assert tree_digest(kdir) == patched  # a second run changes no byte

    plan = fleetctl(*args, "--tags", "build", "--dry-run", home=tmp_path)
    assert plan.returncode == 0, plan.stdout[-3000:]
    build_lines = [ln for ln in plan.stdout.splitlines() if "[Build sgl-kernel" in ln and '"--wheel-dir"' in ln]
    assert build_lines, plan.stdout[-3000:]
    planned = json.loads(build_lines[-1].split("] ", 1)[1])  # the build command itself
    argv = " ".join(planned["argv"])
    for define in ("SGL_KERNEL_ENABLE_FP4=ON", "SGL_KERNEL_ENABLE_FA3=OFF", "ENABLE_BELOW_SM90=OFF",
                   "CMAKE_CUDA_ARCHITECTURES=120a", "CMAKE_POLICY_VERSION_MINIMUM=3.5"):
        assert f"cmake.define.{define}" in argv, define
    env = planned["env"]
    assert env["TORCH_CUDA_ARCH_LIST"] == "12.0a" and env["CUDACXX"].endswith("/bin/nvcc")
    assert env["PATH"].split(":")[0].endswith("/bin") and env["VIRTUAL_ENV"]
    assert tree_digest(kdir) == patched  # --dry-run touched nothing


def test_nightly_play_plans_every_stage_in_order(sshd_farm, tmp_path):
    h = sshd_farm.start("nightly")
    write_fake_nvidia_smi(h.bin_dir, [RTX_PRO_6000])
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"n": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
        "venv": make_host_venv(tmp_path / "venv")}}})
    write_tree(tmp_path / "sglang", layout=OLD_ROOT)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", str(REPO / "playbooks" / "nightly.yaml"),
                   "--dry-run", "-e", f"sgl_repo={tmp_path / 'sglang'}", "-e", "wheel_folder=/srv/wheels",
                   "-e", "torch_spec=torch==2.12.0.dev20261128", "--tags", "nightly", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    planned = [json.loads(ln.split("] ", 1)[1]) for ln in res.stdout.splitlines() if ln.startswith("  [")]
    argvs = [p["argv"] for p in planned if "argv" in p]
    assert argvs[0][1:] == ["-m", "pip", "install", "--pre", "--upgrade", "--no-index", "--find-links", "/srv/wheels",
                            "torch==2.12.0.dev20261128"]
    assert argvs[0][0].endswith("/bin/python3")
    assert argvs[2] == ["git", "-C", str(tmp_path / "sglang"), "pull", "--ff-only"]
