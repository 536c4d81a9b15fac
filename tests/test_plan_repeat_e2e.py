"""``--plan`` says what the deploy will do, and says it again the next time (new-user trial), over
real sshd test hosts:

- a class's member that fails planning (a later task's preflight) is not named as its builder,
  nor as a member receiving the wheel: the deploy withdraws it and builds on another member;
- two inventory hosts on one venv (two users of one machine, the venv its owner's) get the same
  verdict from two identical plans: the ``.fleetctl-id`` the first plan wrote (as the owner, the
  one user who may write there) does not make the second see a sharing the first did not.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from tests.support.fake_gpu import H200
from tests.support.fake_gpu import write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import fill, tmpfs
from tests.test_agreement_e2e import _plan_hosts
from tests.test_platform_targets_e2e import _actions, _setup
from tests.test_deploy_e2e import make_host_venv
from tests.test_venv_faults_e2e import _wheel

import pytest

pytestmark = pytest.mark.sshd


def test_plan_names_as_builder_the_member_the_deploy_builds_on_not_one_that_fails(sshd_farm, tmp_path):
    """cB, the member its class's build_host names, fails its install's preflight (its venv's file
    system is full): the deploy withdraws it and builds on cA, and --plan says so."""
    play = _setup(tmp_path)
    with tmpfs(tmp_path / "disk", "48m") as disk:
        hosts = {}
        for name in ("cA", "cB"):  # one class (one GPU, CUDA, torch, Python)
            h = sshd_farm.start(name)
            write_fake_nvidia_smi(h.bin_dir, [H200])
            venv = make_host_venv((disk if name == "cB" else tmp_path) / f"venv-{name}")
            hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                           "venv": venv, "build_host": "cB"}
        fill(disk)
        inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

        def deploy(*extra: str):
            return fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), *extra,
                            home=tmp_path, timeout_s=900)

        plan_text, plan, real = deploy("--plan"), deploy("--plan", "--json"), deploy("--json")
        assert plan_text.returncode == plan.returncode == real.returncode == 1, plan_text.stdout[-3000:]
        planned = _plan_hosts(json.loads(plan.stdout))
        assert planned["cB"]["status"] == "failed" and "has 0 MiB free" in planned["cB"]["error"], planned["cB"]
        assert _actions(planned)["cA"] == "build", planned
        classes = [" ".join(line.split()) for line in plan_text.stdout.splitlines() if " (build on " in line]
        assert len(classes) == 1 and " cA 9.0a " in classes[0] and classes[0].endswith("(build on cA)"), plan_text.stdout
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        built = [t for t in record["hosts"]["cA"]["tasks"] if t["action"] == "build_wheel"][0]
        assert built["status"] in ("ok", "changed") and not built["data"].get("pushed_from"), built
        assert record["hosts"]["cA"]["status"] == "ok" and record["hosts"]["cB"]["status"] == "failed"


def test_plan_never_names_a_refused_member_as_builder_even_when_it_is_the_only_one(sshd_farm, tmp_path):
    """Operator trial: ``--plan`` ended with ``4136a9c112ec9fc3 hro 9.0a ... (build on hro)`` for a
    class whose one member the plan refused (its venv could not be installed into): the deploy
    refuses it before any command, so nothing builds. The class says it has no builder."""
    play = _setup(tmp_path)
    with tmpfs(tmp_path / "disk", "48m") as disk:
        h = sshd_farm.start("cR")
        write_fake_nvidia_smi(h.bin_dir, [H200])
        venv = make_host_venv(disk / "venv-cR")
        fill(disk)
        inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"cR": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                       "workdir": str(tmp_path / "work"), "venv": venv}}})
        plan = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--plan",
                        home=tmp_path, timeout_s=600, env={"COLUMNS": "250"})
    assert plan.returncode == 1 and "has 0 MiB free" in plan.stdout, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert "(build on cR)" not in plan.stdout, plan.stdout
    classes = [" ".join(ln.split()) for ln in plan.stdout.splitlines() if "(no builder: " in ln]
    assert len(classes) == 1 and " cR 9.0a " in classes[0] and classes[0].endswith(
        "(no builder: every member is refused)"), plan.stdout


SHARED_PLAY = """\
name: one venv, two users
hosts: all
tasks:
  - name: Build in the venv
    build_wheel: {{src: /nowhere/src, out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [], tool: pip,
                  check_sass: false, min_free_disk_mib: 1}}
    when: host == "y-other"
  - name: Install the wheel
    pip_install: {{wheel: "{wheel}", tool: pip}}
    when: host == "x-owner"
