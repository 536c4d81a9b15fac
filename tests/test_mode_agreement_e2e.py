"""``--plan``, ``--dry-run`` and the deploy refuse a venv the login user cannot write at the same
point with the same words (README: they agree). Fresh operator trial: a venv made by root
(``python3 -m venv``), the host logging in as a normal user over SSH: ``--plan`` failed the install's
preflight, the deploy refused the host before anything was uploaded (``OF``), and ``--dry-run``
showed the upload and the wheel push as changes and failed only at the install (``OCCF``). Real
sshd test host, real venv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import PTH_NAME, base_site, site_packages
from tests.test_staged_e2e import DEPLOY

pytestmark = pytest.mark.sshd


def test_plan_dry_run_and_deploy_refuse_a_root_owned_venv_alike(sshd_farm, tmp_path):
    h = sshd_farm.start("rootvenv", shell="bash")  # logs in as a dedicated (non-root) test user
    write_fake_nvidia_smi(h.bin_dir, [H200])
    parent = Path(h.home) / f"rootowned-{os.getpid()}"  # root's, 0755: the login enters it, cannot write it
    parent.mkdir(mode=0o755)
    try:
        os.chmod(parent, 0o755)
        venv = str(parent / "v")  # made by root, as `sudo python3 -m venv /opt/v` (the system's python3: the
        subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True)  # login user can run it)
        (site_packages(Path(venv)) / PTH_NAME).write_text(str(base_site()) + "\n")  # torch, as the trial's had
        inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
            **h.inventory_vars(sshd_farm.known_hosts), "venv": venv, "verify_device": "cpu"}}})
        play = tmp_path / "deploy.yaml"
        play.write_text(DEPLOY)
        want = f"not writable by {h.user} (owned by root)"
        seen = {}
        for mode in ("--plan", "--dry-run", None):
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play),
                           *([mode] if mode else []), home=tmp_path, timeout_s=300, env={"COLUMNS": "1000"})
            out = res.stdout + res.stderr
            assert res.returncode == 1 and want in out, (mode, out[-4000:])
            run = json.loads((last_run(tmp_path) / "run.json").read_text())
            tasks = run["hosts"]["gpu01"]["tasks"]
            shown = [(t["action"], t["status"]) for t in tasks if t["action"] != "facts"]
            failed = [t for t in tasks if t["status"] == "failed"]
            assert len(failed) == 1, (mode, tasks)
            line = failed[0]["msg"]
            if mode is None:  # the deploy says the host was refused while planning
                assert line.endswith(" (found while planning: nothing was uploaded or run)"), line
                line = line[:-len(" (found while planning: nothing was uploaded or run)")]
            seen[mode] = (shown, line)
        assert seen["--dry-run"][1] == seen[None][1] == seen["--plan"][1], seen  # the same words
        assert seen["--plan"][1].startswith("preflight: ") and want in seen["--plan"][1], seen
        # the dry run, as the deploy, refuses the host before the upload: no step shown as a change
        # (--plan shows the plan, its install the task that fails)
        assert seen["--dry-run"][0] == seen[None][0] == [("pip_install", "failed")], seen
        assert seen["--plan"][0][-1] == ("pip_install", "failed"), seen
        assert not (Path(h.home) / ".fleetctl" / "rootvenv" / "src").exists()  # nothing uploaded
    finally:
        subprocess.run(["rm", "-rf", str(parent)], check=False)
