"""What facts say about a Slurm node is the node's truth: a job step runs in the node's own
environment, never the controller's (srun's default ``--export=ALL`` copies the controller's into
the task, srun(1)), so facts find the node's tools, not the ones on the controller's PATH; and a
GRES type or ``sm_XY`` feature the GPU found contradicts is a warning in facts and in every play.
Real test cluster (tests/support/slurm.py), real CLI.

The cluster's nodes share this machine's file system (as nodes share /home or /opt over NFS), so a
controller PATH entry names a folder the nodes can reach: exactly how the leak shows on a cluster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run
from tests.support.slurm import slurm_cluster, slurm_cluster_session  # noqa: F401

RTX_5090 = ("12.0", "NVIDIA GeForce RTX 5090", 32607)


def cli(*args: str, home: Path, launcher: str, **env: str):
    for sub in ("home", "state", "config"):
        (home / sub).mkdir(exist_ok=True)
    return fleetctl(*args, home=home, timeout_s=300,
                    env={"FLEETCTL_SLURM_LAUNCHER": launcher, "HOME": str(home / "home"),
                         "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"), **env})


def test_a_controller_path_entry_with_its_own_nvidia_smi_is_not_seen_on_the_node(slurm_cluster, tmp_path):
    ctl_bin = tmp_path / "ctlbin"
    write_fake_nvidia_smi(ctl_bin, [RTX_5090])  # the controller's (a workstation's) GPU
    path = f"{ctl_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    own = slurm_cluster.node_disk("n2") / "bin" / "nvidia-smi"
    hidden = own.with_name("nvidia-smi.hidden")
    own.rename(hidden)  # n2 has no nvidia-smi of its own (a node whose driver is not installed)
    try:
        res = cli("-i", "slurm:", "facts", "--hosts", "n1:n2", "--json", home=tmp_path,
                  launcher=slurm_cluster.launcher_text, PATH=path, FLEETCTL_TEST_CONTROLLER_ONLY="leaked")
    finally:
        hidden.rename(own)
    facts = json.loads(res.stdout)
    assert [g["name"] for g in facts["n1"]["gpus"]] == ["NVIDIA H200"], facts["n1"]  # the node's own GPU
    assert facts["n2"]["reachable"] is not False, facts["n2"]
    assert not facts["n2"].get("gpus"), facts["n2"]  # not the controller's RTX 5090
    assert "RTX 5090" not in res.stdout

    # nothing else of the controller's environment reaches a step; the node's login variables do
    show = ("printf '%s\\n' \"PATH=$PATH\" \"HOME=$HOME\" \"USER=${USER-}\" "
            "\"ONLY=${FLEETCTL_TEST_CONTROLLER_ONLY-unset}\"")
    res = cli("-i", "slurm:", "run", "--hosts", "n1", "--json", "--", "/bin/sh", "-c", show, home=tmp_path,
              launcher=slurm_cluster.launcher_text, PATH=path, FLEETCTL_TEST_CONTROLLER_ONLY="leaked")
    assert res.returncode == 0, res.stderr[-3000:]
    seen = dict(line.split("=", 1) for line in json.loads(res.stdout)["n1"]["stdout"].splitlines())
    assert str(ctl_bin) not in seen["PATH"] and seen["ONLY"] == "unset", seen
    assert seen["PATH"].startswith(f"{slurm_cluster.local}/bin:"), seen  # the site's TaskProlog still counts
    assert seen["HOME"] == str(slurm_cluster.local / "home") and seen["USER"] == "root", seen


def test_a_gres_type_and_feature_the_gpu_found_contradicts_is_a_warning_in_facts_and_plays(slurm_cluster, tmp_path):
    # n3 is labelled gpu:rtxpro6000:1, sm_120, rtxpro6000; its GPU is swapped for an H200
    own = slurm_cluster.node_disk("n3") / "bin" / "nvidia-smi"
    kept = own.read_bytes()
    write_fake_nvidia_smi(own.parent, [H200])
    play = tmp_path / "quick.yaml"
    play.write_text("name: quick\nhosts: all\ntasks:\n  - name: say\n    command: {argv: [echo, hello]}\n")
    try:
        facts_res = cli("-i", "slurm:", "facts", "--hosts", "n1:n3", "--json", home=tmp_path,
                        launcher=slurm_cluster.launcher_text)
        play_res = cli("-i", "slurm:", "deploy", "--hosts", "n3", "--playbook", str(play), home=tmp_path,
                       launcher=slurm_cluster.launcher_text)
    finally:
        own.write_bytes(kept)
    facts = json.loads(facts_res.stdout)
    assert facts_res.returncode == 0, facts_res.stderr[-3000:]  # a warning: the host is still ok
    assert facts["n3"]["build"]["cuda_architectures"] == "90a"  # built for what is there
    notes = [n for n in facts["n3"]["build"]["notes"] if "Slurm" in n]
    assert notes == [
        "warning: Slurm GRES gpu:rtxpro6000:1 of node n3 says rtxpro6000, but facts found NVIDIA H200 (compute "
        "capability 9.0): fleetctl builds and verifies for the GPU found (compute capability 9.0), but jobs that "
        "ask Slurm for rtxpro6000 land on it: fix node n3 in slurm.conf/gres.conf (or its GPU)",
        "warning: Slurm feature sm_120 of node n3 says compute capability 12.0, but facts found NVIDIA H200 "
        "(compute capability 9.0): fleetctl builds and verifies for the GPU found (compute capability 9.0), but "
        "jobs that ask Slurm for sm_120 land on it: fix node n3 in slurm.conf/gres.conf (or its GPU)"], notes
    assert not [n for n in facts["n1"]["build"]["notes"] if "Slurm" in n]  # n1's labels fit its GPU
    # every play tells it (verify is a play too) and keeps it on the host in the run record
    assert play_res.returncode == 0, play_res.stderr[-3000:]
    flat = " ".join((play_res.stdout + play_res.stderr).split())
    assert "Slurm GRES gpu:rtxpro6000:1 of node n3 says rtxpro6000, but facts found NVIDIA H200" in flat, flat[-3000:]
    rec = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert any("Slurm feature sm_120 of node n3" in w for w in rec["hosts"]["n3"]["warnings"]), rec["hosts"]["n3"]
