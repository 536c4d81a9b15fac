"""What the README says ``fleetctl facts`` checks of a host's venv before anything is uploaded,
facts checks, in the words ``--plan`` refuses the host with (fleetctl/facts/refusals.py's
``warning``): a venv without kernel_src's build requirements (scikit-build-core, nanobind), and a
``uv venv`` (no pip) on a host without uv. Both read ``ok`` in facts while ``--plan`` refused them.
One real sshd test host, real venvs made as users make them (tests/support/hostvenv.py).
"""

from __future__ import annotations

import json
import tomllib

import pytest

from fleetctl.facts.venv import DEPLOYED_BUILD_REQUIRES
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, write_inventory
from tests.support.hostvenv import make_venv

pytestmark = pytest.mark.sshd

PLAYBOOK = str(REPO / "playbooks" / "fp4-kernels.yaml")
TAIL = "; a deploy refuses this host until it is fixed"


def test_the_deployed_build_requirements_are_kernel_srcs():
    meta = tomllib.loads((REPO / "kernel_src" / "pyproject.toml").read_text())
    assert tuple(meta["build-system"]["requires"]) == DEPLOYED_BUILD_REQUIRES


def test_facts_warn_of_a_venv_without_build_requirements_and_of_no_pip_nor_uv_as_plan_refuses(sshd_farm, tmp_path):
    h = sshd_farm.start("venvfacts")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    notools = make_venv(tmp_path / "notools", "virtualenv", torch=False, build_tools=False)
    uvvenv = make_venv(tmp_path / "uvvenv", "uv", torch=False, build_tools=True)
    conn = h.inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "notools": {**conn, "workdir": str(tmp_path / "w1"), "venv": notools},
        "nopip": {**conn, "workdir": str(tmp_path / "w2"), "venv": uvvenv}}})

    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    rows = json.loads(plan.stdout)
    refused = {name: " ".join(t["msg"] for t in row["tasks"] if t.get("msg")) for name, row in rows.items()}

    tools = [w for w in doc["notools"]["warnings"] if "build requirements missing" in w]
    assert tools == [f"warning: build requirements missing in {notools}: scikit-build-core>=0.10, nanobind>=2.0 "
                     f"(the package's own [build-system] requires); install them into the venv: {notools}/bin/python3 "
                     f"-m pip install 'scikit-build-core>=0.10' 'nanobind>=2.0' (or have the build install them: -e "
                     f"install_build_requirements=true with the shipped fp4-kernels playbook; "
                     f"install_build_requirements: true in a build_wheel task of your own){TAIL}"], doc["notools"]
    assert tools[0][len("warning: "):-len(TAIL)] in refused["notools"], refused["notools"]

    nopip = [w for w in doc["nopip"]["warnings"] if "no pip" in w]
    line = (f"the venv {uvvenv} has no pip and this host has no uv, so nothing can build or install into it: add "
            f"pip to it ({uvvenv}/bin/python3 -m ensurepip --upgrade), or install uv on the host "
            f"(https://docs.astral.sh/uv/getting-started/installation/)")
    assert nopip == [f"warning: {line}{TAIL}"], doc["nopip"]
    assert line in refused["nopip"], refused["nopip"]
    assert not [w for w in doc["nopip"]["warnings"] if "build requirements" in w]  # it has them
