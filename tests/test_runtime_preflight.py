"""verify's torch preflight as data (fleetctl/tasks/runtime_preflight.py) and what --plan reads of
past deploys (fleetctl/reporting/verify_history.py)."""

from __future__ import annotations

from fleetctl.reporting.verify_history import failed_at_verify
from fleetctl.tasks.runtime_preflight import torch_runtime_problem

VENV = "/opt/venv"
PY = f"{VENV}/bin/python3"


def test_a_venv_without_torch_is_refused_naming_the_venv_and_the_fix():
    line = torch_runtime_problem({"python": {"exists": True, "torch": None,
                                             "torch_error": "ModuleNotFoundError: No module named 'torch'"}},
                                 VENV, PY, "fp4_kernels")
    assert line == ("torch does not import in /opt/venv (ModuleNotFoundError: No module named 'torch'): fp4_kernels "
                    "needs torch at run time and fleetctl never installs it; install the torch build for this host's "
                    "CUDA into the venv (/opt/venv/bin/python3 -m pip install torch), or point the host var 'venv' "
                    "at the venv that has it")
    broken = torch_runtime_problem({"python": {"torch": None, "torch_error": "OSError: libcudart.so.13: cannot open"}},
                                   VENV, PY, "fp4_kernels")
    assert broken and "(OSError: libcudart.so.13: cannot open)" in broken


def test_a_venv_without_pip_is_told_the_uv_command():
    """A venv uv made (no pip in it) on a host with uv: the fix offered is uv's, since
    `python -m pip` would say "No module named pip"."""
    facts = {"python": {"torch": None, "torch_error": "ModuleNotFoundError: No module named 'torch'",
                        "packages": {"pip": None}}, "uv": {"path": "/usr/local/bin/uv"}}
    line = torch_runtime_problem(facts, VENV, PY, "fp4_kernels")
    assert line and f"(/usr/local/bin/uv pip install --python {PY} torch)" in line and "-m pip" not in line
    facts["uv"] = {"path": None}  # no uv either: pip is put there first (ensurepip), never a bare `-m pip`
    assert f"({PY} -m ensurepip --upgrade && {PY} -m pip install torch)" in torch_runtime_problem(
        facts, VENV, PY, "fp4_kernels")
    facts["python"]["packages"] = {"pip": "25.0"}  # pip there: pip's command
    assert f"({PY} -m pip install torch)" in torch_runtime_problem(facts, VENV, PY, "fp4_kernels")


def test_what_is_not_refused():
    assert torch_runtime_problem({"python": {"torch": "2.13.0"}}, VENV, PY, "p") is None
    # fleetctl's own reader failed: says nothing about the host's torch (verify tells)
    assert torch_runtime_problem({"python": {"torch": None, "torch_probe_error": "x"}}, VENV, PY, "p") is None
    # a planned venv_upgrade of torch before verify (playbooks/nightly.yaml)
    assert torch_runtime_problem({"python": {"torch": None, "torch_pending": "torch==2.13.0"}}, VENV, PY, "p") is None
    # no interpreter at all: build_wheel's preflight names it
    assert torch_runtime_problem({"python": {"exists": False}}, VENV, PY, "p") is None
    assert torch_runtime_problem({}, VENV, PY, "p") is None


def test_failed_at_verify_reads_each_hosts_newest_deploy_of_the_playbook():
    def run(rid, hosts, playbook="/p/play.yaml", mode="apply", kind="deploy"):
        return {"run_id": rid, "kind": kind, "mode": mode, "playbook": playbook,
                "hosts": {h: {"tasks": [{"action": a, "status": s, "msg": m} for a, s, m in tasks]}
                          for h, tasks in hosts.items()}}
    bad_verify = [("pip_install", "changed", ""), ("verify", "failed", "verify p: cuda: no GPU")]
    runs = [  # newest first
        run("r4", {"a": [("verify", "failed", "planned")]}, mode="plan"),
        run("r3", {"b": [("build_wheel", "failed", "nvcc")]}),
        run("r2", {"a": bad_verify, "b": bad_verify, "c": [("verify", "ok", "")]}),
        run("r1", {"d": bad_verify}, playbook="/p/other.yaml"),
        {"broken": True},
    ]
    assert failed_at_verify(runs, ["a", "b", "c", "d"], "/p/play.yaml") == {"a": ("r2", "verify p: cuda: no GPU")}
