"""A host venv without torch (plain ``python3 -m venv`` plus the build requirements): the FP4
kernel package needs torch at run time and fleetctl never installs it, so the host fails while
planning, before anything is uploaded, naming the venv and the fix, in ``--plan``, ``--dry-run``,
a deploy and ``--retry-failed --plan`` alike (fleetctl/tasks/runtime_preflight.py). The build
alone does not need torch (kernel_src builds with scikit-build-core and nanobind): a build-only
play goes through. Real sshd test host, real venvs (tests/support/hostvenv.py), the real playbook.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv

pytestmark = pytest.mark.sshd

PLAYBOOK = str(REPO / "playbooks" / "fp4-kernels.yaml")


def _refusal(venv: str) -> str:
    return (f"preflight: torch does not import in {venv} (ModuleNotFoundError: No module named 'torch'): "
            f"fp4_kernels needs torch at run time and fleetctl never installs it; install the torch build for "
            f"this host's CUDA into the venv ({venv}/bin/python3 -m pip install torch), or point the host var "
            f"'venv' at the venv that has it")


def test_a_venv_without_torch_fails_while_planning_in_plan_dry_run_and_deploy(sshd_farm, tmp_path):
    h = sshd_farm.start("notorch")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_venv(tmp_path / "venv", "venv", torch=False, build_tools=True)
    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"notorch": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                     "workdir": str(work), "venv": venv}}})
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK)
    line = _refusal(venv)

    # facts, gathered fine, fail the host (exit 1) with the line the deploy refuses it with, in the
    # form of every such problem (fleetctl/facts/refusals.py); they said "ok" and nothing of torch
    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    said = " ".join(facts.stdout.replace("│", " ").split())
    assert facts.returncode == 1 and "notorch: FAILED (the cause below)" in facts.stdout, facts.stdout + facts.stderr
    cause = f"{line[len('preflight: '):]}; a deploy refuses this host until it is fixed"
    # the cause once: on the FAILED line, not again as a warning note after it
    assert f"notorch: FAILED: {cause}" in said and f"warning: {cause}" not in said, facts.stdout
    warning = f"warning: {cause}"
    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
    assert warning in doc["notorch"]["warnings"], doc["notorch"].get("warnings")
    assert doc["notorch"]["status"] == "failed" and doc["notorch"]["error"] == warning[len("warning: "):], doc["notorch"]

    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    row = json.loads(plan.stdout)["notorch"]
    assert row["status"] != "ok" and any(t["msg"].startswith(line) for t in row["tasks"]), row
    assert not (work / "src").exists()

    dry = fleetctl(*base, "--dry-run", home=tmp_path)
    assert dry.returncode == 1 and line in dry.stdout, dry.stdout[-3000:]
    assert not (work / "src").exists()

    dep = fleetctl(*base, home=tmp_path)
    assert dep.returncode == 1, dep.stdout[-3000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    tasks = record["hosts"]["notorch"]["tasks"]
    verify = [t for t in tasks if t["action"] == "verify"][0]
    assert verify["status"] == "failed" and verify["msg"].startswith(line), verify
    assert not any(t["status"] in ("changed", "ok") for t in tasks if t["action"] in ("copy", "build_wheel", "pip_install"))
    assert not (work / "src").exists() and not (work / "wheels").exists()  # nothing uploaded or built
    summary = [ln for ln in dep.stdout.splitlines() if ln.split(" |")[0].strip() == "notorch" and "FAILED" in ln]
    assert summary and line in summary[0], dep.stdout[-3000:]

    retry = fleetctl(*base, "--retry-failed", "--plan", home=tmp_path)
    assert retry.returncode == 1 and "nothing changed" not in retry.stdout, retry.stdout[-3000:]
    assert "torch does not import" in retry.stdout


def test_the_build_alone_needs_no_torch(sshd_farm, tmp_path):
    """kernel_src does not build against torch: --tags build plans the build, with no refusal."""
    h = sshd_farm.start("buildonly")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_venv(tmp_path / "venv", "venv", torch=False, build_tools=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"buildonly": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                       "workdir": str(tmp_path / "work"), "venv": venv}}})
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--tags", "build",
                    "--plan", "--json", home=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    row = json.loads(plan.stdout)["buildonly"]
    assert row["status"] == "ok" and [b["action"] for b in row["builds"]] == ["build"], row


VERIFY_PLAY = """\
name: toy kernels, verified
hosts: all
tasks:
  - name: Upload the toy sources
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/toy"}}
  - name: Build the toy wheel
    build_wheel: {{src: "{{{{ workdir }}}}/src/toy", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1}}
    register: build
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
  - name: Verify the toy
    verify: {{package: toyfp4, smoke: false, symbols: [toy_op_of_a_newer_release]}}