"""


def test_two_identical_plans_give_a_venv_shared_by_two_users_the_same_verdict(sshd_farm, tmp_path):
    """x-owner's user owns the venv (and so writes its .fleetctl-id, the first plan did); y-other
    logs in as another user of the same machine, who may read it but not write it: y-other's build
    uses the venv, x-owner installs into it. Both plans refuse x-owner for the shared venv."""
    started = {"y-other": sshd_farm.start("y-other", shell="zsh"), "x-owner": sshd_farm.start("x-owner", shell="bash")}
    owner = pwd.getpwnam(started["x-owner"].user)
    venv = sshd_farm.root / f"shv-{tmp_path.name}"  # x-owner's user's venv; y-other's may read it, not write
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    subprocess.run(["chown", "-R", f"{owner.pw_uid}:{owner.pw_gid}", str(venv)], check=True)
    play = tmp_path / "play.yaml"
    play.write_text(SHARED_PLAY.format(wheel=_wheel(sshd_farm.root / f"wheels-{tmp_path.name}")))
    hosts = {}
    for name, h in started.items():  # y-other first, one at a time (--forks 1): it plans before x-owner
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "venv": str(venv),
                       "workdir": f"~/.fleetctl-{name}-{tmp_path.name}"}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def plan() -> dict:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--plan", "--json",
                       "--forks", "1", home=tmp_path, timeout_s=300)
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        return {h: (r["status"], r.get("error")) for h, r in json.loads(res.stdout).items()}

    try:
        first = plan()
        assert (venv / ".fleetctl-id").stat().st_uid == owner.pw_uid  # the first plan wrote it, as x-owner's user
        second = plan()
        assert first == second, (first, second)
        assert first["x-owner"][0] == "failed"
        assert f"y-other and x-owner share the venv {venv} (one {venv}/.fleetctl-id)" in first["x-owner"][1], first
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_plan_of_a_host_reaching_a_venv_another_host_installed_into_says_the_wheel_is_there(sshd_farm, tmp_path):
    """Operator trial: sA and sB are one venv under two inventory names (two workdirs); after
    ``deploy --hosts sA``, ``--plan --hosts sB`` said ``push ... nothing installed`` though the venv
    held the identical wheel. sB is pushed the class's wheel into its own workdir (it has none),
    and its install is a skip: the venv's own record names that wheel (its sha256 is the cached
    wheel's), and the deploy agrees."""
    play = _setup(tmp_path)
    venv = make_host_venv(tmp_path / "venv-shared")
    hosts = {}
    for name in ("sA", "sB"):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": venv}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def deploy(pattern: str, *extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=900)

    first = deploy("sA")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    plan = deploy("sB", "--plan", "--json")
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    tasks = {t["action"]: t for t in json.loads(plan.stdout)["sB"]["tasks"]}
    assert tasks["build_wheel"]["decision"]["action"] == "push", tasks
    assert tasks["pip_install"]["decision"] == {"action": "skip"}, tasks["pip_install"]
    real = deploy("sB", "--json")
    assert real.returncode == 0, real.stdout[-3000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    done = [t for t in record["hosts"]["sB"]["tasks"] if t["action"] == "pip_install"][0]
    assert done["status"] == "ok" and done["data"]["decision"] == {"action": "skip"}, done


def test_two_names_of_one_machine_on_one_venv_get_the_same_verdict_however_fast_each_plans(sshd_farm, tmp_path):
    """Operator trial: qa (up to date: its wheel in the controller's cache, its install in the
    venv) and qa2, a second inventory name of qa's machine and user with qa's venv and its own
    workdir. ``rm -rf`` qa2's workdir, ``--plan`` twice: the first said ``qa = skip ; qa2 =
    failed``, the second refused both. qa needed no class settled, so it went on alone before qa2
    (slower: its workdir to make) claimed the venv. Here qa2's facts take seconds more (the nvcc of
    its toolkit, a copy of the machine's): both plans refuse both, naming the venv."""
    play = _setup(tmp_path)
    venv = make_host_venv(tmp_path / "venv-qa")
    h = sshd_farm.start("qa")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    slow = _slow_nvcc_toolkit(tmp_path / "cuda-slow")  # qa2's facts take seconds more: its toolkit's nvcc
    base = h.inventory_vars(sshd_farm.known_hosts)
    hosts = {"qa": {**base, "workdir": str(tmp_path / "work" / "qa"), "venv": venv},
             "qa2": {**base, "workdir": str(tmp_path / "work" / "wd2"), "venv": venv, "cuda_home": slow}}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def deploy(pattern: str, *extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=600)

    first = deploy("qa")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    verdicts = []
    for _ in range(2):
        shutil.rmtree(tmp_path / "work" / "wd2", ignore_errors=True)
        plan = deploy("qa:qa2", "--plan", "--json")
        assert plan.returncode == 1, plan.stdout[-3000:] + plan.stderr[-3000:]
        verdicts.append({n: (r["status"], r.get("error")) for n, r in json.loads(plan.stdout).items()})
    assert verdicts[0] == verdicts[1], verdicts
    for name in ("qa", "qa2"):
        assert verdicts[0][name][0] == "failed", verdicts
        assert f"qa and qa2 share the venv {venv} (one {venv}/.fleetctl-id)" in verdicts[0][name][1], verdicts


def _slow_nvcc_toolkit(home: Path) -> str:
    """A CUDA toolkit folder: the machine's (links), its ``bin/nvcc`` a script that answers 1 s late."""
    real = Path(os.path.realpath("/usr/local/cuda"))
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for entry in (real / "bin").iterdir():
        if entry.name != "nvcc":
            (home / "bin" / entry.name).symlink_to(entry)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f'#!/bin/sh\nsleep 1\nexec {real / "bin" / "nvcc"} "$@"\n')
    nvcc.chmod(0o755)
    return str(home)
