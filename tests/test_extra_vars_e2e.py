"""``-e`` wins over the inventory for fleetctl's own host settings and for connection vars, as
Ansible's variable precedence has it (extra vars always win): real venvs, a real sshd test host,
the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.sshd import free_port

QUICK = "name: quick\nhosts: all\ntasks:\n  - name: say\n    command: {argv: [echo, hello]}\n"


def test_e_venv_wins_over_the_host_var_in_plan_dry_run_and_deploy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for v in (a, b):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": str(a),
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    for mode in ("--plan", "--dry-run", None):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", f"venv={b}",
                       *([mode] if mode else []), home=tmp_path)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        assert record["hosts"]["box"]["facts"]["python"]["venv"] == str(b), mode  # not the inventory's a
    # a bad value is one line naming -e and the var (exit 2), never ignored
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "venv=/nonexistent/v",
                   home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "fleetctl: error: -e: venv: venv '/nonexistent/v' of local host 'box' does not exist"


@pytest.mark.sshd
def test_e_connection_vars_win_over_the_inventory(sshd_farm, tmp_path):
    host = sshd_farm.start("extra")
    wrong = {**host.inventory_vars(sshd_farm.known_hosts), "ansible_port": free_port(), "ansible_user": "nobody"}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": wrong}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", f"ansible_port={host.port}",
                   "-e", f"ansible_user={host.user}", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "h | hello" in res.stdout.replace("h  |", "h |")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "ansible_port=many",
                   home=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("fleetctl: error: -e: ansible_port: "), res.stderr
    assert "Traceback" not in res.stderr
