"""Deploys over real sshd with the facts' kept answers (issue 27): between two deploys of one host,
each change is made for real on the host, and the second deploy's record shows it; the deploy
before each change answered from the host's ``<workdir>/state/facts-cache.json`` (its
``probe_cache`` counts say so), so a cache that missed a change would fail here.

Changes: another driver version and a second GPU (a new fake nvidia-smi), a new nvcc in the
toolkit, a package pip-installs into the venv, torch upgraded by pip, and the driver updated
without a reboot (nvidia-smi then fails as the real one does, exit 18 "Driver/library version
mismatch"): that host fails, never ok. The installed package removed from the venv is
tests/test_nochange_cost_e2e.py's (reinstalled, with the kept answers in use).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi, write_mismatched_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import fake_torch_files, write_wheel
from tests.test_facts_cache import new_nvcc, package_installed, pip_install
from tests.test_facts_script import _make_venv, write_fake_cuda

pytestmark = pytest.mark.sshd

PLAY = """\
name: touch nothing
hosts: all
tasks:
  - name: nothing to do
    command: {argv: ["true"]}
"""
#: Seconds the facts script will not keep an answer about a file changed more recently (its
#: RACY_S: file systems' coarsest timestamps); the test waits them out once per change, so that
#: the deploy before each change can answer from the file.
RACY_S = 2.0


class _Host:
    """What the change helpers of tests/test_facts_cache.py act on."""

    def __init__(self, root, cuda, venv, wheels, smi):
        self.root, self.cuda, self.venv, self.wheels, self.smi = root, cuda, venv, wheels, smi


def test_each_change_between_two_deploys_is_in_the_second_ones_facts(sshd_farm, tmp_path):
    h = sshd_farm.start("fc1")
    write_fake_nvidia_smi(h.bin_dir, [H200], driver="580.82.07")
    host = _Host(tmp_path, write_fake_cuda(tmp_path / "cuda", version="12.4"), _make_venv(tmp_path / "venv", None),
                 tmp_path / "wheels", h.bin_dir)
    pip_install(host.venv, str(write_wheel(host.wheels, "torch", "2.9.0+cu130", fake_torch_files("2.9.0+cu130"))))
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"fc1": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": str(host.venv),
        "cuda_home": str(host.cuda)}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)

    def deploy(ok: bool = True) -> dict:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--json",
                       home=tmp_path, timeout_s=300)
        assert res.returncode == (0 if ok else 1), res.stdout[-2000:] + res.stderr[-2000:]
        return json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["fc1"]

    def settled() -> dict:
        """Two deploys after the racy window: the first keeps every answer, the second uses them all."""
        time.sleep(RACY_S)
        deploy()
        rec = deploy()
        cache = rec["facts"]["probe_cache"]
        assert cache["misses"] == 0 and cache["hits"] >= 4 and cache["error"] is None, cache
        return rec["facts"]

    before = settled()
    assert (before["driver_version"], len(before["gpus"]), before["cuda"]["version"]) == ("580.82.07", 1, "12.4")
    assert before["python"]["packages"]["nanobind"] is None and before["python"]["torch"] == "2.9.0+cu130"
    assert (tmp_path / "work" / "state" / "facts-cache.json").is_file()

    write_fake_nvidia_smi(h.bin_dir, [H200, H200], driver="590.44.01")
    new_nvcc(host)
    package_installed(host)
    after = deploy()["facts"]
    assert (after["driver_version"], len(after["gpus"]), after["cuda"]["version"]) == ("590.44.01", 2, "12.8")
    assert after["python"]["packages"]["nanobind"] == "2.9.0"
    assert after["probe_cache"]["misses"] >= 2  # nvcc and the interpreter asked again

    settled()
    pip_install(host.venv, str(write_wheel(host.wheels, "torch", "2.9.1+cu130", fake_torch_files("2.9.1+cu130"))))
    assert deploy()["facts"]["python"]["torch"] == "2.9.1+cu130"

    write_mismatched_nvidia_smi(h.bin_dir)  # the driver updated without a reboot
    rec = deploy(ok=False)
    assert rec["status"] == "failed", rec["status"]
    text = json.dumps(rec)
    assert "Driver/library version mismatch" in text and "exit 18" in text, text[:3000]
