"""A node whose Slurm GRES count is not the number of GPUs facts find is a warning in facts and
in every play, in ``scontrol show node``'s words (``Gres=gpu:h200:1``). Real test cluster
(tests/support/slurm.py), real CLI; the node's fake nvidia-smi lists two H200s where its GRES
gives one (a GPU added without updating gres.conf)."""

from __future__ import annotations

import json
import re

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.slurm import slurm_cluster, slurm_cluster_session  # noqa: F401
from tests.test_slurm_node_env_e2e import cli


def test_a_gres_count_the_gpus_found_contradict_is_a_warning_in_slurms_words(slurm_cluster, tmp_path):
    own = slurm_cluster.node_disk("n1") / "bin" / "nvidia-smi"
    kept = own.read_bytes()
    write_fake_nvidia_smi(own.parent, [H200, H200])
    play = tmp_path / "quick.yaml"
    play.write_text("name: quick\nhosts: all\ntasks:\n  - name: say\n    command: {argv: [echo, hello]}\n")
    try:
        facts_res = cli("-i", "slurm:", "facts", "--hosts", "n1:n2", "--json", home=tmp_path,
                        launcher=slurm_cluster.launcher_text)
        play_res = cli("-i", "slurm:", "deploy", "--hosts", "n1", "--playbook", str(play), home=tmp_path,
                       launcher=slurm_cluster.launcher_text)
    finally:
        own.write_bytes(kept)
    # Slurm's own words for the node's GRES, as scontrol show node prints them
    shown = re.search(r"\bGres=(\S+)", slurm_cluster.client("scontrol", "show", "node", "n1").stdout)
    assert shown, "scontrol show node n1 prints no Gres="
    assert facts_res.returncode == 0, facts_res.stderr[-3000:]  # a warning: the host is still ok
    facts = json.loads(facts_res.stdout)
    assert len(facts["n1"]["gpus"]) == 2
    notes = [n for n in facts["n1"]["build"]["notes"] if "Slurm" in n]
    assert notes == [
        f"warning: Slurm's Gres={shown[1]} of node n1 (scontrol show node n1) gives it 1 GPU, but facts found 2: "
        "NVIDIA H200 (compute capability 9.0): Slurm hands out 1 of its 2 GPUs, the others stay idle: fix node "
        "n1's Gres in slurm.conf/gres.conf (or its GPUs)"], notes
    assert not [n for n in facts["n2"]["build"]["notes"] if "Slurm" in n]  # n2's GRES fits its one GPU
    assert play_res.returncode == 0, play_res.stderr[-3000:]
    # the note is a warning and says so once (it read "n1 | note: warning: Slurm's Gres=...")
    assert any(line.startswith("n1 | warning: Slurm's Gres=") for line in play_res.stdout.splitlines()), \
        play_res.stdout[-3000:]
    assert "note: warning:" not in play_res.stdout + play_res.stderr, play_res.stdout[-3000:]
    flat = " ".join((play_res.stdout + play_res.stderr).split())
    assert f"Slurm's Gres={shown[1]} of node n1 (scontrol show node n1) gives it 1 GPU, but facts found 2" in flat, \
        flat[-3000:]
