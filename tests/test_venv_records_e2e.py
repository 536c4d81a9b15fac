"""Two venvs on one host: each holds its own install record (fleetctl.tasks.venv_state.RECORD_LAYOUT).

One inventory host deployed into venv A (``-e venv=A``), then into venv B, then into A again. With
one record per host, B's record replaced A's: the deploy into A, intact, reinstalled ("replaced the
earlier wheel"), and the wheel kept for A's roll-back was B's (same file name, another build). Real
venvs (virtualenv), real pip, a real ``--staged`` version, real verify, on the local host; the two
wheels are tiny pure-Python builds of one version, as two venvs' builds of one source would be.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv
from tests.support.tiny_ext import site_packages, write_wheel

PLAY = """\
name: install a wheel
hosts: all
tasks:
  - name: install
    pip_install: {wheel: "{{ wheel }}", tool: pip}
"""
#: A play that always changes the venv's host (``command`` reports changed), then installs: with
#: --staged it stages a new version, whose install records are the live one's (same files).
CHANGE_INSTALL = PLAY + """\
  - name: always changes
    command: {argv: [echo, hi]}
"""
VERIFY = """\
name: verify
hosts: all
tasks:
  - name: verify
    verify: {package: tinyv, symbols: [VALUE, TWO], smoke: false, device: cpu}
