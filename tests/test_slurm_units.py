"""Pure parts of the Slurm support: sinfo parsing, the slurm: inventory, argv building, srun's notices."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.connection.registry import KINDS, load_kind
from fleetctl.connection.slurm_settings import SlurmSettings
from fleetctl.connection.slurm_alloc import AllocationRequest
from fleetctl.connection.slurm_client import SlurmClient, client_env, parse_launcher
from fleetctl.connection.slurm_nodes import gres_type, holdup, parse_sinfo, sinfo_argv, split_gres
from fleetctl.connection.slurm_end import (StepEnd, describe_end, end_from_job_state, job_expired,
                                           parse_job_record, read_step_end)
from fleetctl.connection.slurm_step import LOGIN_ENV, StepOutcome, step_argv
from fleetctl.reporting.slurm_time import last_builds, slurm_time_s, slurm_time_warnings
from fleetctl.errors import InventoryError
from fleetctl.inventory.sources.slurm import inventory_from_sinfo, load_slurm_inventory, parse_spec

# Recorded from Slurm 22.05 (the test cluster plus a larger site's shapes): sinfo -N -h -o SINFO_FORMAT.
SINFO = """\
n1|gpu*|idle|2|1000|sm_90,h200|sm_90,h200|gpu:h200:1|10.200.0.11|Unknown|Unknown|none
n2|gpu*|drained|2|1000|sm_90,h200|sm_90,h200|gpu:h200:1|10.200.0.12|2026-12-01T03:50:03|root|bad gpu: Xid 79 | see ticket 12
n3|gpu*|mixed|2|1000|sm_120,rtx5090|sm_120,rtx5090|gpu:rtx5090:1|10.200.0.13|Unknown|Unknown|none
n3|debug|mixed|2|1000|sm_120,rtx5090|sm_120,rtx5090|gpu:rtx5090:1|10.200.0.13|Unknown|Unknown|none
b01|blackwell|down*|224|2063000|sm_100,b200,ib|sm_100,b200|gpu:b200:8(S:0-1),nic:1|b01-ib|2026-11-30T22:10:00|slurm|Not responding
b02|blackwell|idle+drain|224|2063000|sm_100,b200,debug|sm_100,b200|gpu:b200:8(S:0-1)|b02|2026-11-30T22:11:00|alice|reboot to fix NVLink
c01|cpu|idle~|64|257000|(null)|(null)|(null)|c01|Unknown|Unknown|none
slurm_load_partitions: warning: not a node line
"""


def test_parse_sinfo_folds_partitions_and_keeps_reasons():
    nodes = parse_sinfo(SINFO)
    assert list(nodes) == ["n1", "n2", "n3", "b01", "b02", "c01"]
    n1, n2, n3 = nodes["n1"], nodes["n2"], nodes["n3"]
    assert n1.partitions == ("gpu",) and n1.default_partition == "gpu"
    assert n1.features == ("sm_90", "h200") and n1.gres == ("gpu:h200:1",)
    assert (n1.cpus, n1.memory_mib, n1.address) == (2, 1000, "10.200.0.11")
    assert n1.reason is None and n1.unavailable is None and n1.idle
    # the reason is free text, '|' included: it is the last field
    assert n2.reason == "bad gpu: Xid 79 | see ticket 12"
    assert n2.unavailable == ("Slurm node n2 is drained: bad gpu: Xid 79 | see ticket 12 "
                              "(by root, 2026-12-01T03:50:03)")
    assert n3.partitions == ("gpu", "debug") and n3.default_partition == "gpu"
    assert n3.unavailable is None and not n3.idle
    b01, b02, c01 = nodes["b01"], nodes["b02"], nodes["c01"]
    assert b01.gres == ("gpu:b200:8", "nic:1") and not b01.responding
    assert b01.unavailable.startswith("Slurm node b01 is down*: Not responding")
    assert b02.states == ("idle", "drain") and "reboot to fix NVLink" in b02.unavailable
    assert c01.features == () and c01.gres == () and c01.base_state == "idle"


def test_a_node_slurm_holds_back_is_named_by_its_state():
    # sinfo's words for a node whose slurmd died under a job (seen on the test cluster), before and
    # after slurmctld marks it not responding; a node busy with other work is held by nothing
    nodes = parse_sinfo("n2|gpu*|completing|2|1000|sm_90|sm_90|gpu:h200:1|n2|Unknown|Unknown|none\n"
                        "n4|gpu*|completing*|2|1000|sm_90|sm_90|gpu:h200:1|n4|Unknown|Unknown|none\n"
                        "n3|gpu*|mixed|2|1000|sm_90|sm_90|gpu:h200:1|n3|Unknown|Unknown|none\n")
    n2, n4, n3 = nodes["n2"], nodes["n4"], nodes["n3"]
    assert n2.completing and not n2.idle and n2.unavailable is None
    assert holdup(n2, ["7"]) == "Slurm node n2 is completing (COMPLETING: its slurmd has not finished job 7's cleanup)"
    assert holdup(n2) == "Slurm node n2 is completing (COMPLETING: its slurmd has not finished a job's cleanup)"
    assert holdup(n2, ["7", "9"]).endswith("not finished jobs 7, 9' cleanup)")
    assert holdup(n4, ["7"]) == "Slurm node n4 is not responding (completing*)"
    assert holdup(n3) is None and not n3.completing


def test_node_view_is_json_ready():
    view = parse_sinfo(SINFO)["n2"].view()
    assert view["state"] == "drained" and view["available"] is False
    assert view["reason_user"] == "root" and view["gres"] == ["gpu:h200:1"]
    assert view["cpus"] == 2 and view["memory_mib"] == 1000 and view["partitions"] == ["gpu"]


@pytest.mark.parametrize("gres, expected", [("gpu:h200:8", "gpu_h200"), ("gpu:8", None), ("gpu", None),
                                            ("gpu:a100_3g.20gb:2", "gpu_a100_3g.20gb"), ("nic:ib", "nic_ib")])
def test_gres_type(gres, expected):
    assert gres_type(gres) == expected


def test_split_gres_drops_socket_bindings():
    assert split_gres("gpu:h100:4(S:0),gpu:a100:2(S:1)") == ("gpu:h100:4", "gpu:a100:2")
    assert split_gres("(null)") == ()


def test_sinfo_argv():
    assert sinfo_argv(partition="gpu", nodes="n[1-3]")[-4:] == ["-p", "gpu", "-n", "n[1-3]"]


def test_inventory_groups_by_partition_feature_and_gres():
    inv = inventory_from_sinfo(SINFO, launcher="ssh login01")
    assert inv["all"]["vars"] == {"ansible_connection": "slurm", "slurm_launcher": "ssh login01"}
    assert inv["slurm"]["hosts"] == ["n1", "n2", "n3", "b01", "b02", "c01"]
    assert inv["gpu"]["hosts"] == ["n1", "n2", "n3"]
    assert inv["debug"]["hosts"] == ["n3"]
    assert inv["sm_90"]["hosts"] == ["n1", "n2"] and inv["h200"]["hosts"] == ["n1", "n2"]
    assert inv["sm_120"]["hosts"] == ["n3"] and inv["sm_100"]["hosts"] == ["b01", "b02"]
    assert inv["gpu_h200"]["hosts"] == ["n1", "n2"] and inv["gpu_b200"]["hosts"] == ["b01", "b02"]
    assert "nic" not in inv  # an untyped GRES makes no group
    # a feature named like a partition does not merge into it
    assert inv["feature_debug"]["hosts"] == ["b02"] and inv["debug"]["hosts"] == ["n3"]
    # nodes outside the default partition are told where to allocate
    hv = inv["_meta"]["hostvars"]
    assert hv["n1"] == {} and hv["b01"] == {"slurm_partition": "blackwell"} and hv["c01"] == {"slurm_partition": "cpu"}
    assert set(inv["slurm"]["children"]) == set(inv) - {"_meta", "all", "slurm", "ungrouped"}


def test_inventory_of_one_partition_sets_it_for_all():
    inv = inventory_from_sinfo(SINFO, partition="blackwell")
    assert inv["all"]["vars"]["slurm_partition"] == "blackwell"
    assert inv["_meta"]["hostvars"]["b01"] == {}


def test_group_names_never_break_host_patterns():
    text = "x1|p:1|idle|1|1|a&b,c!d|a&b|gpu:t[1]:1|x1|Unknown|Unknown|none\n"
    inv = inventory_from_sinfo(text)
    assert {"p_1", "a_b", "c_d", "gpu_t_1_"} <= set(inv)


@pytest.mark.parametrize("spec, partition", [("slurm:", None), ("slurm:gpu", "gpu")])
def test_parse_spec(spec, partition):
    assert parse_spec(spec) == partition


@pytest.mark.parametrize("spec", ["slurm", "ssh:gpu", "slurm:a,b", "slurm:a b"])
def test_parse_spec_rejects(spec):
    with pytest.raises(InventoryError) as err:
        parse_spec(spec)
    assert spec in str(err.value)


def test_missing_sinfo_is_one_line(tmp_path):
    with pytest.raises(InventoryError) as err:
        load_slurm_inventory("slurm:", env={"FLEETCTL_SLURM_LAUNCHER": str(tmp_path / "no-such-launcher"),
                                            "PATH": "/usr/bin:/bin"})
    assert "slurm:" in str(err.value) and "not found" in str(err.value) and "\n" not in str(err.value)


def test_salloc_argv():
    req = AllocationRequest(partition="gpu", account="ops", qos="high", time="30", exclusive=True,
                            gres=("gpu:h200:8",))
    argv = req.salloc_argv(["gpu01", "gpu02", "gpu03", "gpu07"], job_name="fleetctl-r1", deadline_s=2.5)
    assert argv == ["salloc", "--no-shell", "--job-name=fleetctl-r1", "--nodelist=gpu[01-03,07]", "--nodes=4",
                    "--immediate=3", "--no-kill", "--partition=gpu", "--account=ops", "--qos=high", "--time=30", "--exclusive",
                    "--gres=gpu:h200:8"]
    assert "--exclusive" not in AllocationRequest(exclusive=False).salloc_argv(["a"], job_name="j", deadline_s=1)


def test_step_argv_ends_options_before_the_command():
    argv = step_argv("7", "n1", ["-rf", "x"], chdir="/home/a")
    assert argv[:2] == ["srun", "--jobid=7"] and "--overlap" in argv and "--chdir=/home/a" in argv
    assert argv[-7:] == ["--", "/bin/sh", "-c", LOGIN_ENV, "fleetctl-step", "-rf", "x"]
    assert "--export=NONE" in argv  # the node's environment, not the controller's (srun(1) --export)


@pytest.mark.parametrize("rc, notices, execve, expected", [
    (3, [b"srun: error: n1: task 0: Exited with exit code 3\n"], None, (3, None)),
    (137, [b"srun: error: n1: task 0: Killed\n"], None, (None, "KILL")),
    (139, [b"srun: error: n1: task 0: Segmentation fault\n"], None, (None, "SEGV")),
    (137, [b"srun: error: n1: task 0: Exited with exit code 137\n"], None, (137, None)),
    (2, [b"srun: error: n1: task 0: Exited with exit code 2\n"], "No such file or directory", (127, None)),
    (2, [b"srun: error: n1: task 0: Exited with exit code 2\n"], "Permission denied", (126, None)),
    (0, [], None, (0, None)),
])
def test_step_outcome(rc, notices, execve, expected):
    outcome = StepOutcome.interpret(rc, notices, execve)
    assert (outcome.rc, outcome.signal) == expected


def test_step_that_never_ran_is_no_outcome():
    assert StepOutcome.interpret(1, [], None) is None


def test_launcher_words_and_settings():
    assert parse_launcher("ssh -p 2222 'login 01'") == ("ssh", "-p", "2222", "login 01")
    s = SlurmSettings.model_validate({"ansible_host": "gpu01", "slurm_time": 30, "slurm_launcher": "ssh login01",
                                      "slurm_exclusive": "false", "port": 8080})
    assert (s.node, s.time, s.launcher, s.exclusive) == ("gpu01", "30", ("ssh", "login01"), False)
    both = SlurmSettings.model_validate({"ansible_host": "10.0.0.5", "slurm_node": "gpu01"})
    assert both.node == "gpu01"  # ansible_host may hold the SSH address of the same machine
    assert SlurmSettings.model_validate({"slurm_launcher": ["nsenter", "--net=/x y"]}).launcher == ("nsenter",
                                                                                                      "--net=/x y")
    with pytest.raises(ValueError):
        SlurmSettings.model_validate({"slurm_launcher": "ssh 'unbalanced"})


def test_kind_is_registered():
    assert KINDS["slurm"] == "fleetctl.connection.slurm:KIND"
    kind = load_kind("slurm")
    assert kind.name == "slurm" and kind.settings_model is SlurmSettings


def test_exec_launcher_appends_argv():
    client = SlurmClient(("nsenter", "--net=/run/netns/x"))
    assert client.command(["srun", "a b"]) == ["nsenter", "--net=/run/netns/x", "srun", "a b"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                        max_size=12), min_size=1, max_size=5))
def test_ssh_launcher_command_line_survives_a_shell(args):
    # ssh(1) hands its joined arguments to the remote login shell: here a local /bin/sh plays it
    client = SlurmClient(("ssh", "login01"))
    line = client.command(["printf", "%s\\0", *args])[-1]
    out = subprocess.run(["/bin/sh", "-c", line], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [a.encode() for a in args]


def test_client_env_drops_job_context_and_controller_venv():
    env = client_env({"SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_JOB_ID": "5", "SLURM_NTASKS": "8",
                      "SALLOC_ACCOUNT": "ops", "VIRTUAL_ENV": "/ctl/.venv", "PYTHONPATH": "/ctl", "HOME": "/h"})
    assert env == {"SLURM_CONF": "/etc/slurm/slurm.conf", "SALLOC_ACCOUNT": "ops", "HOME": "/h"}


# -- how Slurm ends a job under a step (slurm_end): lines as Slurm 22.05 prints them ---------------
# TIME LIMIT, NODE FAILURE and PREEMPTION recorded on the test clusters; a plain scancel and the
# cgroup OOM lines from slurmstepd's req.c / task_cgroup_memory.c of 22.05 (the test cluster has no
# cgroup memory limit).
STEPD = "slurmstepd-n1: error: *** {what} ON n1 CANCELLED AT 2026-12-01T22:50:19{why} ***\n"


@pytest.mark.parametrize("stderr, kind, whole", [
    (STEPD.format(what="STEP 1.0", why=" DUE TO TIME LIMIT") + "srun: error: n1: task 0: Terminated\n",
     "time limit", True),
    ("srun: error: Node failure on n1\n" + STEPD.format(
        what="STEP 1.0", why=" DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"), "node failure", True),
    ("srun: error: Node failure on n1\n", "node failure", True),
    (STEPD.format(what="JOB 7", why=" DUE TO PREEMPTION"), "preemption", True),
    (STEPD.format(what="STEP 7.2", why=""), "cancelled", True),
    ("cc1plus: fatal\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.3. Some of your processes "
     "may have been killed by the cgroup out-of-memory handler.\n", "out of memory", False),
    ("slurmstepd: error: Detected 2 oom_kill events in StepId=4.0 cgroup\n", "out of memory", False),
])
def test_how_slurm_ended_a_step_is_read_from_its_stderr(stderr, kind, whole):
    end = read_step_end(stderr.encode())
    assert end is not None and end.kind == kind and end.whole_job is whole
    assert end.line in stderr


def test_a_step_slurm_did_not_end_has_no_end_and_out_of_memory_is_sigkill():
    assert read_step_end(b"error: *** not slurm's ***\nsrun: error: n1: task 0: Exited with exit code 3\n") is None
    # a command that prints Slurm's words itself (a test log) is not Slurm ending it
    assert read_step_end(b"log: *** STEP 1.0 ON n1 CANCELLED AT 2026-12-01T22:50:19 DUE TO TIME LIMIT ***\n") is None
    oom = StepOutcome.interpret(137, [b"srun: error: n1: task 0: Out Of Memory\n"], None)
    assert oom is not None and (oom.rc, oom.signal) == (None, "KILL")  # the build's OOM handling applies


def test_an_ended_job_is_named_with_its_cause_and_fix():
    rec = parse_job_record("JobId=1 JobName=tl JobState=TIMEOUT Reason=TimeLimit RunTime=00:01:00 "
                           "TimeLimit=00:01:00 Command=(null) WorkDir=/x y")
    end = end_from_job_state(rec)
    assert end is not None and end.kind == "time limit" and rec["TimeLimit"] == "00:01:00"
    line = describe_end(end, job_id="1", node="n1", slurm_time="1", time_limit="00:01:00")
    assert "reached its time limit (TimeLimit 00:01:00, slurm_time=1)" in line and "JobState=TIMEOUT" in line
    unset = describe_end(end, job_id="1", node="n1", slurm_time=None, time_limit=None)
    assert "slurm_time unset: the partition's default" in unset
    for state, words in (("PREEMPTED", "preempted job 1"), ("NODE_FAIL", "Slurm node n1 failed"),
                         ("CANCELLED", "was cancelled"), ("OUT_OF_MEMORY", "for memory")):
        e = end_from_job_state({"JobState": state, "Reason": "x"})
        assert e is not None and words in describe_end(e, job_id="1", node="n1", slurm_time=None, time_limit=None)
    assert end_from_job_state({"JobState": "RUNNING"}) is None
    gone = describe_end(StepEnd("ended", "srun: error: Slurm job 12 has expired"), job_id="12", node="n1",
                        slurm_time="1", time_limit=None)
    assert "has ended under this host's commands on n1" in gone and "slurm_time=1" in gone
    assert job_expired("srun: error: Slurm job 12 has expired")


@pytest.mark.parametrize("text, seconds", [
    ("1", 60), ("0:05", 5), ("2:00:00", 7200), ("1-0", 86400), ("1-2:30", 95400), ("0-0:0:7", 7),
    ("UNLIMITED", None), ("soon", None), (90, 5400)])
def test_slurm_time_formats(text, seconds):
    assert slurm_time_s(text) == seconds


@pytest.mark.parametrize("value, seconds", [
    ("30", 1800), (30, 1800), ("5:30", 330), ("2:00:00", 7200), ("1-0", 86400), ("1-2:30", 95400),
    ("1-2:30:15", 95415), ("UNLIMITED", None), ("infinite", None), ("-1", None), ("0", None)])
def test_slurm_time_takes_slurms_time_forms(value, seconds):
    from fleetctl.connection.slurm_settings import SlurmSettings, time_limit_s
    assert time_limit_s(value) == seconds
    assert SlurmSettings.model_validate({"slurm_time": value}).time == str(value)


@pytest.mark.parametrize("var, value, words", [
    ("slurm_time", "abc", "not a Slurm time limit: 'abc'"), ("slurm_time", "1:2:3:4", "not a Slurm time limit"),
    ("slurm_time", "1.5", "not a Slurm time limit"), ("slurm_time", 1.5, "not a Slurm time limit"),
    ("slurm_time", "1-", "not a Slurm time limit"), ("slurm_time", True, "not a Slurm time limit"),
    ("slurm_partition", "gpu debug", "not a Slurm partition"), ("slurm_account", "a,b", "not a Slurm account"),
    ("slurm_qos", "high prio", "not a Slurm QOS"), ("slurm_reservation", "m a", "not a Slurm reservation"),
    ("slurm_node", "n[1-2],n3", "not a Slurm node name")])
def test_slurm_vars_of_the_wrong_form_are_refused_naming_the_var(var, value, words):
    from fleetctl.connection.slurm_settings import SlurmSettings
    from fleetctl.util.settingsmodel import SettingsError
    with pytest.raises(SettingsError) as err:
        SlurmSettings.model_validate({var: value})
    assert err.value.loc == var and words in str(err.value), str(err.value)
    assert SlurmSettings.model_validate({"slurm_partition": "gpu,debug"}).partition == "gpu,debug"


def test_plan_warns_when_slurm_time_is_shorter_than_the_last_build_of_the_class():
    def rec(run_id, mode, took, action="build", status="changed"):
        return {"run_id": run_id, "mode": mode, "hosts": {"n1": {"tasks": [
            {"action": "build_wheel", "status": status, "duration_s": took,
             "data": {"decision": {"action": action, "key": "k90"}}}]}}}

    records = [rec("r3", "plan", 1.0), rec("r2", "apply", 312.4), rec("r1", "apply", 20.0),
               rec("r0", "apply", 999.0, action="reuse", status="ok")]
    builds = last_builds(records)
    assert builds == {"k90": (312.4, "r2", "n1")}  # the newest real build; plans and reuses built nothing
    rows = {"n1": {"builds": [{"action": "build", "key": "k90"}]}, "n2": {"builds": [{"action": "push", "key": "k90"}]},
            "n3": {"builds": [{"action": "build (forced)", "key": "k90"}]}}
    warnings = slurm_time_warnings(rows, {"n1": {"slurm_time": "2"}, "n2": {"slurm_time": "2"},
                                          "n3": {"slurm_time": "10"}}, builds)
    assert list(warnings) == ["n1"]  # n2 only receives the wheel; n3's 10 minutes are enough
    assert warnings["n1"].startswith("slurm_time=2 (120 s) is shorter than the last build of this class took "
                                     "(312 s, on n1 in run r2)")


H200_FOUND = [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771}]


@pytest.mark.parametrize("gres, features, gpus, warned", [
    (["gpu:rtx5090:1"], ["sm_120", "rtx5090"], H200_FOUND, ["GRES gpu:rtx5090:1", "feature sm_120"]),
    (["gpu:h200:1"], ["sm_120"], H200_FOUND, ["feature sm_120"]),
    (["gpu:rtx5090:1"], ["sm_90"], H200_FOUND, ["GRES gpu:rtx5090:1"]),
    (["gpu:h200:1(S:0-1)"], ["sm_90", "h200", "ib"], H200_FOUND, []),  # all agree
    (["gpu:rtx5090:1"], ["sm_120"], [{"name": "NVIDIA GeForce RTX 5090", "compute_cap": "12.0"}], []),
    (["gpu:nvidia_h200:1"], ["sm_90a"], H200_FOUND, []),  # AutoDetect's own type; sm_90a is SM 9.0
    (["gpu:1", "mps:100"], [], H200_FOUND, []),  # no type: nothing to check
    (["gpu:rtx5090:1"], ["sm_120"], [], []),  # no GPU found: check_gpu_stack's case, not this one
])
def test_slurm_labels_against_the_gpus_found(gres, features, gpus, warned):
    from fleetctl.build.gpustack import slurm_label_warnings

    facts = {"slurm": {"node": "n3", "gres": gres, "features": features}, "gpus": gpus}
    lines = slurm_label_warnings(facts)
    assert [next(w for w in warned if w in line) for line in lines] == warned, lines
    for line in lines:
        assert "of node n3 says" in line and "but facts found NVIDIA H200 (compute capability 9.0)" in line
        assert "fix node n3 in slurm.conf/gres.conf" in line


@pytest.mark.parametrize("gres, found, want", [
    (["gpu:h100:8(S:0-1)"], 4, "Slurm's Gres=gpu:h100:8(S:0-1) of node n3 (scontrol show node n3) gives it 8 GPUs, "
     "but facts found 4: NVIDIA H200 (compute capability 9.0): jobs that ask Slurm for --gres=gpu:8 land on it and "
     "find 4; fleetctl builds and verifies for the GPUs found: fix node n3's Gres in slurm.conf/gres.conf (or its GPUs)"),
    (["gpu:2", "mps:100"], 1, "Slurm's Gres=gpu:2 of node n3 (scontrol show node n3) gives it 2 GPUs, but facts found 1"),
    (["gpu:h200:4"], 8, "gives it 4 GPUs, but facts found 8: NVIDIA H200 (compute capability 9.0): Slurm hands out 4 "
     "of its 8 GPUs, the others stay idle: fix node n3's Gres"),
    (["gpu:a100:2", "gpu:h200:2"], 4, None),  # counted over every GPU GRES
    (["gpu:h200:0", "mps:100"], 1, None),  # no GPU GRES: nothing to count against
])
def test_a_gres_gpu_count_the_gpus_found_contradict_is_a_warning(gres, found, want):
    """Issue: GRES counts were unchecked (gpu:8 on a 4-GPU node surfaced only when a job step
    failed or pended); the type/feature check now counts too, in scontrol show node's words."""
    from fleetctl.build.gpustack import slurm_label_warnings

    facts = {"slurm": {"node": "n3", "gres": gres, "features": []}, "gpus": H200_FOUND * found}
    lines = [line for line in slurm_label_warnings(facts) if "Gres=" in line]
    if want is None:
        assert lines == [], lines
    else:
        assert len(lines) == 1 and want in lines[0], lines


