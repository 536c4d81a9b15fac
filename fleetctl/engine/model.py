"""The typed run model: what a run is, what happened on each host and in each task, and its events.

The engine fills it in; observers (:mod:`fleetctl.engine.observer`) read it: the run record writes
it as ``run.json`` (schema: ``docs/schema/run.schema.json``, generated from these models), the
terminal renders it, the report and the metrics summarise it. Times are ISO 8601 UTC strings;
durations are seconds.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ..util.redact import Redactor

#: Bumped when a field changes meaning or goes away (adding an optional field keeps the version).
SCHEMA_VERSION = 1

RunKind = Literal["deploy", "verify", "facts", "run", "schedule", "rollback", "copy", "fetch"]
RunMode = Literal["apply", "dry-run", "plan"]
HostStatus = Literal["running", "ok", "failed", "unreachable", "not started", "interrupted"]


def utc_now() -> str:
    """The current UTC time, ISO 8601 with microseconds and ``+00:00``."""
    return dt.datetime.now(dt.timezone.utc).isoformat()


def new_run_id() -> str:
    """A sortable, collision-free run id: UTC time to the millisecond plus 6 random hex digits
    (``20261129T153000.123Z-1a2b3c``)."""
    now = dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.") + f"{now.microsecond // 1000:03d}Z-" + secrets.token_hex(3)


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=False)


class PhaseSpan(_Model):
    """One bar of a host's timeline: a phase (``connect``, ``facts``, ``upload``, ``build``,
    ``install``, ``verify``, ``command``), when it started (seconds after the run started), how long
    it took (seconds), and how it ended (a task status)."""

    phase: str
    start_s: float
    duration_s: float
    status: str


class TaskOutcome(_Model):
    """A task's outcome on one host.

    Attributes:
        name: the task's name as rendered for the host.
        action: the action (``build_wheel``...), or ``facts`` for fact gathering.
        phase: the action's phase.
        status: ``ok``, ``changed``, ``failed``, ``skipped`` or ``unreachable``.
        rc: the decisive command's exit status, if any.
        msg: one line (for a failure, its cause).
        start: when the task started (ISO 8601 UTC).
        duration_s: seconds.
        data: action-specific results (``wheel``, ``sha256``, ``archs``, ``decision``...).
        planned: in a dry run, the steps the task would take (argv, env, uploads).
        selected: ``False`` when ``--tags``/``--skip-tags`` left the task out (it was planned,
            not applied, so that what it registers is known).
    """

    name: str
    action: str
    phase: str = "command"
    status: str
    rc: int | None = None
    msg: str = ""
    start: str = Field(default_factory=utc_now)
    duration_s: float = 0.0
    data: dict[str, Any] = Field(default_factory=dict)
    planned: list[dict[str, Any]] = Field(default_factory=list)
    selected: bool = True


class HostOutcome(_Model):
    """What happened on one host.

    Attributes:
        status: ``running``, ``ok``, ``failed``, ``unreachable``, ``not started`` (a batch before
            exceeded ``max_fail_percentage``) or ``interrupted``.
        error: for a failure, one line: the failing task and its cause.
        started: ISO 8601 UTC; ``None`` for a host that never started.
        duration_s: seconds from start to end.
        tasks: the tasks in the order they ran.
        phases: the host's timeline.
        facts: the gathered facts (deploy, verify, facts).
        reachable: ``False`` when the host could not be reached (facts runs).
        rc, signal: the exit status / signal of ``fleetctl run``'s command.
        stdout_tail, stderr_tail: the end of ``fleetctl run``'s output kept in memory (the log
            holds every byte); ``output_truncated`` says the whole did not fit.
        connection: what reaching the host took (handshake retries, jump hosts, keys recorded); for
            SSH, its counters as the host ended: ``execs`` (commands started), ``puts``, ``put_bytes``.
        output_truncated: ``fleetctl run``: how much of each stream was left out of memory (the
            log holds every byte).
        environment: the host's Python environment when the play stages or switches it
            (``venv_stage``, ``venv_switch``; see docs/staged.md): ``state`` (``live``: switched or
            already live; ``staged``; ``not switched``: a stage failed, with ``failed_stage``,
            ``failed_task``, ``failed_msg``), ``live`` (``version``, ``path``, ``live_since``,
            ``torch``, ``torch_cuda``, ``kernels``: dist -> ``{version, files_sha256,
            wheel_sha256}``), ``staged``, ``previous``, ``removed``, ``disk``.
        files: ``fleetctl copy``/``fetch``: each file moved, ``{src, dest, bytes}``.
        bytes: ``fleetctl copy``/``fetch``: bytes moved in all.
    """

    status: HostStatus = "running"
    error: str | None = None
    started: str | None = None
    duration_s: float = 0.0
    tasks: list[TaskOutcome] = Field(default_factory=list)
    phases: list[PhaseSpan] = Field(default_factory=list)
    facts: dict[str, Any] | None = None
    reachable: bool | None = None
    rc: int | None = None
    signal: str | None = None
    connection: dict[str, Any] | None = None
    output_truncated: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    files: list[dict[str, Any]] | None = None
    bytes: int | None = None


class RunModel(_Model):
    """One run of fleetctl.

    Attributes:
        schema_version: :data:`SCHEMA_VERSION`.
        run_id: ``20261129T153000.123Z-1a2b3c``.
        kind: ``deploy``, ``verify``, ``facts``, ``run``, ``rollback``, ``copy``, ``fetch``.
        mode: ``apply`` (a real run), ``dry-run`` or ``plan``.
        command: the command line as typed (argv, secrets redacted).
        user, controller: who ran it, on which machine.
        controller_pid, controller_start: the controller's process id and its start time (Linux
            clock ticks since boot, ``/proc/PID/stat``; None elsewhere): a record still ``running``
            whose process is gone from this machine was killed (SIGKILL, a crash) and is shown as
            ``interrupted (controller gone)`` (:func:`fleetctl.reporting.history.shown_status`).
        playbook, playbook_sha256: the playbook file and the SHA-256 of its bytes.
        pattern: the host pattern.
        argv: ``fleetctl run``'s command.
        started, finished: ISO 8601 UTC.
        status: ``running``, ``ok``, ``failed``, ``interrupted`` or ``refused``.
        hosts: host name -> :class:`HostOutcome`, in inventory order.
        batches: the rolling batches (``--serial``), host names.
        stopped: why later batches did not start, if they did not.
        failed_hosts: hosts that failed, were unreachable or did not start.
        inventory: the inventory's path and the selected hosts' vars (secrets redacted).
        tasks: the play's task names.
    """

    schema_version: int = SCHEMA_VERSION
    run_id: str = Field(default_factory=new_run_id)
    kind: str = "deploy"
    mode: RunMode = "apply"
    command: list[str] = Field(default_factory=list)
    user: str = ""
    controller: str = ""
    controller_pid: int | None = None
    controller_start: int | None = None
    playbook: str | None = None
    playbook_sha256: str | None = None
    pattern: str | None = None
    argv: list[str] | None = None
    started: str = Field(default_factory=utc_now)
    finished: str | None = None
    status: str = "running"
    hosts: dict[str, HostOutcome] = Field(default_factory=dict)
    batches: list[list[str]] = Field(default_factory=list)
    stopped: str | None = None
    failed_hosts: list[str] = Field(default_factory=list)
    inventory: dict[str, Any] = Field(default_factory=dict)
    tasks: list[str] = Field(default_factory=list)

    #: Secrets found so far (see :mod:`fleetctl.util.redact`); every observer redacts through it.
    _redactor: Redactor = PrivateAttr(default_factory=Redactor)
    _t0: float = PrivateAttr(default_factory=time.monotonic)

    @property
    def redactor(self) -> Redactor:
        return self._redactor

    def elapsed_s(self) -> float:
        """Seconds since the run started (monotonic clock)."""
        return time.monotonic() - self._t0

    def host(self, name: str) -> HostOutcome:
        """The host's outcome, created on first use."""
        out = self.hosts.get(name)
        if out is None:
            out = self.hosts[name] = HostOutcome()
        return out

    def as_json(self) -> dict[str, Any]:
        """The run as ``run.json`` holds it (None fields of hosts left out), secrets redacted."""
        doc = self.head_json()
        doc["hosts"] = {name: self.host_json(name) for name in self.hosts}
        return doc

    def head_json(self) -> dict[str, Any]:
        """:meth:`as_json` without the hosts (``hosts`` is ``{}``), secrets redacted."""
        doc = self.model_dump(mode="json", exclude_none=False, exclude={"hosts"})
        doc = {k: doc[k] if k != "hosts" else {} for k in type(self).model_fields if k in doc or k == "hosts"}
        return self.redactor.obj(doc)

    def host_json(self, name: str, *, facts: bool = True) -> dict[str, Any]:
        """One host of :meth:`as_json`, secrets redacted; without its ``facts`` when not ``facts``
        (what a summary needs of 10,000 hosts, without their facts' megabytes)."""
        host = self.hosts[name].model_dump(mode="json", exclude_none=False, exclude=None if facts else {"facts"})
        return self.redactor.obj({k: v for k, v in host.items() if v is not None and v != [] or k == "tasks"})


class Event(BaseModel):
    """One line of ``events.jsonl``: ``name`` is ``noun.verb_past`` (``task.finished``), ``host``
    the host it is about (``None`` for run-level events), ``data`` its fields (JSON-able).

    The schema of each event name's fields is in ``docs/schema/events.md``.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    host: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
