"""Slurm end to end through the real CLI (``python -m fleetctl``): the ``slurm:`` inventory source,
``facts``, ``run``, a playbook, Ctrl-C, and the main deploy of kernel_src, against the project's own
test cluster (tests/support/slurm.py): nodes n1, n2 (H200, SM 9.0) and n3 (RTX PRO 6000, SM 12.0),
each with its own private local disk at ``cluster.local``, reached through ``slurm_launcher``
(``$FLEETCTL_SLURM_LAUNCHER`` for the ``slurm:`` source). No mocks: real slurmctld/slurmd, real
srun/sbcast, real nvcc builds, real pip installs into a real venv on each node's own disk.

Hermetic: the run records, the wheel cache, HOME and XDG folders of the controller are under
``tmp_path``; the nodes' HOME is on their own disks (the cluster's TaskProlog).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tests.support.fleet import REPO, fleetctl, last_run
from tests.support.hostvenv import base_site
from tests.support.slurm import (counting_launcher, launcher_calls, slurm_cluster,  # noqa: F401
                                 slurm_cluster_session, slurm_uniform_cluster, slurm_uniform_cluster_session)

HOSTILE = ["a b", "$(touch /tmp/pwned-slurm)", "'\"", "", "x\ny", "*", "-n", "\\", ";|&", "ünï\u00e9", "--",
           "${HOME}", "`id`"]


def hermetic_env(home: Path, launcher: str) -> dict[str, str]:
    """The controller's environment for one CLI call: the launcher for the ``slurm:`` source, and
    HOME/XDG folders under the test's own folder (nothing in the real ``~``)."""
    for sub in ("home", "state", "config"):
        (home / sub).mkdir(exist_ok=True)
    return {"FLEETCTL_SLURM_LAUNCHER": launcher, "HOME": str(home / "home"),
            "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}


def cli(*args: str, home: Path, launcher: str, timeout_s: float = 600, **env: str) -> subprocess.CompletedProcess:
    return fleetctl(*args, home=home, env={**hermetic_env(home, launcher), **env}, timeout_s=timeout_s)


def record(home: Path) -> dict:
    return json.loads((last_run(home) / "run.json").read_text())


def write_yaml(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# -- facts and run ------------------------------------------------------------------------------

def test_facts_over_slurm_each_node_its_own_and_a_drained_node_with_its_reason(slurm_cluster, tmp_path):
    slurm_cluster.drain("n2", "GPU fell off the bus (Xid 79)")
    res = cli("-i", "slurm:", "facts", "--hosts", "all", "--json", home=tmp_path,
              launcher=slurm_cluster.launcher_text)
    assert res.returncode == 1, res.stderr[-3000:]  # one host unreachable: exit 1, the others finished
    facts = json.loads(res.stdout)  # stdout holds exactly one JSON document
    assert sorted(facts) == ["n1", "n2", "n3"]
    n1, n2, n3 = facts["n1"], facts["n2"], facts["n3"]
    # each node's own facts, gathered there by the facts script as a job step
    assert n1["reachable"] and n3["reachable"]
    assert (n1["hostname"], n3["hostname"]) == ("n1", "n3")
    assert [g["compute_cap"] for g in n1["gpus"]] == ["9.0"] and n1["gpus"][0]["name"] == "NVIDIA H200"
    assert [g["compute_cap"] for g in n3["gpus"]] == ["12.0"]
    assert (n1["build"]["cuda_architectures"], n3["build"]["cuda_architectures"]) == ("90a", "120a")
    assert n1["workdir"].startswith(str(slurm_cluster.local / "home" / ".fleetctl" / "n1"))  # the node's own ~
    for node in ("n1", "n3"):  # facts write nothing on a host (as Ansible's setup module): no workdir made
        assert not (slurm_cluster.node_disk(node) / "home" / ".fleetctl").exists()
    assert not (slurm_cluster.node_disk("n2") / "home" / ".fleetctl").exists()  # nothing ran on n2
    # plus Slurm's view of the node
    assert n1["slurm"]["state"] == "idle" and n1["slurm"]["features"] == ["sm_90", "h200"]
    assert n3["slurm"]["gres"] == ["gpu:rtxpro6000:1"] and n3["slurm"]["partitions"] == ["gpu"]
    assert (n1["slurm"]["cpus"], n1["slurm"]["memory_mib"]) == (2, 1000)
    # the drained node: unreachable, with Slurm's reason, who drained it, and Slurm's view
    assert n2["reachable"] is False
    assert "drained" in n2["error"] and "GPU fell off the bus (Xid 79)" in n2["error"] and "root" in n2["error"]
    assert n2["slurm"]["state"] == "drained" and n2["slurm"]["reason"] == "GPU fell off the bus (Xid 79)"
    assert "gpus" not in n2
    rec = record(tmp_path)
    assert rec["hosts"]["n2"]["status"] == "unreachable" and rec["status"] == "failed"
    assert slurm_cluster.jobs() == []  # released

    # the human-readable table says the same, with the reason
    table = cli("-i", "slurm:", "facts", "--hosts", "sm_90", home=tmp_path, launcher=slurm_cluster.launcher_text,
                COLUMNS="250")
    assert table.returncode == 1
    assert "n1" in table.stdout and "UNREACHABLE" in table.stdout and "Xid" in table.stdout


def test_run_hostile_argv_exact_and_a_step_failing_on_one_node(slurm_cluster, tmp_path):
    script = ("import json, os, sys; print(json.dumps([sys.argv[1:], os.uname().nodename])); "
              "sys.exit(4 if os.uname().nodename == 'n2' else 0)")
    res = cli("-i", "slurm:", "run", "--hosts", "all", "--json", "--", "python3", "-c", script, *HOSTILE,
              home=tmp_path, launcher=slurm_cluster.launcher_text)
    assert res.returncode == 1, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    for node in ("n1", "n2", "n3"):
        assert json.loads(doc[node]["stdout"]) == [HOSTILE, node]  # every argument arrived exactly
    assert (doc["n1"]["rc"], doc["n2"]["rc"], doc["n3"]["rc"]) == (0, 4, 0)  # n2 failed; the others did not
    assert not Path("/tmp/pwned-slurm").exists()
    rec = record(tmp_path)
    assert rec["argv"] == ["python3", "-c", script, *HOSTILE]
    assert {h: o["status"] for h, o in rec["hosts"].items()} == {"n1": "ok", "n2": "failed", "n3": "ok"}
    assert b"n1" in (last_run(tmp_path) / "logs" / "n1.log").read_bytes()
    assert slurm_cluster.jobs() == []


def test_a_first_word_starting_with_a_dash_is_a_missing_program_as_over_ssh_and_local(slurm_cluster, tmp_path):
    for word in ["--version", "-n", "A=1"]:
        res = cli("-i", "slurm:", "run", "--hosts", "n1", "--json", "--", word, "x",
                  home=tmp_path, launcher=slurm_cluster.launcher_text)
        doc = json.loads(res.stdout)
        assert doc["n1"]["rc"] == 127, (word, doc)  # not srun's, env's or sudo's own option
    assert slurm_cluster.jobs() == []


STEPS_PLAY = """\
name: a step that fails on one node
hosts: all
gather_facts: false
tasks:
  - name: check the node
    command:
      argv: [/bin/sh, -c, 'echo "on $SLURMD_NODENAME"; [ "$SLURMD_NODENAME" != n2 ] || {{ echo "n2: ECC errors" >&2; exit 3; }}']
  - name: after the check
    command:
      argv: [/bin/sh, -c, 'echo "done > {local}/done"; echo done > {local}/done']
"""


def test_playbook_step_failing_on_one_node_the_others_finish(slurm_cluster, tmp_path):
    play = tmp_path / "steps.yaml"
    play.write_text(STEPS_PLAY.format(local=slurm_cluster.local))
    res = cli("-i", "slurm:", "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path,
              launcher=slurm_cluster.launcher_text)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    rec = record(tmp_path)
    hosts = rec["hosts"]
    assert {h: o["status"] for h, o in hosts.items()} == {"n1": "ok", "n2": "failed", "n3": "ok"}
    assert [t["status"] for t in hosts["n1"]["tasks"]] == ["changed", "changed"]
    assert [(t["status"], t["rc"]) for t in hosts["n2"]["tasks"]] == [("failed", 3)]
    assert "n2: ECC errors" in (last_run(tmp_path) / "logs" / "n2.log").read_text()
    for node, ran in (("n1", True), ("n2", False), ("n3", True)):  # each node's own disk
        assert (slurm_cluster.node_disk(node) / "done").exists() is ran
    assert "n3 | on n3" in res.stdout
    assert slurm_cluster.jobs() == []


QUICK_PLAY = """\
name: quick
hosts: all
gather_facts: false
tasks:
  - name: {name}
    command:
      argv: [/bin/sh, -c, '{script}']
"""


def test_a_finished_deploy_releases_the_nodes_lock_and_a_dead_lock_process_is_taken_over(slurm_cluster, tmp_path):
    """A deploy's lock on the node is released when the run ends (the record cleared), so the next
    deploy takes it with no warning; a lock process killed mid-run (OOM killer, kill -9) leaves its
    record, and the next deploy takes it over with the warning naming that run (new-user trial:
    every Slurm deploy warned of the previous, finished run's "stale" lock: srun stops a step
    with SIGKILL, so the lock script's trap never cleared the record)."""
    lock_file = slurm_cluster.node_disk("n1") / "home" / ".fleetctl" / "n1" / "deploy.lock"
    lock_file.unlink(missing_ok=True)  # an earlier test's deploy of n1
    quick = write_play(tmp_path / "quick.yaml", "t", "true")

    def deploy(play: Path) -> tuple[subprocess.CompletedProcess, dict, list[dict]]:
        res = cli("-i", "slurm:", "deploy", "--hosts", "n1", "--playbook", str(play), home=tmp_path,
                  launcher=slurm_cluster.launcher_text)
        run_dir = last_run(tmp_path)
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
        return res, json.loads((run_dir / "run.json").read_text()), events

    first, first_rec, _ = deploy(quick)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert lock_file.read_text() == ""  # released: the lock process cleared its record and ended
    second, _, second_events = deploy(quick)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "stale" not in second.stdout + second.stderr
    assert not [e for e in second_events if e["event"] == "lock.stale_taken_over"]
    assert any(e["event"] == "lock.acquired" for e in second_events)  # the lock was taken all the same
    assert lock_file.read_text() == ""

    # the lock process dies mid-run by SIGKILL: its record stays; the next deploy warns and takes over
    killer = write_play(tmp_path / "kill.yaml", "kill the lock process",
                        # mid-run: the run goes on for 5 s after (a lock lost in its last moments is
                        # caught by the next run instead, lockwatch's docstring)
                        'read -r pid rest < "$HOME/.fleetctl/n1/deploy.lock" && kill -KILL "$pid" && sleep 5')
    killed, killed_rec, _ = deploy(killer)
    assert killed.returncode == 0, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert killed_rec["run_id"] in lock_file.read_text()
    # and that run says so: the host's work stands, with a warning line (new-user trial: it ended
    # "ok" without a word; fleetctl/engine/lockwatch.py)
    (warning,) = killed_rec["hosts"]["n1"]["warnings"]
    assert "was lost during the run: its process on the host ended" in warning and "no other run" in warning
    assert f"n1 | note: {warning}" in killed.stdout, killed.stdout[-2000:]
    third, third_rec, third_events = deploy(quick)
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-2000:]
    assert f"taking over the stale deploy lock of run {killed_rec['run_id']}" in third.stdout
    assert [e["previous"]["run_id"] for e in third_events if e["event"] == "lock.stale_taken_over"] == \
        [killed_rec["run_id"]]
    assert lock_file.read_text() == ""  # and that run released it cleanly
    assert first_rec["run_id"] != killed_rec["run_id"] != third_rec["run_id"]

    # the lock file made anew by another controller mid-run: the lock process lets go (it reads
    # the file every 3 s), and the host fails naming the run that holds the lock now
    other = '{"run_id": "20261205T000000.000Z-0ther0", "controller": "ctl2", "pid": 4242, "user": "ops"}'
    taker = write_play(tmp_path / "take.yaml", "another controller takes the lock",
                       'f="$HOME/.fleetctl/n1/deploy.lock"; read -r pid rest < "$f"; rm -f "$f"; '
                       f"printf '%s %s\\n' \"$$\" '{other}' > \"$f\"; "
                       'n=0; while kill -0 "$pid" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done')
    taken, taken_rec, taken_events = deploy(taker)
    assert taken.returncode == 1, taken.stdout[-2000:] + taken.stderr[-2000:]
    n1 = taken_rec["hosts"]["n1"]
    assert n1["status"] == "failed" and n1["error"].startswith("deploy lock: the deploy lock"), n1
    assert "run 20261205T000000.000Z-0ther0 (controller ctl2, pid 4242, user ops" in n1["error"], n1["error"]
    assert [e["holder"]["run_id"] for e in taken_events if e["event"] == "lock.lost"] == ["20261205T000000.000Z-0ther0"]
    assert "0ther0" in lock_file.read_text()  # the other run's record left alone
    lock_file.unlink()
    assert slurm_cluster.jobs() == []


def test_a_node_whose_gres_has_gpus_but_no_driver_fails_at_facts_unless_verify_device_cpu(slurm_cluster, tmp_path):
    """n1's GRES says gpu:h200:1 but the node has no nvidia-smi (and no driver): it fails at facts
    with one line naming the GRES and what was found, never building for fallback_archs and
    verifying on the CPU to end "ok" (new-user trial); n2 goes on. The host var verify_device: cpu
    is the explicit opt-in to exactly that, and n1's result then carries a warning naming the GRES
    count against what facts found (new-user trial: it ended "ok" with only "no GPU found")."""
    smi = slurm_cluster.node_disk("n1") / "bin" / "nvidia-smi"
    hidden = smi.with_name("nvidia-smi.hidden")
    play = tmp_path / "facts.yaml"
    play.write_text("name: facts\nhosts: all\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    smi.rename(hidden)
    try:
        res = cli("-i", "slurm:", "deploy", "--hosts", "sm_90", "--playbook", str(play), home=tmp_path,
                  launcher=slurm_cluster.launcher_text)
        rec = record(tmp_path)
        site = write_yaml(tmp_path / "site.yaml", {"all": {"hosts": {"n1": {"verify_device": "cpu"}}}})
        opted = cli("-i", "slurm:", "-i", str(site), "deploy", "--hosts", "sm_90", "--playbook", str(play),
                    home=tmp_path, launcher=slurm_cluster.launcher_text)
        opted_rec = record(tmp_path)
    finally:
        hidden.rename(smi)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stdout + res.stderr
    n1 = rec["hosts"]["n1"]
    assert (n1["status"], rec["hosts"]["n2"]["status"]) == ("failed", "ok")
    assert [(t["name"], t["status"]) for t in n1["tasks"]] == [("gather facts", "failed")]  # nothing ran after
    line = "GPU stack broken: Slurm GRES gpu:h200:1 for node n1, but nvidia-smi: not found on PATH"
    assert line in n1["tasks"][0]["msg"] and "verify_device: cpu" in n1["tasks"][0]["msg"]
    assert n1["facts"]["slurm"]["gres"] == ["gpu:h200:1"]  # the facts gathered are kept
    assert line in res.stdout + res.stderr
    assert "building for fallback_archs" not in res.stdout + res.stderr
    # the opt-in: n1 is a build host for fallback_archs (verify would run on the CPU), and says so
    assert opted.returncode == 0, opted.stdout[-2000:] + opted.stderr[-2000:]
    assert {h: o["status"] for h, o in opted_rec["hosts"].items()} == {"n1": "ok", "n2": "ok"}
    n1_facts = opted_rec["hosts"]["n1"]["facts"]
    assert (n1_facts["gpu_stack"]["status"], n1_facts["build"]["source"]) == ("none", "fallback")
    assert n1_facts["build"]["notes"][0].startswith("no GPU found (no NVIDIA driver: a build host)")
    # ... but not silently (new-user trial: "ok" with only "no GPU found"): the host's result and
    # the terminal carry one warning naming the GRES count against what facts found
    warning = ("warning: Slurm GRES gpu:h200:1 for node n1 gives it 1 GPU, but facts found none (nvidia-smi: not "
               "found on PATH; no /proc/driver/nvidia, /dev/nvidia*): run as a host without GPUs (fallback_archs, "
               "verify on the CPU) because the host var verify_device: cpu says so; if n1 should have its GPUs, its "
               "NVIDIA driver is gone (reinstall it, or drain the node)")
    assert opted_rec["hosts"]["n1"]["warnings"] == [warning]
    assert opted_rec["hosts"]["n2"].get("warnings") is None  # its GRES GPU was found
    flat = " ".join((opted.stdout + opted.stderr).split())
    assert f"n1 | {warning}" in flat and "note: warning:" not in flat, flat[-3000:]  # said once, as a warning
    assert slurm_cluster.jobs() == []


def write_play(path: Path, name: str, script: str) -> Path:
    path.write_text(QUICK_PLAY.format(name=name, script=script.replace("'", "''")))
    return path


def test_rolling_batches_hold_only_the_batch_being_worked_on(slurm_cluster, tmp_path):
    log = tmp_path / "slurm-calls"
    launcher = counting_launcher(slurm_cluster, log)
    play = tmp_path / "steps.yaml"
    play.write_text(STEPS_PLAY.format(local=slurm_cluster.local))
    res = cli("-i", "slurm:", "deploy", "--hosts", "n1:n3", "--serial", "1", "--playbook", str(play),
              home=tmp_path, launcher=launcher)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert record(tmp_path)["batches"] == [["n1"], ["n3"]]
    # each batch is allocated when it starts and released when it ends, before the next one
    lifecycle = [c[0] for c in launcher_calls(log) if c[0] in ("salloc", "scancel")]
    assert lifecycle == ["salloc", "scancel", "salloc", "scancel"]
    allocated = [c for c in launcher_calls(log) if c[0] == "salloc"]
    assert ["--nodelist=n1" in c for c in allocated] == [True, False]
    assert ["--nodelist=n3" in c for c in allocated] == [False, True]
    assert slurm_cluster.jobs() == []


# -- interrupting a run ---------------------------------------------------------------------------

LONG_PLAY = """\
name: a long step
hosts: all
gather_facts: false
tasks:
  - name: wait
    command:
      argv: [/bin/sh, -c, 'echo $$ > {local}/step.pid; echo started; exec sleep 300']
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_releases_the_allocation(slurm_cluster, tmp_path, sig, code):
    play = tmp_path / "long.yaml"
    play.write_text(LONG_PLAY.format(local=slurm_cluster.local))
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           **hermetic_env(tmp_path, slurm_cluster.launcher_text)}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", "slurm:", "deploy", "--hosts", "all",
                             "--playbook", str(play)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO)
    try:
        started = set()
        while len(started) < 3:  # the step runs on every node (its line came back live)
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            if line.rstrip().endswith("| started"):
                started.add(line.split("|")[0].strip())
        assert len(slurm_cluster.jobs()) == 2  # one job per GRES type: the H200s, the RTX PRO
        pids = {n: int((slurm_cluster.node_disk(n) / "step.pid").read_text()) for n in ("n1", "n2", "n3")}
        assert all(Path(f"/proc/{p}").exists() for p in pids.values())
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert proc.returncode == code, err[-3000:]
    # released before fleetctl exited: nothing of it pending or running
    assert slurm_cluster.jobs() == [], err[-3000:]
    rec = record(tmp_path)
    assert rec["status"] == "interrupted"
    assert {o["status"] for o in rec["hosts"].values()} == {"interrupted"}
    # listed as interrupted, not failed (new-user trial: `fleetctl runs` said "3 failed")
    listed = cli("runs", "--json", home=tmp_path, launcher=slurm_cluster.launcher_text)
    (row,) = [r for r in json.loads(listed.stdout) if r["run_id"] == rec["run_id"]]
    assert (row["failed"], row["interrupted"], row["not_started"]) == (0, 3, 0), row
    # and Slurm has stopped the steps' processes on the nodes
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{p}").exists() for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in pids.values()), "a step's process outlived the run"


# -- the main deploy --------------------------------------------------------------------------------

def make_node_venvs(cluster, home: Path, launcher: str) -> str:
    """A real venv on each node's own disk (``cluster.local/venv``), made through ``fleetctl run``;
    torch, scikit-build-core and nanobind come from :func:`tests.support.hostvenv.base_site`
    through a .pth file (as tests/test_deploy_e2e.py's make_host_venv; never the controller's
    ``.venv``, where a local deploy puts fp4_kernels), so each costs seconds, not a torch install.
    What fleetctl installs lands in the node venv's own site-packages."""
    venv = str(cluster.local / "venv")
    made = cli("-i", "slurm:", "run", "--hosts", "all", "--", sys.executable, "-m", "venv", venv, home=home,
               launcher=launcher)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    pth = ("import sys, sysconfig; "
           "open(sysconfig.get_paths()['purelib'] + '/_controller_site.pth', 'w').write(sys.argv[1] + '\\n')")
    linked = cli("-i", "slurm:", "run", "--hosts", "all", "--", f"{venv}/bin/python3", "-c", pth,
                 str(base_site()), home=home, launcher=launcher)
    assert linked.returncode == 0, linked.stdout[-2000:] + linked.stderr[-2000:]
    return venv


def plan_actions(res: subprocess.CompletedProcess) -> dict[str, str]:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return {h: [b["action"] for b in r["builds"]][0] for h, r in json.loads(res.stdout).items()}


def decisions(hosts: dict) -> dict[str, str]:
    """build_wheel's decision per host in a run record (or a --dry-run --json document)."""
    return {h: [t for t in o["tasks"] if t["action"] == "build_wheel"][0]["data"]["decision"]["action"]
            for h, o in hosts.items()}


def test_deploy_kernel_src_over_slurm_once_per_arch_class(slurm_cluster, tmp_path):
    log = tmp_path / "slurm-calls"
    launcher = counting_launcher(slurm_cluster, log)
    venv = make_node_venvs(slurm_cluster, tmp_path, launcher)
    # verify_device cpu: the nodes' GPUs are fake (nvidia-smi only) and torch is a CPU build; the
    # verification otherwise runs on the GPU the facts list, and fails there (as it must)
    site = write_yaml(tmp_path / "site.yaml", {"all": {"vars": {"venv": venv, "verify_device": "cpu",
                                                                "workdir": str(slurm_cluster.local / "work")}}})
    inv = ["-i", "slurm:", "-i", str(site)]  # the nodes from sinfo, the vars from the site file

    # --plan and --dry-run first: one build per class (n1 for the H200s, n3 alone), n2 receives
    plan = plan_actions(cli(*inv, "deploy", "--hosts", "all", "--plan", "--json", home=tmp_path,
                            launcher=launcher))
    assert plan == {"n1": "build", "n2": "push", "n3": "build"}
    dry = cli(*inv, "deploy", "--hosts", "all", "--dry-run", "--json", home=tmp_path, launcher=launcher)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert decisions(json.loads(dry.stdout)["hosts"]) == {"n1": "build", "n2": "push", "n3": "build"}
    assert not (slurm_cluster.node_disk("n1") / "work" / "wheels").exists()  # nothing was built or installed

    before = len(launcher_calls(log))
    res = cli(*inv, "deploy", "--hosts", "all", home=tmp_path, launcher=launcher, timeout_s=1800)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    calls = launcher_calls(log)[before:]
    rec = record(tmp_path)
    assert rec["status"] == "ok"
    # the deploy did what the plan said
    assert decisions(rec["hosts"]) == {"n1": "build", "n2": "push", "n3": "build"}
    builds = {h: [t for t in o["tasks"] if t["action"] == "build_wheel"][0] for h, o in rec["hosts"].items()}
    assert res.stdout.count("*** Created fp4_kernels") == 2  # scikit-build-core ran once per class
    assert builds["n2"]["data"]["pushed_from"] == "n1" and builds["n2"]["data"]["sha256"] == builds["n1"]["data"]["sha256"]
    assert builds["n1"]["data"]["sass"] == builds["n2"]["data"]["sass"] == ["sm_90a"]  # exactly the class's SM
    assert builds["n3"]["data"]["sass"] == ["sm_120a"]
    assert "n[1-2] sm_90a cu13.0" in res.stdout and "(built on n1)" in res.stdout and "(built on n3)" in res.stdout
    # the H200 class's wheel reached n2 with ONE sbcast, from the controller's cache; n3's class
    # has no other member, so its wheel went nowhere
    wheel_sbcasts = [c for c in calls if c[0] == "sbcast" and c[-2].endswith(".whl")]
    key16 = builds["n1"]["data"]["key"][:16]
    assert len(wheel_sbcasts) == 1, wheel_sbcasts
    assert f"/wheels/{key16}/" in wheel_sbcasts[0][-2]
    assert [c[0] for c in calls].count("salloc") == 2  # one job per GRES type, for the whole run
    # kernel_src's files went out once per file per job: n1 and n2 (one job) shared each sbcast
    src_dir = str(slurm_cluster.local / "work" / "src" / "kernel_src")
    src_sbcasts = [c for c in calls if c[0] == "sbcast" and c[-1].startswith(src_dir + "/")]
    copied = {h: [t for t in o["tasks"] if t["action"] == "copy"][0]["data"]["uploaded"] for h, o in rec["hosts"].items()}
    assert len(set(copied.values())) == 1 and copied["n1"] >= 10, copied  # every node got every file
    assert len(src_sbcasts) == 2 * copied["n1"], (copied, len(src_sbcasts))  # was 3 per file
    # installed and verified on every node, into the node's own venv on its own disk
    for node in ("n1", "n2", "n3"):
        tasks = {t["action"]: t for t in rec["hosts"][node]["tasks"]}
        assert tasks["pip_install"]["status"] == "changed", node
        assert tasks["verify"]["status"] == "ok", node
        installed = list((slurm_cluster.node_disk(node) / "venv" / "lib").glob("python3*/site-packages/fp4_kernels"))
        assert len(installed) == 1 and (installed[0] / "__init__.py").exists(), node
        assert b"PASS smoke" in (last_run(tmp_path) / "logs" / f"{node}.log").read_bytes()
        assert list((slurm_cluster.node_disk(node) / "work" / "wheels").glob("*/fp4_kernels-*.whl")), node
    assert not list(Path("/tmp").glob(f"fleetctl-{rec['run_id']}"))  # the wheel's staging folder is gone
    assert slurm_cluster.jobs() == []

    # again, nothing changed: nothing is built, sent or installed, and it says so
    before = len(launcher_calls(log))
    again = cli(*inv, "deploy", "--hosts", "all", home=tmp_path, launcher=launcher, timeout_s=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "*** Created fp4_kernels" not in again.stdout
    assert "nothing changed: every host was already up to date" in again.stdout
    assert "(reused)" in again.stdout and "(built on" not in again.stdout  # as SSH says it
    assert not [c for c in launcher_calls(log)[before:] if c[0] == "sbcast" and c[-2].endswith(".whl")]
    rec = record(tmp_path)
    for node in ("n1", "n2", "n3"):
        tasks = {t["action"]: t for t in rec["hosts"][node]["tasks"]}
        assert tasks["build_wheel"]["status"] == "ok" and tasks["pip_install"]["status"] == "ok", node
        assert tasks["verify"]["status"] == "ok", node
    assert slurm_cluster.jobs() == []

    # --plan warns when slurm_time is shorter than the last build of the class took (the builds
    # above, from their run record): Slurm would cancel the job at its limit mid-build
    short = write_yaml(tmp_path / "short.yaml", {"all": {"vars": {"slurm_time": "0:05"}}})
    warned = cli(*inv, "-i", str(short), "deploy", "--hosts", "all", "--plan", "--force", home=tmp_path,
                 launcher=launcher, COLUMNS="250")
    assert warned.returncode == 0, warned.stdout[-3000:] + warned.stderr[-3000:]
    for node in ("n1", "n3"):  # the builders; n2 only receives
        assert f"warning: {node}: slurm_time=0:05 (5 s) is shorter than the last build of this class took" \
            in warned.stdout, warned.stdout[-3000:]
    assert "warning: n2:" not in warned.stdout


# -- uploads: one sbcast per file for all the nodes that ask for it -------------------------------

COPY_PLAY = """\
name: copy trees to every node
hosts: all
gather_facts: false
tasks:
  - name: the same tree to the same node-local path on every node
    copy: {{src: {src}, dest: {local}/tree}}
  - name: the same tree to a path of each node's own
    copy: {{src: {src}, dest: "{local}/per/{{{{ host }}}}"}}
  - name: a tree whose destination n2 cannot create
    copy: {{src: {src}, dest: {local}/blocked/tree}}
"""


def make_tree(root: Path) -> dict[str, bytes]:
    """A small source tree: text, an empty file, a binary file above the size the coalescer
    hashes, an executable script in a deeper folder. Returns relative path -> bytes."""
    files = {"README.txt": b"kernels for every SM\n", "empty": b"", "sub/blob.bin": os.urandom(300 * 1024 + 7),
             "sub/deeper/run.sh": b"#!/bin/sh\necho hi\n", "sub/k.cu": b"__global__ void k() {}\n" * 50}
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "sub/deeper/run.sh").chmod(0o755)
    return files


def test_copy_to_three_nodes_is_one_sbcast_per_file(slurm_uniform_cluster, tmp_path):
    # three nodes of one kind: one job holds them (tests/support/slurm.py UNIFORM_NODES)
    cluster = slurm_uniform_cluster
    log = tmp_path / "slurm-calls"
    launcher = counting_launcher(cluster, log)
    src = tmp_path / "src"
    files = make_tree(src)
    (cluster.node_disk("n2") / "blocked").write_text("a file where n2's folder would go")
    play = tmp_path / "copy.yaml"
    play.write_text(COPY_PLAY.format(src=src, local=cluster.local))
    res = cli("-i", "slurm:", "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path,
              launcher=launcher)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]  # n2 failed its last task
    rec = record(tmp_path)
    hosts = rec["hosts"]
    assert {h: o["status"] for h, o in hosts.items()} == {"n1": "ok", "n2": "failed", "n3": "ok"}
    assert [t["status"] for t in hosts["n1"]["tasks"]] == ["changed", "changed", "changed"]
    assert [t["status"] for t in hosts["n2"]["tasks"]] == ["changed", "changed", "failed"]
    why = hosts["n2"]["tasks"][2]["msg"]
    assert why.startswith("upload ") and "on node n2" in why and "blocked" in why and "Not a directory" in why
    calls = launcher_calls(log)
    assert [c[0] for c in calls].count("salloc") == 1  # one job for the three nodes
    local = str(cluster.local)
    per_dest: dict[str, int] = {}
    for call in (c for c in calls if c[0] == "sbcast"):  # sbcast --force --jobid=J.S SOURCE TMP
        folder = os.path.dirname(call[-1])[len(local) + 1:]  # TMP lies beside the destination
        top = "/".join(folder.split("/")[:2]) if folder.startswith("per/") else folder.split("/")[0]
        per_dest[top] = per_dest.get(top, 0) + 1
    n = len(files)
    # the same tree to the same path: ONE sbcast per file for the three nodes (it was one per file
    # per node); to a path of each node's own: one per file per node, as they must; n2 refusing a
    # folder costs the others nothing and still shares the sbcast of n1 and n3
    assert per_dest == {"tree": n, "per/n1": n, "per/n2": n, "per/n3": n, "blocked": n}, per_dest
    # each node has the exact bytes, with the modes, on its own disk, and nothing of the others'
    for node in ("n1", "n2", "n3"):
        disk = cluster.node_disk(node)
        for rel, data in files.items():
            for where in ("tree", f"per/{node}") + (("blocked/tree",) if node != "n2" else ()):
                got = disk / where / rel
                assert got.read_bytes() == data, (node, where, rel)
                assert got.stat().st_mode & 0o777 == (0o755 if rel.endswith(".sh") else 0o644), (node, rel)
        assert sorted(p.name for p in (disk / "per").iterdir()) == [node]
        assert [p for p in disk.rglob("*.part")] == []  # no temporary file left behind
    assert (cluster.node_disk("n2") / "blocked").read_text() == "a file where n2's folder would go"
    assert cluster.jobs() == []

    # again, nothing changed: every file is known by its sha256 on every node; nothing is sent
    before = len(launcher_calls(log))
    again = cli("-i", "slurm:", "deploy", "--hosts", "n1,n3", "--playbook", str(play), home=tmp_path,
                launcher=launcher)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert {h: [t["status"] for t in o["tasks"]] for h, o in record(tmp_path)["hosts"].items()} == \
        {"n1": ["ok", "ok", "ok"], "n3": ["ok", "ok", "ok"]}
    assert [c[0] for c in launcher_calls(log)[before:]].count("sbcast") == 0


def test_a_workdir_of_another_user_is_named_and_never_used_over_slurm_too(slurm_cluster, tmp_path):
    """Slurm job steps make the run folder by the same host script as SSH (``own_workdir``): root,
    who could enter it, never writes into another user's private workdir but is told whose it is."""
    import pwd

    from tests.support.sshd import ensure_user

    user = ensure_user("bash")
    entry = pwd.getpwnam(user)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, entry.pw_uid, entry.pw_gid)
    theirs.chmod(0o700)
    site = write_yaml(tmp_path / "site.yaml", {"all": {"hosts": {"n1": {"workdir": str(theirs)}}}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK_PLAY.format(name="t", script="true"))
    res = cli("-i", "slurm:", "-i", str(site), "deploy", "--hosts", "n1", "--playbook", str(play), home=tmp_path,
              launcher=slurm_cluster.launcher_text)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    error = record(tmp_path)["hosts"]["n1"]["error"]
    assert error.startswith(f"workdir {theirs} (owner {user}, mode 0700) is {user}'s, not root's: "), error
    assert list(theirs.iterdir()) == []
    assert slurm_cluster.jobs() == []


def test_a_deploy_lock_that_is_a_symbolic_link_is_never_followed_over_slurm(slurm_cluster, tmp_path):
    """The lock script of Slurm job steps (fleetctl/engine/hostlock.py) refuses a lock path that is a
    symbolic link, as the SSH start's O_NOFOLLOW does: another user's link in a shared folder would
    have the run truncate whatever it points to."""
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    lock = tmp_path / "shared.lock"
    lock.symlink_to(target)
    site = write_yaml(tmp_path / "site.yaml", {"all": {"hosts": {"n1": {"deploy_lock": str(lock)}}}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK_PLAY.format(name="t", script="true"))
    res = cli("-i", "slurm:", "-i", str(site), "deploy", "--hosts", "n1", "--playbook", str(play), home=tmp_path,
              launcher=slurm_cluster.launcher_text)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    error = record(tmp_path)["hosts"]["n1"]["error"]
    assert f"cannot take the deploy lock {lock}: {lock} is a symbolic link (owner root): never followed" in error, error
    assert target.read_text() == "keep me\n"