def test_login_env_fills_what_sshd_would_set_and_keeps_what_the_node_set():
    """LOGIN_ENV on a step with an empty environment (``--export=NONE``, no TaskProlog): the login
    variables from passwd and the default PATH; with the node's own values set, those stay; the
    argv arrives exactly."""
    import os
    import pwd
    import subprocess

    from fleetctl.connection.slurm_step import DEFAULT_PATH, SUPERUSER_PATH

    def step(preset: list[str], *argv: str) -> str:
        return subprocess.run(["env", "-i", *preset, "/bin/sh", "-c", LOGIN_ENV, "fleetctl-step", *argv],
                              capture_output=True, text=True, check=True).stdout

    me = pwd.getpwuid(os.geteuid())
    hostile = ["a b", "$(id)", "'\"", "", "-n"]
    assert step([], "/bin/sh", "-c", 'printf "%s|" "$@"', "x", *hostile) == "|".join(hostile) + "|"
    seen = dict(line.split("=", 1) for line in step([], "/usr/bin/env").splitlines())
    seen.pop("PWD", None)  # sh's own
    assert seen == {"PATH": SUPERUSER_PATH if os.geteuid() == 0 else DEFAULT_PATH, "HOME": me.pw_dir,
                    "USER": me.pw_name, "LOGNAME": me.pw_name, "SHELL": me.pw_shell}, seen
    seen = dict(line.split("=", 1) for line in step(["PATH=/site/bin:/usr/bin:/bin", "HOME=/scratch/me"],
                                                     "/usr/bin/env").splitlines())
    assert (seen["PATH"], seen["HOME"], seen["USER"]) == ("/site/bin:/usr/bin:/bin", "/scratch/me", me.pw_name), seen


