"""The host's SM only (patch_sgl_kernel.py --restrict-gencodes and the recipe's FLEETCTL_SGL_ARCHS),
end to end: a real sshd test host with a fake H200, the patch script run by fleetctl, a real
scikit-build-core + nvcc build of an sgl-kernel-shaped fixture that hard-codes sm_90, sm_90a,
sm_100a and sm_120a, and cuobjdump reading the wheels: an H200's holds sm_90a alone (one SASS per SM: plain sm_90 is not
compiled beside it) and only in sm90/, the one folder sgl_kernel's loader reads on SM 9.0; a B200's
holds sm_100a alone, only in sm100/; sgl_kernel_sms=all builds the whole list into both again."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.fake_gpu import B200, H200, write_fake_nvidia_smi
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


def build_record(tmp_path: Path, host: str) -> dict:
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    return [t for t in record["hosts"][host]["tasks"] if t["action"] == "build_wheel"][0]


def test_the_hard_coded_gencode_list_is_cut_to_the_hosts_sm(sshd_farm, tmp_path):
    src = tmp_path / "gencode_ext"
    shutil.copytree(EXT, src)
    hosts = {}
    for name, gpu in (("hopper", H200), ("blackwell", B200)):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [gpu])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / name),
                       "venv": tool_venv(tmp_path / "venv")}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src, script=REPO / "playbooks" / "scripts" / "patch_sgl_kernel.py"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    assert "Applied: restrict-gencodes" in res.stdout
    hopper, blackwell = build_record(tmp_path, "hopper"), build_record(tmp_path, "blackwell")
    assert hopper["data"]["sass"] == ["sm_90a"], hopper["data"]["sass"]
    assert blackwell["data"]["sass"] == ["sm_100a"], blackwell["data"]["sass"]
    log = (last_run(tmp_path) / "logs" / "hopper.log").read_text()
    assert "fleetctl: restrict-gencodes: SGL_KERNEL_CUDA_FLAGS: kept sm_90a; dropped sm_100a;sm_120a;sm_90" in log
    assert "common_ops_sm100_build not built: sgl_kernel's loader loads it on no SM of 90a" in log
    blog = (last_run(tmp_path) / "logs" / "blackwell.log").read_text()
    assert "common_ops_sm90_build not built: sgl_kernel's loader loads it on no SM of 100a" in blog
    # each wheel holds the one library its SM loads, with that SM's code alone
    assert sass_of(Path(hopper["data"]["wheel"]), tmp_path) == {"sm90": ["sm_90a"]}
    assert sass_of(Path(blackwell["data"]["wheel"]), tmp_path) == {"sm100": ["sm_100a"]}

    # opted out (sgl_kernel_sms=all): the patched tree builds sgl-kernel's whole list, both libraries
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "hopper", "--playbook", str(play), "-e", "sgl_kernel_sms=all",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    assert "Applied: restrict-gencodes" in res.stdout  # the copy put the unpatched files back
    build = build_record(tmp_path, "hopper")
    assert build["data"]["sass"] == ["sm_100a", "sm_120a", "sm_90", "sm_90a"], build["data"]["sass"]
    every = ["sm_100a", "sm_120a", "sm_90", "sm_90a"]
    assert sass_of(Path(build["data"]["wheel"]), tmp_path) == {"sm90": every, "sm100": every}
