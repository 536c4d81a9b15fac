"""Output at scale (fresh operator's trial: 120 inventory aliases of one host, one user, one venv;
``deploy --plan`` printed 3305 lines, each row spelling out ``m001, m002, ... and m120 share the
venv``; ``facts`` 1202 lines for identical hosts): host lists in messages are ClusterShell node
sets, the shared-venv cause is said once (not once per host), and ``facts`` folds identical hosts
above the fold threshold as ``run -b`` does; ``--json`` keeps every host.

Twelve aliases of one real sshd host (above :data:`FOLD_THRESHOLD`), each with its own workdir and
all with one venv folder, as an NFS venv of a rack; the playbook is an install alone, whose planner
claims the venv before it probes anything.
"""

from __future__ import annotations

import json

import pytest

from fleetctl.reporting.terminal import FOLD_THRESHOLD
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

N = 12
PLAY = ("name: install\nhosts: all\ntasks:\n  - name: Install the wheel\n"
        "    pip_install: {wheel: /nowhere/toyfp4-0.1.0-py3-none-any.whl}\n")


def test_many_aliases_of_one_host_fold_in_facts_plan_and_deploy(sshd_farm, tmp_path):
    assert N > FOLD_THRESHOLD
    host = sshd_farm.start("scale")
    write_fake_nvidia_smi(host.bin_dir, [H200])
    venv = sshd_farm.root / "nfs-venv"  # one folder every alias sees as its venv
    venv.mkdir()
    venv.chmod(0o777)
    names = [f"m{i:03d}" for i in range(1, N + 1)]
    inv = write_inventory(tmp_path / "inv.yaml", {"rack": {
        n: {**host.inventory_vars(sshd_farm.known_hosts), "venv": str(venv), "workdir": str(tmp_path / "work" / n)}
        for n in names}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    nodes = f"m[001-{N:03d}]"

    facts = fleetctl("-i", str(inv), "facts", "--hosts", "all", home=tmp_path, timeout_s=300)
    assert facts.returncode == 1, facts.stdout[-3000:] + facts.stderr[-3000:]
    out = facts.stdout
    # identical hosts: one row under their node set and count, as run -b folds them
    assert f"{nodes} ({N})" in out, out
    assert not any(line.startswith("m001 ") or line.strip() == "m001" for line in out.splitlines()), out
    # the live line per host names the host and its state (the venv is a bare folder: a deploy
    # refuses it, so failed); the columns are the table's, the cause is said once under the node
    # set as its failure (not again as a warning note)
    assert sorted(line for line in out.splitlines() if line.startswith("m0")) == sorted(
        f"{n}: FAILED (the cause below)" for n in names), out
    assert out.count("no such interpreter") == 1 and f"\n{nodes}: warning: venv {venv}" not in out, out
    assert f"\n{nodes}: FAILED: venv {venv}" in out, out
    assert len(out.splitlines()) < N + 20, out
    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "all", "--json", home=tmp_path,
                              timeout_s=300).stdout)
    assert sorted(doc) == names and all(doc[n]["gpus"][0]["compute_cap"] == "9.0" for n in names), doc

    # aliases of one H200 build for one arch list: no SM to lose, their installs would collide
    cause = (f"{nodes} share the venv {venv} (one {venv}/.fleetctl-id): all build for 9.0a, so one install serves "
             "them all, but each host's deploy would install it into that venv at the same time as the others'")
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), "--plan", home=tmp_path,
                    timeout_s=300)
    assert plan.returncode == 1, plan.stdout[-3000:] + plan.stderr[-3000:]
    text = " ".join(plan.stdout.split())  # a table may wrap the cause: compare its words
    assert text.count("share the venv") == 1 and cause in text, plan.stdout
    assert "m001, m002" not in text, plan.stdout
    planned = json.loads(fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), "--plan",
                                  "--json", home=tmp_path, timeout_s=300).stdout)
    assert all(cause in planned[n]["error"] for n in names), planned  # --json: every host, its whole cause

    run = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path, timeout_s=300)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    # piped: a line per host as it ends, the cause itself once live and once under failures
    assert run.stdout.count("share the venv") == 2, run.stdout
    assert run.stdout.count("(failures below)") == N - 1, run.stdout
    failures = run.stdout.partition("\nfailures:\n")[2]
    assert failures.startswith(f"{nodes}: FAILED Install the wheel: {cause}"), run.stdout
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert all(cause in record["hosts"][n]["error"] for n in names), record["hosts"]
