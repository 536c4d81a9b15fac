"""One CUDA toolkit reached through two spellings of its folder is one arch class (operator trial).

NVIDIA's installers lay a toolkit out as ``/usr/local/cuda-13.0`` with ``/usr/local/cuda`` a
symlink to it; one host's ``cuda_home`` named the symlink, another's the real folder, and the two
built the same wheel twice (the nvcc and toolkit paths in the CMake defines were part of the
build key). Real sshd test hosts, the toy CUDA package (tests/data/toy_kernels), the real nvcc;
``--plan`` only: one class, one builder, the other member receives the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, write_inventory
from tests.test_agreement_e2e import PLAY, _plan_hosts, actions
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

CUDA = os.path.realpath("/usr/local/cuda")


@pytest.mark.skipif(not os.access(os.path.join(CUDA, "bin", "nvcc"), os.X_OK), reason="needs a CUDA toolkit")
def test_a_toolkit_through_a_symlink_and_its_real_folder_is_one_class(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    link = tmp_path / "cuda"  # as /usr/local/cuda is: a symlink to the versioned folder
    link.symlink_to(CUDA)
    hosts = {}
    for name, home in (("viareal", CUDA), ("vialink", str(link))):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}"), "cuda_home": home}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--plan", "--json",
                    home=tmp_path, timeout_s=600)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    doc = json.loads(plan.stdout)
    assert actions(_plan_hosts(doc)) == {"viareal": "build", "vialink": "push"}, plan.stdout
    keys = {h: next(t["decision"]["key"] for t in row["tasks"] if t["action"] == "build_wheel")
            for h, row in doc.items()}
    assert keys["viareal"] == keys["vialink"], keys  # the wheel cache and stamps are keyed by it
