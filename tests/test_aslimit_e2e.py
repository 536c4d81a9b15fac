"""A login whose ~/.bashrc sets an address-space limit (``ulimit -v 400000``: RLIMIT_AS, bash
counts KiB, so 390 MiB) stops ``import torch`` in the loader (``failed to map segment from shared
object``) or in torch's first allocations (``std::bad_alloc``, an abort, ``MemoryError``: which
one depends on the host's cores and torch's build). Torch is fine; the login's limit is the cause.
A fresh operator's trial: ``fleetctl facts`` said "repair torch in the venv (pip install
--force-reinstall torch==...)", and a verify that died of SIGABRT under the limit did not name it.

Real sshd test host (bash: ~/.bashrc runs for every ssh command), a real venv with the real torch
(tests/support/hostvenv.py), the trial's limit. The words: :func:`fleetctl.facts.venv.address_space_cause`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages

pytestmark = pytest.mark.sshd

#: The trial's ~/.bashrc line: 400000 KiB (bash's ulimit -v unit) = 390 MiB.
LIMIT_LINE = "ulimit -v 400000\n"
#: The words every line blaming the limit carries (facts, --plan and verify).
NAMED = "this login's address-space limit (ulimit -v, RLIMIT_AS) is 390 MiB"
WHERE_AND_FIX = ("it is usually set in the login's rc files (e.g. ~/.bashrc or ~/.profile: ulimit -v, in KiB) or "
                 "in /etc/security/limits.conf (an 'as' line, pam_limits); fix: raise or remove it for this login")

VERIFY_PLAY = """\
name: verify only
hosts: all
tasks:
  - name: Verify toyas
    verify: {package: toyas, needs_torch: false, device: cpu, smoke: false}
"""


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_a_logins_ulimit_v_is_named_as_the_cause_by_facts_plan_and_verify_not_a_torch_reinstall(sshd_farm, tmp_path):
    h = sshd_farm.start("aslimit")  # the current user, bash: ~/.bashrc runs for every ssh command
    venv = make_venv(tmp_path / "venv", "virtualenv")  # the real torch (the controller's, through a .pth)
    pkg = site_packages(Path(venv)) / "toyas"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def op():\n    return 1\n")
    (h.home / ".bashrc").write_text(LIMIT_LINE)
    play = tmp_path / "verify.yaml"
    play.write_text(VERIFY_PLAY)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lim": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                "venv": venv, "workdir": str(tmp_path / "work"),
                                                                "verify_device": "cpu"}}})

    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
    assert facts.returncode == 1, facts.stdout + facts.stderr  # a deploy refuses the host: failed, not ok
    got = json.loads(facts.stdout)["lim"]
    assert got["status"] == "failed" and "does not import" in got["error"], got.get("error")
    assert got["rlimit_as_mib"] == 390 and got["python"]["torch_import"]["ok"] is False, got["python"]
    torch_line = [w for w in got["warnings"] if "does not import" in w]
    assert len(torch_line) == 1, got["warnings"]
    assert NAMED in torch_line[0] and WHERE_AND_FIX in torch_line[0], torch_line[0]
    assert "reinstall" not in torch_line[0] and "repair torch" not in torch_line[0], torch_line[0]

    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(REPO / "playbooks" / "fp4-kernels.yaml"))
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    refused = [t["msg"] for t in json.loads(plan.stdout)["lim"]["tasks"] if "does not import" in (t["msg"] or "")]
    # --plan's preflight refuses with the facts' line, word for word (one rule)
    assert refused and refused[0] == "preflight: " + torch_line[0].removeprefix("warning: ").removesuffix(
        "; a deploy refuses this host until it is fixed"), refused

    # verify under the same limit (a package verified without torch, so its preflight lets it run):
    # the script's `import torch` fails or the interpreter dies, and the line names the limit
    dep = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert dep.returncode == 1, dep.stdout[-3000:] + dep.stderr[-3000:]
    tasks = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["lim"]["tasks"]
    verify = [t for t in tasks if t["action"] == "verify"][0]
    assert verify["status"] == "failed" and verify["msg"].startswith("verify toyas: "), verify
    assert NAMED in verify["msg"] and WHERE_AND_FIX in verify["msg"], verify["msg"]
