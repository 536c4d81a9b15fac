"""How Slurm says it ended a job step (or the whole job) under a command, and the one line for it.

Slurm 22.05 tells it in three places, as seen on the test cluster (tests/support/slurm.py):

- slurmstepd writes to the step's stderr (slurmstepd ``req.c``), for this step or the job::

      slurmstepd-n1: error: *** STEP 12.3 ON n1 CANCELLED AT 2026-12-01T22:50:19 DUE TO TIME LIMIT ***
      slurmstepd-n1: error: *** STEP 1.0 ON n1 CANCELLED AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
      slurmstepd-n1: error: *** JOB 7 ON n1 CANCELLED AT ... DUE TO PREEMPTION ***
      slurmstepd-n1: error: *** STEP 7.2 ON n1 CANCELLED AT ... ***          (scancel)

  and, for a step the cgroup's OOM killer hit, ``Detected 1 oom-kill event(s) in StepId=12.3``
  (task/cgroup; older releases: ``Detected 1 oom_kill event``);
- srun's own lines: ``srun: error: n1: task 0: Terminated`` (exit 143 after a time limit),
  ``srun: error: Node failure on n1`` (srun then exits **0**: the end is only in these lines),
  ``srun: error: n1: task 0: Out Of Memory``; a later step of the ended job gets
  ``srun: error: Slurm job 12 has expired``;
- ``scontrol show job -o J``: ``JobState=TIMEOUT Reason=TimeLimit ... TimeLimit=00:01:00``,
  ``NODE_FAIL``/``NodeDown``, ``PREEMPTED``, ``OUT_OF_MEMORY``, ``CANCELLED``, and ``JobState=COMPLETING Reason=TimeLimit`` while an ended job's steps are cleaned up
  (for ``MinJobAge``
  seconds after the end; ``sacct`` needs accounting storage, which many sites and the test
  cluster lack).

A time limit, a preemption or a cancel ends the allocation: the host *fails* with the cause (it
was reachable; Slurm took it away), never "unreachable". A node failure ends only that node's part
of it: allocations are made with ``salloc --no-kill`` (salloc(1): "Do not automatically terminate a
job if one of the nodes it has been allocated fails ... the job allocation will not be revoked so
the user may launch new job steps on the remaining nodes"). Seen on the test cluster (n1, n2 in one
job, n2 set down mid-step): n2's step ends with ``srun: error: Node failure on n2`` (srun exit 0),
n1's step runs to its end, the job stays ``JobState=RUNNING`` with ``NodeList=n1`` and a new step
on n1 starts (one on n2 is refused: "Requested node configuration is not available"). So the
failed node's host fails naming its node, and the others go on. Without ``--no-kill`` Slurm ends
the whole job: n1's step gets ``*** STEP 1.0 ON n1 CANCELLED ... DUE TO NODE FAILURE ***`` although
n1 is well; the failed node is then the one the job's ``NodeList`` no longer holds, and it is the
one named (never the healthy node the line came from). A step killed for memory is the command's
result (signal KILL, so the build's own out-of-memory handling applies: retried once with half the
jobs), with Slurm's line kept in its stderr.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import FleetError
from .slurm_nodes import expand_hostlist

#: slurmstepd's own lines only (``slurmstepd-n1: error: ...`` at a line start), so a command that
#: prints such text itself is not taken for Slurm
_STEPD = r"^slurmstepd(?:-\S+)?: error: "
_CANCELLED = re.compile(_STEPD + r"\*\*\* (?P<what>STEP|JOB) (?P<id>[\w.+]+) ON (?P<node>\S+) CANCELLED AT "
                        r"(?P<at>\S+)(?: DUE TO (?P<why>[^*\n]+?))? \*\*\*", re.M)
_OOM = re.compile(_STEPD + r".*?Detected (?P<n>\d+) oom[-_]kill event", re.M)
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (?P<node>\S+)", re.M)
_EXPIRED = re.compile(r"Slurm job (?P<id>\d+) has expired|Job/step already completing or completed|"
                      r"Invalid job id specified")

#: scontrol's JobState of an ended job -> the kind of end.
JOB_STATES = {"TIMEOUT": "time limit", "PREEMPTED": "preemption", "NODE_FAIL": "node failure",
              "OUT_OF_MEMORY": "out of memory", "CANCELLED": "cancelled", "DEADLINE": "deadline",
              "BOOT_FAIL": "node failure", "FAILED": "failed", "COMPLETED": "completed"}


@dataclass(frozen=True)
class StepEnd:
    """How Slurm ended a step: ``kind`` (``time limit``, ``preemption``, ``node failure``,
    ``cancelled``, ``out of memory``...), ``line`` (Slurm's own words), ``whole_job`` (the
    allocation is gone, not only this step), ``before_step`` (the job was over before the command's
    step could start), ``failed`` (for a node failure: the nodes that failed, when known; the node
    a step ran on is not one of them when another node's failure ended it)."""

    kind: str
    line: str
    whole_job: bool = True
    #: Slurm ended it before the command started (srun refused the step), not under it
    before_step: bool = False
    failed: tuple[str, ...] = ()


def read_step_end(stderr: bytes) -> StepEnd | None:
    """Slurm's end of a step from the step's stderr, or ``None`` when Slurm ended nothing."""
    text = stderr.decode("utf-8", "replace")
    m = _CANCELLED.search(text)
    if m:
        why = (m.group("why") or "").upper()
        kind = ("time limit" if "TIME LIMIT" in why else "preemption" if "PREEMPT" in why else
                "node failure" if "NODE FAIL" in why else "cancelled" if not why else why.lower())
        # the node in slurmstepd's line is where the step was cancelled, not the one that failed
        failed = tuple(n.group("node") for n in _NODE_FAILURE.finditer(text)) if kind == "node failure" else ()
        return StepEnd(kind, m.group(0), failed=failed)
    failed = tuple(n.group("node") for n in _NODE_FAILURE.finditer(text))
    if failed:
        return StepEnd("node failure", _NODE_FAILURE.search(text).group(0), failed=failed)  # type: ignore[union-attr]
    m = _OOM.search(text)
    if m:
        return StepEnd("out of memory", text[m.start():].split("\n", 1)[0].strip(), whole_job=False)
    return None


def job_expired(srun_stderr: str) -> bool:
    """srun refused a step because its job has ended (``Slurm job J has expired``)."""
    return bool(_EXPIRED.search(srun_stderr))


def parse_job_record(line: str) -> dict[str, str]:
    """``scontrol show job -o`` output -> ``{key: value}`` (values without spaces; the last
    keys, such as ``Command``, may be cut)."""
    out: dict[str, str] = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq and key not in out:
            out[key] = value
    return out


_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def duration_s(text: str | None) -> int | None:
    """Seconds of a duration as ``scontrol show job`` prints ``RunTime`` and ``TimeLimit``
    (``[days-]hours:minutes:seconds``, ``minutes:seconds``); ``None`` for ``UNLIMITED``,
    ``Partition_Limit``, ``NONE`` or anything else."""
    m = _DURATION.match((text or "").strip())
    if not m:
        return None
    d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + sec


#: scontrol's ``Reason`` of a job that is ending (``JobState=COMPLETING``, or still ``RUNNING``)
#: -> the kind of end.
JOB_REASONS = {"TimeLimit": "time limit", "NodeDown": "node failure", "Preempted": "preemption",
               "OutOfMemory": "out of memory", "DeadLine": "deadline"}


def end_from_job_state(record: dict[str, str]) -> StepEnd | None:
    """The end an ended (or ending) job's ``scontrol show job`` record names; ``None`` while it
    runs within its limit, or when unknown.

    Seen on the test cluster (Slurm 22.05, KillWait=2): right after slurmctld ends a job at its
    time limit it is ``JobState=COMPLETING Reason=TimeLimit RunTime=00:01:00 TimeLimit=00:01:00``
    until its steps are cleaned up, and a step asked for meanwhile is refused ("Slurm job 1 has
    expired", "Job/step already completing or completed"): the ``Reason`` says why. A job still
    ``RUNNING`` whose ``RunTime`` has reached its ``TimeLimit`` has reached it too (slurmctld
    refuses new steps from its ``EndTime`` on and ends the job at its next time-limit pass).
    """
    state = record.get("JobState", "")
    kind = JOB_STATES.get(state)
    if kind is not None:
        return StepEnd(kind, f"JobState={state} Reason={record.get('Reason', '?')}")
    if state not in ("COMPLETING", "RUNNING"):
        return None
    reason = record.get("Reason", "")
    run_s, limit_s = duration_s(record.get("RunTime")), duration_s(record.get("TimeLimit"))
    kind = JOB_REASONS.get(reason)
    if kind is None and run_s is not None and limit_s and run_s >= limit_s:
        kind = "time limit"
    if kind is None:
        return None
    return StepEnd(kind, f"JobState={state} Reason={reason or '?'} RunTime={record.get('RunTime', '?')} "
                         f"TimeLimit={record.get('TimeLimit', '?')}")


class SlurmJobEnded(FleetError):
    """Slurm ended the job (or the step) a command ran in: a time limit, a preemption, a node
    failure, a cancel. The host *failed* (not unreachable); ``str`` is the one line."""

    def __init__(self, host: str, message: str, end: StepEnd) -> None:
        self.host = host
        self.end = end
        super().__init__(message)


def describe_end(end: StepEnd, *, job_id: str, node: str, slurm_time: str | None,
                 time_limit: str | None) -> str:
    """The one line for an ended job.

    Args:
        job_id, node: the job and the node the command ran on.
        slurm_time: the host var ``slurm_time`` (``None``: not set, Slurm's default limit).
        time_limit: the job's ``TimeLimit`` as scontrol shows it (``00:01:00``), when known.
    """
    said = f"Slurm said: {end.line}"
    if end.kind == "time limit":
        limit = f"TimeLimit {time_limit}" if time_limit else "its time limit"
        origin = f"slurm_time={slurm_time}" if slurm_time else "slurm_time unset: the partition's default"
        when = (f"before this command could start on {node} (the previous one ran past it), and Slurm refused "
                f"new steps" if end.before_step else f"while this command ran on {node}, and Slurm cancelled it")
        return (f"Slurm job {job_id} reached its time limit ({limit}, {origin}) {when} ({said}): set the host var "
                f"slurm_time above what the run takes (fleetctl deploy --plan warns when it is shorter than the "
                f"last build took)")
    if end.kind == "preemption":
        return (f"Slurm preempted job {job_id} on {node} while this command ran (a job of a higher-priority "
                f"partition or QOS took the node; {said}): run again, or use a partition or QOS that is not "
                f"preempted (slurm_partition, slurm_qos)")
    if end.kind == "node failure":
        failed = ",".join(end.failed) if end.failed and node not in end.failed else node
        fix = (f"see `scontrol show node {failed}` and slurmctld's log; run again once the node is back, or "
               f"without it")
        if failed != node:  # a healthy node's step ended with another node: name the one that failed
            what = f"job {job_id}" if end.whole_job else "this command's step"
            return (f"Slurm node {failed} failed while this command ran on {node}, and Slurm ended {what} with "
                    f"it ({node} itself did not fail; {said}): {fix}")
        how = (f"job {job_id} ended with it" if end.whole_job else
               f"Slurm took it out of job {job_id} (the job's other nodes go on)")
        return f"Slurm node {node} failed while this command ran, and {how} ({said}): {fix}"
    if end.kind == "cancelled":
        return (f"Slurm job {job_id} was cancelled while this command ran on {node} (scancel by someone, or an "
                f"administrator; {said})")
    if end.kind == "out of memory":
        return (f"Slurm killed job {job_id}'s step on {node} for memory (the job's cgroup memory limit; {said}): "
                f"ask for more memory (--mem) or build with fewer jobs")
    if end.kind == "ended":  # slurmctld no longer knows it (MinJobAge passed): its state is gone
        return (f"Slurm job {job_id} has ended under this host's commands on {node} ({said}; slurmctld no longer "
                f"knows why: its time limit (slurm_time={slurm_time or 'unset'}), a preemption, a node failure or "
                f"a scancel; see sacct -j {job_id} where accounting is kept)")
    return f"Slurm job {job_id} ended ({end.kind}, JobState) while this command ran on {node} ({said})"


async def learn_end(client, end: StepEnd, *, job_id: str,
                    nodes: tuple[str, ...] = ()) -> tuple[StepEnd, str | None]:
    """``(end, TimeLimit)`` after asking ``scontrol show job -o`` (one call, only once the job
    ended) for the job's state and ``TimeLimit``: an end the step's stderr does not name (a later
    step of an expired job) is read from ``JobState``.

    A node failure (or a suspected end while the job still runs) is read against the job's
    ``NodeList``: the nodes of ``nodes`` it no longer holds are the ones that failed (``failed``),
    and the end is the whole job's only when the job no longer runs (see the module docstring:
    ``--no-kill`` keeps it running on its other nodes).

    ``client``: a :class:`~fleetctl.connection.slurm_client.SlurmClient`; ``nodes``: the
    allocation's nodes. Never raises.
    """
    record: dict[str, str] = {}
    try:
        res = await client.call(["scontrol", "show", "job", "-o", job_id], timeout_s=30, check=False)
        if res.rc == 0:
            record = parse_job_record(res.stdout_text)
    except Exception:  # noqa: BLE001 - Slurm unreachable now: the step's own words stand
        record = {}
    if end.kind in ("ended", "suspected"):  # the step did not say: the job's state does
        learnt = end_from_job_state(record)
        if learnt is not None and end.kind == "ended":  # srun refused the step: the job ended before it
            learnt = StepEnd(learnt.kind, f"{end.line}; scontrol: {learnt.line}", learnt.whole_job, before_step=True)
        end = learnt or end
    state = record.get("JobState", "")
    lost = tuple(n for n in nodes if n not in expand_hostlist(record.get("NodeList", ""))) if state else ()
    if end.kind == "suspected" and state == "RUNNING" and lost:  # a node left the job (node failure)
        end = StepEnd("node failure", f"scontrol: JobState=RUNNING NodeList={record.get('NodeList')}",
                      whole_job=False, failed=lost)
    elif end.kind == "node failure" and state:
        end = StepEnd(end.kind, end.line, whole_job=state != "RUNNING", before_step=end.before_step,
                      failed=end.failed or lost)
    return end, record.get("TimeLimit")


#: A transfer failed: maybe because Slurm ended the job (``scontrol`` says).
SUSPECTED = StepEnd("suspected", "a transfer failed")


def raise_if_ended(alloc, host: str, node: str) -> None:
    """Raise :class:`SlurmJobEnded` for ``host`` on ``node`` when Slurm already ended the job of
    ``alloc`` (a :class:`~fleetctl.connection.slurm_alloc.Allocation`, or ``None``), or took
    ``node`` out of it (its node failed: ``alloc.lost``)."""
    if alloc is None:
        return
    ended = alloc.ended if alloc.ended is not None else alloc.lost.get(node)
    if ended is not None:
        end, time_limit = ended
        raise SlurmJobEnded(host, describe_end(end, job_id=alloc.job_id, node=node, slurm_time=alloc.request.time,
                                               time_limit=time_limit), end)


async def learn_and_raise(alloc, client, end: StepEnd, host: str, node: str) -> None:
    """Slurm ended (or, for :data:`SUSPECTED`, may have ended) the job of ``alloc``, or ``node``'s
    part of it: learn how (:func:`learn_end`, once per job, or per failed node) and raise
    :class:`SlurmJobEnded`. A whole job's end is every host's from then on; a failed node's
    only its own hosts' (``alloc.lost``). A step on a healthy node that another node's failure
    ended raises naming that node (nothing is recorded for the healthy node). Returns when only
    suspected and neither the job nor ``node`` is gone (or the job is gone without a trace)."""
    if alloc is None:
        return
    if alloc.ended is None and node not in alloc.lost:
        learnt, time_limit = await learn_end(client, end, job_id=alloc.job_id, nodes=alloc.nodes)
        if learnt.kind == "suspected":
            return
        if learnt.kind == "node failure" and not learnt.whole_job:
            for failed in learnt.failed:
                alloc.lost[failed] = (learnt, time_limit)
            if node not in learnt.failed:
                if end.kind == "suspected":  # a transfer of a healthy node failed: its own error stands
                    return
                raise SlurmJobEnded(host, describe_end(learnt, job_id=alloc.job_id, node=node,
                                                       slurm_time=alloc.request.time, time_limit=time_limit), learnt)
        else:
            alloc.ended = (learnt, time_limit)
    raise_if_ended(alloc, host, node)