"""


def test_plan_never_says_nothing_changed_for_a_host_whose_last_deploy_failed_at_verify(sshd_farm, tmp_path):
    """The install is current (the build would be skipped) but the last deploy failed at verify
    (the package lacks an op the play asks for, as an older release does; verify runs on the CPU by
    the host var, since the test venv's torch is the controller's CPU build): --plan says so, naming
    the run, instead of "nothing changed"."""
    import shutil

    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(VERIFY_PLAY.format(src=src))
    h = sshd_farm.start("unverified")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_venv(tmp_path / "venv", "virtualenv")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"unverified": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                         "workdir": str(tmp_path / "work"), "venv": venv,
                                                                         "verify_device": "cpu"}}})
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))
    dep = fleetctl(*base, home=tmp_path, timeout_s=900)
    assert dep.returncode == 1, dep.stdout[-3000:]
    failed_run = last_run(tmp_path).name
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    tasks = {t["action"]: t for t in record["hosts"]["unverified"]["tasks"]}
    assert tasks["pip_install"]["status"] == "changed" and tasks["verify"]["status"] == "failed", tasks
    plan = fleetctl(*base, "--plan", home=tmp_path)
    out = " ".join(plan.stdout.split())
    assert "nothing changed" not in out, out
    assert (f"not verified: unverified: its install is current, but its last deploy {failed_run} failed at "
            f"verify: verify toyfp4: symbols:") in out, out
    assert "1 of 1 host(s) failed verify at their last deploy" in out
    retry = fleetctl(*base, "--retry-failed", "--plan", home=tmp_path)
    assert "nothing changed" not in retry.stdout and f"last deploy {failed_run} failed at verify" in " ".join(
        retry.stdout.split()), retry.stdout


def test_a_venv_without_pip_is_told_a_command_that_works_in_it(sshd_farm, tmp_path):
    """The trial: a venv `python -m venv --without-pip` (as `uv venv`) made, on a host without uv:
    the hint was `PY -m pip install torch`, which says "No module named pip". The hint now puts pip
    there first (ensurepip), and its first half, run on the host as printed, gives the venv a pip."""
    import shlex
    import subprocess

    h = sshd_farm.start("nopip")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_venv(tmp_path / "venv", "bare", torch=False)
    py = f"{venv}/bin/python3"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"nopip": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                  "workdir": str(tmp_path / "work"), "venv": venv}}})
    res = fleetctl("-i", str(inv), "verify", "--hosts", "g", home=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    msgs = [t["msg"] for t in record["hosts"]["nopip"]["tasks"] if "torch does not import" in (t["msg"] or "")]
    assert msgs, res.stdout[-3000:]
    hint = msgs[0].split("into the venv (", 1)[1].split("), or point", 1)[0]
    assert hint == f"{py} -m ensurepip --upgrade && {py} -m pip install torch", msgs[0]
    assert subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode != 0  # no pip yet
    first = hint.split(" && ")[0]
    assert subprocess.run(shlex.split(first), capture_output=True).returncode == 0
    assert subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode == 0  # what followed works