def test_an_allocation_refused_for_a_var_names_the_var_its_value_and_slurms_words():
    from fleetctl.connection.slurm_alloc import AllocationRequest, refused_setting
    req = AllocationRequest(partition="nosuch", qos="gold", time="1", account="acme", reservation="maint")
    line = refused_setting("salloc: error: Job submit/allocate failed: Invalid partition name specified", req,
                           ("debug", "gpu"))
    assert line == ("Slurm refused the host var slurm_partition='nosuch' (Slurm said: Job submit/allocate failed: "
                    "Invalid partition name specified); the node is in partition debug, gpu")
    for said, var in (("Invalid qos specification", "slurm_qos='gold'"),
                      ("Invalid account or account/partition combination specified", "slurm_account='acme'"),
                      ("Requested time limit is invalid (missing or exceeds some limit)", "slurm_time='1'"),
                      ("Requested reservation is invalid", "slurm_reservation='maint'")):
        assert var in (refused_setting(f"salloc: error: Job submit/allocate failed: {said}", req) or ""), said
    assert refused_setting("salloc: error: Unable to allocate resources: Requested node configuration is not "
                           "available", req) is None


#: ``scontrol show job -o 1`` on the test cluster (Slurm 22.05) 0.01 s after slurmctld ended job 1 at
#: its time limit (slurm_time=1), when the next ``srun --jobid 1`` said "Slurm job 1 has expired"
COMPLETING_AT_TIME_LIMIT = (
    "JobId=1 JobName=no-shell UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
    "Account=(null) QOS=(null) JobState=COMPLETING Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:01:00 TimeLimit=00:01:00 TimeMin=N/A "
    "SubmitTime=2026-12-06T01:37:46 EligibleTime=2026-12-06T01:37:46 AccrueTime=Unknown "
    "StartTime=2026-12-06T01:37:46 EndTime=2026-12-06T01:38:46 Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "Partition=gpu NodeList=n1 BatchHost=n1 NumNodes=1 NumCPUs=1 Command=(null) WorkDir=/work\n")


class _Scontrol:
    """Our Slurm client seam answering ``scontrol show job -o`` with a recorded record."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    async def call(self, argv, **_):
        from types import SimpleNamespace
        assert argv[:4] == ["scontrol", "show", "job", "-o"]
        return SimpleNamespace(rc=0, stdout_text=self.stdout)


@pytest.mark.parametrize("refused", [
    "srun: error: Slurm job 1 has expired",
    "srun: error: Unable to create step for job 1: Job/step already completing or completed"])
def test_a_step_refused_after_the_time_limit_names_the_time_limit_from_a_completing_job(refused):
    """New-user trial: the build step ended, the next step was refused, and the line said "slurmctld
    no longer knows why" while scontrol showed the job COMPLETING with Reason=TimeLimit."""
    import asyncio

    from fleetctl.connection.slurm_end import StepEnd, describe_end, learn_end
    end, limit = asyncio.run(learn_end(_Scontrol(COMPLETING_AT_TIME_LIMIT), StepEnd("ended", refused), job_id="1"))
    assert end.kind == "time limit" and end.before_step and limit == "00:01:00"
    line = describe_end(end, job_id="1", node="n1", slurm_time="1", time_limit=limit)
    assert line.startswith("Slurm job 1 reached its time limit (TimeLimit 00:01:00, slurm_time=1) before this "
                           "command could start on n1"), line
    assert refused in line and "JobState=COMPLETING Reason=TimeLimit" in line and "no longer knows" not in line


def test_a_running_job_past_its_time_limit_has_reached_it_and_one_within_it_has_not():
    from fleetctl.connection.slurm_end import duration_s, end_from_job_state
    past = end_from_job_state({"JobState": "RUNNING", "Reason": "None", "RunTime": "00:01:03",
                               "TimeLimit": "00:01:00"})
    assert past is not None and past.kind == "time limit"
    assert end_from_job_state({"JobState": "RUNNING", "Reason": "None", "RunTime": "00:00:59",
                               "TimeLimit": "00:01:00"}) is None
    assert end_from_job_state({"JobState": "RUNNING", "RunTime": "5-00:00:00", "TimeLimit": "UNLIMITED"}) is None
    node = end_from_job_state({"JobState": "COMPLETING", "Reason": "NodeDown", "RunTime": "00:00:09",
                               "TimeLimit": "UNLIMITED"})
    assert node is not None and node.kind == "node failure"
    assert duration_s("1-02:03:04") == 93784 and duration_s("05:06") == 306 and duration_s("Partition_Limit") is None


# n1 and n2 in one job, n2 set down mid-step, on the test cluster (Slurm 22.05): without --no-kill
# the job ends and n1's step is cancelled "DUE TO NODE FAILURE" on n1; with it the job runs on n1.
JOB16 = ("JobId=16 JobName=fleetctl-r1 UserId=root(0) GroupId=root(0) JobState={state} Reason={reason} "
         "Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:00:04 TimeLimit=UNLIMITED "
         "Partition=gpu ReqNodeList=n[1-2] ExcNodeList=(null) NodeList=n1 BatchHost=n1 NumNodes=1 "
         "TresPerNode=gres:gpu:h200:1\n")
N1_CANCELLED = (STEPD.format(what="STEP 16.0", why=" DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS")
                + "srun: Job step aborted: Waiting up to 4 seconds for job step to finish.\n"
                  "srun: error: n1: task 0: Terminated\n")


def test_a_node_failure_names_the_node_that_failed_never_the_healthy_one():
    """Operator trial: n2 failed and n1, sharing its job, was told "Slurm node n1 failed"."""
    import asyncio

    from fleetctl.connection.slurm_end import learn_end
    end = read_step_end(N1_CANCELLED.encode())
    assert end is not None and end.kind == "node failure" and end.failed == ()  # the line names n1: no failure
    job_ended = _Scontrol(JOB16.format(state="COMPLETING", reason="NodeDown"))
    learnt, _ = asyncio.run(learn_end(job_ended, end, job_id="16", nodes=("n1", "n2")))
    assert learnt.failed == ("n2",) and learnt.whole_job
    line = describe_end(learnt, job_id="16", node="n1", slurm_time=None, time_limit=None)
    assert line.startswith("Slurm node n2 failed while this command ran on n1, and Slurm ended job 16 with it "
                           "(n1 itself did not fail"), line
    assert "Slurm node n1 failed" not in line and "scontrol show node n2" in line
    n2 = read_step_end(b"srun: error: Node failure on n2\n")
    assert n2 is not None and n2.failed == ("n2",)
    runs_on = _Scontrol(JOB16.format(state="RUNNING", reason="None"))  # --no-kill: the job goes on without n2
    learnt, _ = asyncio.run(learn_end(runs_on, n2, job_id="16", nodes=("n1", "n2")))
    assert learnt.failed == ("n2",) and not learnt.whole_job
    line = describe_end(learnt, job_id="16", node="n2", slurm_time=None, time_limit=None)
    assert line.startswith("Slurm node n2 failed while this command ran, and Slurm took it out of job 16 (the "
                           "job's other nodes go on)"), line


def test_a_failed_node_ends_only_its_own_hosts_commands():
    import asyncio
    from types import SimpleNamespace

    from fleetctl.connection.slurm_end import SUSPECTED, SlurmJobEnded, learn_and_raise, raise_if_ended
    alloc = SimpleNamespace(job_id="16", nodes=("n1", "n2"), request=SimpleNamespace(time=None), ended=None,
                            lost={})
    runs_on = _Scontrol(JOB16.format(state="RUNNING", reason="None"))
    with pytest.raises(SlurmJobEnded, match="Slurm node n2 failed while this command ran, and Slurm took it"):
        asyncio.run(learn_and_raise(alloc, runs_on, read_step_end(b"srun: error: Node failure on n2\n"), "b", "n2"))
    assert alloc.ended is None and set(alloc.lost) == {"n2"}
    raise_if_ended(alloc, "a", "n1")  # n1's next command runs
    with pytest.raises(SlurmJobEnded, match="Slurm node n2 failed"):
        raise_if_ended(alloc, "b", "n2")  # n2's next one fails at once, naming its node
    asyncio.run(learn_and_raise(alloc, runs_on, SUSPECTED, "a", "n1"))  # n1's own transfer error stands
    # a step refused on a node the job no longer holds (nothing learnt yet) is that node's failure
    fresh = SimpleNamespace(**{**vars(alloc), "lost": {}})
    with pytest.raises(SlurmJobEnded, match="Slurm node n2 failed"):
        asyncio.run(learn_and_raise(fresh, runs_on, SUSPECTED, "b", "n2"))