"""


def _task(home: Path) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return record["hosts"]["box"]["tasks"][-1]


def _value(venv: str) -> str:
    return subprocess.run([f"{venv}/bin/python3", "-c", "import tinyv; print(tinyv.VALUE)"], capture_output=True,
                          text=True, check=True, cwd="/", env={"PATH": os.environ["PATH"]}).stdout.strip()


def test_two_venvs_of_one_host_each_keep_their_own_install_record(tmp_path):
    a, b = make_venv(tmp_path / "a"), make_venv(tmp_path / "b")
    w1 = write_wheel(tmp_path / "w1", "tinyv", "1.0", {"tinyv/__init__.py": "VALUE = 1\n"})
    w2 = write_wheel(tmp_path / "w2", "tinyv", "1.0", {"tinyv/__init__.py": "VALUE = 2\nTWO = 2\n"})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {
        "ansible_connection": "local", "workdir": str(tmp_path / "work")}}})
    (tmp_path / "p.yaml").write_text(PLAY)
    (tmp_path / "v.yaml").write_text(VERIFY)

    (tmp_path / "c.yaml").write_text(CHANGE_INSTALL)

    def deploy(venv: str, wheel: Path, *more: str, play: str = "p.yaml") -> dict:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(tmp_path / play),
                       "-e", f"venv={venv}", "-e", f"wheel={wheel}", *more, home=tmp_path)
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        task = next(t for t in record["hosts"]["box"]["tasks"] if t["action"] == "pip_install")
        assert res.returncode == 0, (task, res.stdout[-3000:], res.stderr[-2000:])
        return task

    assert deploy(a, w1)["status"] == "changed"
    task = deploy(b, w2)
    assert task["status"] == "changed" and task["data"]["decision"]["why"] == "nothing installed", task
    assert (_value(a), _value(b)) == ("1", "2")
    # A is intact: unchanged, from A's own record, not "replaced the earlier wheel" from B's
    task = deploy(a, w1)
    assert task["status"] == "ok" and task["data"]["decision"] == {"action": "skip"}, task
    records = {json.loads(p.read_text())["venv"]: json.loads(p.read_text())
               for p in (tmp_path / "work" / "installed").glob("*/tinyv.json")}
    assert set(records) == {os.path.realpath(a), os.path.realpath(b)}
    # each venv's kept wheel (for its roll-back) is the one installed there
    assert Path(records[os.path.realpath(a)]["kept"]).read_bytes() == w1.read_bytes()
    assert Path(records[os.path.realpath(b)]["kept"]).read_bytes() == w2.read_bytes()

    # --staged into A (a new version, switched to), then a plain deploy into B, then A again
    task = deploy(a, w2, "--staged")
    assert Path(a).is_symlink() and _value(a) == "2", task
    task = deploy(b, w1)
    assert task["status"] == "changed" and _value(b) == "1", task
    task = deploy(a, w2)
    assert task["status"] == "ok" and task["data"]["decision"] == {"action": "skip"}, task
    assert (_value(a), _value(b)) == ("2", "1")
    # a --staged deploy that changes something else: the new version holds the live one's install
    # (its files, and its record), so the install is skipped there, as --plan said
    live = os.path.realpath(a)
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(tmp_path / "c.yaml"), "-e", f"venv={a}",
                    "-e", f"wheel={w2}", "--staged", "--plan", "--json", home=tmp_path)
    planned = {t["action"]: t for t in json.loads(plan.stdout)["box"]["tasks"]}
    assert planned["pip_install"]["decision"] == {"action": "skip"}, planned["pip_install"]
    task = deploy(a, w2, "--staged", play="c.yaml")
    assert os.path.realpath(a) != live and task["status"] == "ok", task
    assert task["data"]["decision"] == {"action": "skip"}, task

    # verify says the truth of each venv: A holds w2 (TWO), B holds w1 (no TWO)
    res = fleetctl("-i", str(inv), "verify", "--hosts", "g", "--playbook", str(tmp_path / "v.yaml"), "-e", f"venv={a}",
                   home=tmp_path)
    assert res.returncode == 0 and _task(tmp_path)["status"] == "ok", res.stdout[-3000:]
    res = fleetctl("-i", str(inv), "verify", "--hosts", "g", "--playbook", str(tmp_path / "v.yaml"), "-e", f"venv={b}",
                   home=tmp_path)
    task = _task(tmp_path)
    assert res.returncode == 1 and task["status"] == "failed" and "TWO" in task["msg"], (task, res.stdout[-3000:])


def test_two_hosts_reaching_one_venv_through_two_workdirs_read_the_venvs_own_record(tmp_path):
    """Operator trial: sA and sB are one user's same venv, each with its own workdir (so each its
    own per-venv records); after sA installed, sB's deploy said ``replaced what was there: no
    install record of fleetctl's for this venv`` for the identical wheel. The venv's own
    ``.fleetctl-install.json`` says what is installed: the same wheel is skipped, in --plan and
    the deploy; another wheel replaces "the earlier wheel"."""
    venv = make_venv(tmp_path / "shared")
    w1 = write_wheel(tmp_path / "w1", "tinyv", "1.0", {"tinyv/__init__.py": "VALUE = 1\n"})
    w2 = write_wheel(tmp_path / "w2", "tinyv", "1.0", {"tinyv/__init__.py": "VALUE = 2\n"})
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        name: {"ansible_connection": "local", "workdir": str(tmp_path / f"work-{name}"), "venv": venv}
        for name in ("sA", "sB")}})
    (tmp_path / "p.yaml").write_text(PLAY)

    def deploy(host: str, wheel: Path, *more: str) -> dict:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", host, "--playbook", str(tmp_path / "p.yaml"),
                       "-e", f"wheel={wheel}", *more, home=tmp_path)
        if "--json" in more:
            return {t["action"]: t for t in json.loads(res.stdout)[host]["tasks"]}["pip_install"]
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-2000:])
        return next(t for t in record["hosts"][host]["tasks"] if t["action"] == "pip_install")

    assert deploy("sA", w1)["status"] == "changed"
    assert deploy("sB", w1, "--plan", "--json")["decision"] == {"action": "skip"}
    task = deploy("sB", w1)
    assert task["status"] == "ok" and task["data"]["decision"] == {"action": "skip"}, task
    task = deploy("sB", w2)
    assert task["status"] == "changed" and "replaced the earlier wheel" in task["msg"], task
    assert _value(venv) == "2"
