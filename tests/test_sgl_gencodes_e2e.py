"""The host's SM only (patch_sgl_kernel.py --restrict-gencodes and the recipe's FLEETCTL_SGL_ARCHS),
end to end: a real sshd test host with a fake H200, the patch script run by fleetctl, a real
scikit-build-core + nvcc build of an sgl-kernel-shaped fixture that hard-codes sm_90, sm_90a,
sm_100a and sm_120a, and cuobjdump reading the wheel: it holds sm_90 and sm_90a (the code that
runs on SM 9.0), in both loader folders, and nothing else."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.tiny_ext import tool_venv

pytestmark = pytest.mark.sshd

EXT = REPO / "tests" / "data" / "ext" / "gencode_ext"

def cuobjdump() -> str:
    """The toolkit's cuobjdump, else PyPI's (nvidia-cuda-cuobjdump, installed by scripts/setup.sh)."""
    import sys

    for path in (Path("/usr/local/cuda/bin/cuobjdump"), *Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/*/bin/cuobjdump")):
        if path.is_file():
            return str(path)
    pytest.fail("no cuobjdump: run scripts/setup.sh")

PLAY = """\
name: patch and build an sgl-kernel-shaped tree for the host's SM
hosts: all
vars:
  sgl_recipe: "{{{{ sgl_kernel_recipe(facts, sms=sgl_kernel_sms | default('auto')) }}}}"
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: patch
    script:
      src: {script}
      interpreter: python3
      args: ["--restrict-gencodes", "{{{{ workdir }}}}/src"]
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      max_jobs: 1
      cmake_defines: {{FLEETCTL_SGL_ARCHS: "{{{{ sgl_recipe.defines.FLEETCTL_SGL_ARCHS | default('') }}}}"}}
"""


def sass_of(wheel: Path, tmp: Path) -> dict[str, list[str]]:
    """``{member: sorted SASS archs}`` of every shared object in the wheel (cuobjdump --list-elf)."""
    out = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".so"):
                path = tmp / name.replace("/", "_")
                path.write_bytes(zf.read(name))
                res = subprocess.run([cuobjdump(), "--list-elf", str(path)], capture_output=True, text=True, check=True)
                out[name.split("/")[1]] = sorted({part.split(".")[-2] for part in res.stdout.split() if ".sm_" in part})
    return out


def test_the_hard_coded_gencode_list_is_cut_to_the_hosts_sm(sshd_farm, tmp_path):
    src = tmp_path / "gencode_ext"
    shutil.copytree(EXT, src)
    h = sshd_farm.start("hopper")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"hopper": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": tool_venv(tmp_path / "venv")}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src, script=REPO / "playbooks" / "scripts" / "patch_sgl_kernel.py"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    assert "Applied: restrict-gencodes" in res.stdout
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    build = [t for t in record["hosts"]["hopper"]["tasks"] if t["action"] == "build_wheel"][0]
    assert build["data"]["sass"] == ["sm_90", "sm_90a"], build["data"]["sass"]
    log = (last_run(tmp_path) / "logs" / "hopper.log").read_text()
    assert "fleetctl: restrict-gencodes: SGL_KERNEL_CUDA_FLAGS: kept sm_90;sm_90a; dropped sm_100a;sm_120a" in log
    assert sass_of(Path(build["data"]["wheel"]), tmp_path) == {"sm90": ["sm_90", "sm_90a"], "sm100": ["sm_90", "sm_90a"]}

    # opted out (sgl_kernel_sms=all): the patched tree builds sgl-kernel's whole list again
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "sgl_kernel_sms=all",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    assert "Applied: restrict-gencodes" in res.stdout  # the copy put the unpatched files back
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    build = [t for t in record["hosts"]["hopper"]["tasks"] if t["action"] == "build_wheel"][0]
    assert build["data"]["sass"] == ["sm_100a", "sm_120a", "sm_90", "sm_90a"], build["data"]["sass"]
