"""The typed run model: what a run is, what happened on each host and in each task, and its events.

The engine fills it in; observers (:mod:`fleetctl.engine.observer`) read it: the run record writes
it as ``run.json`` (schema: ``docs/schema/run.schema.json``, generated from these models), the
terminal renders it, the report and the metrics summarise it. Times are ISO 8601 UTC strings;
durations are seconds.

The models are standard-library dataclasses (the engine, the only writer, builds them with the
right types), turned into JSON by plain code (:func:`jsonable`). pydantic validates them where
input comes from outside (``model_validate`` of a ``run.json`` read back) and writes their JSON
Schema (``model_json_schema``), imported only then: its import and first model cost ``fleetctl
run`` about 0.1 CPU-s of a 0.5 CPU-s start-up (bench/README.md, issue 27).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

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


def jsonable(value: Any) -> Any:
    """``value`` as JSON-able data, as pydantic's ``model_dump(mode="json")`` writes a field typed
    ``Any``: models as dicts, tuples and lists as lists, non-finite floats as ``None``; types
    other than JSON's own go through pydantic's converter (paths, bytes, dates, sets...)."""
    t = type(value)
    if value is None or t is str or t is int or t is bool:
        return value
    if t is float:
        return value if math.isfinite(value) else None
    if t is dict and all(type(k) is str for k in value):
        return {k: jsonable(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [jsonable(v) for v in value]
    if isinstance(value, _Model):
        return value.model_dump(mode="json")
    from pydantic_core import to_jsonable_python

    return jsonable(to_jsonable_python(value))


class _Model:
    """What the models share: pydantic's API on a dataclass (pydantic imported when called)."""

    #: extra keys of a validated document are kept (as the models' ``extra="allow"`` did)
    __pydantic_config__: ClassVar[dict] = {"extra": "allow"}

    @classmethod
    def _adapter(cls) -> Any:
        adapter = cls.__dict__.get("_pydantic_adapter")
        if adapter is None:
            from pydantic import TypeAdapter

            adapter = TypeAdapter(cls)
            cls._pydantic_adapter = adapter
        return adapter

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        """The model from a document (a ``run.json`` read back), validated by pydantic.

        Raises:
            pydantic.ValidationError: the document does not fit the model.
        """
        return cls._adapter().validate_python(data)

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        """The model's JSON Schema (pydantic's)."""
        return cls._adapter().json_schema()

    @classmethod
    def model_fields(cls) -> list[str]:
        """The field names, in order."""
        return [f.name for f in dataclasses.fields(cls)]

    def model_dump(self, mode: str = "python", exclude_none: bool = False,
                   exclude: set[str] | frozenset[str] | None = None) -> dict[str, Any]:
        """The fields as a dict (``mode="json"``: JSON-able, see :func:`jsonable`), in order, less
        the names in ``exclude`` (None: none, as pydantic's ``model_dump`` takes it)."""
        out = {}
        exclude = exclude or frozenset()
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in exclude:
                continue
            v = getattr(self, f.name)
            if mode == "json":
                v = jsonable(v) if f.type != "float" or type(v) is not float else v
            elif isinstance(v, list):
                v = [x.model_dump() if isinstance(x, _Model) else x for x in v]
            elif isinstance(v, dict):
                v = {k: x.model_dump() if isinstance(x, _Model) else x for k, x in v.items()}
            if v is None and exclude_none:
                continue
            out[f.name] = v
        return out

    def model_copy(self, update: dict[str, Any] | None = None) -> Any:
        """A shallow copy with ``update`` applied."""
        return dataclasses.replace(self, **(update or {}))  # type: ignore[type-var]


@dataclass(kw_only=True)
class PhaseSpan(_Model):
    """One bar of a host's timeline: a phase (``connect``, ``facts``, ``upload``, ``build``,
    ``install``, ``verify``, ``command``), when it started (seconds after the run started), how long
    it took (seconds), and how it ended (a task status)."""

    phase: str
    start_s: float
    duration_s: float
    status: str


@dataclass(kw_only=True)
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
    start: str = field(default_factory=utc_now)
    duration_s: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)
    planned: list[dict[str, Any]] = field(default_factory=list)
    selected: bool = True


@dataclass(kw_only=True)
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
        warnings: warning lines the host's result carries beside its status, which an ``ok``
            does not clear: e.g. a node whose Slurm GRES gives it GPUs that facts did not find, run
            as a host without GPUs because ``verify_device: cpu`` says so; its deploy lock lost
            during the run with no other run holding it (:mod:`fleetctl.engine.lockwatch`). In a
            facts run, the facts' ``warning:`` notes: one a deploy refuses the host for (a venv
            that is not there, no torch, a full venv) makes its status ``failed`` with ``error``
            naming it (:func:`fleetctl.facts.refusals.refused_by_deploy`); the others leave it ``ok``.
        log_cut: the host's log in the run record is incomplete (the record's file system was
            full, :mod:`fleetctl.reporting.recordcut`): what its ``==> log cut here: `` line says
            (the cause, the free space, the lines not kept). Such a host is never ``ok``: its
            status is ``failed`` (``error`` says the log was cut, unless it had failed already).
    """

    status: HostStatus = "running"
    error: str | None = None
    started: str | None = None
    duration_s: float = 0.0
    tasks: list[TaskOutcome] = field(default_factory=list)
    phases: list[PhaseSpan] = field(default_factory=list)
    facts: dict[str, Any] | None = None
    reachable: bool | None = None
    rc: int | None = None
    signal: str | None = None
    connection: dict[str, Any] | None = None
    output_truncated: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    files: list[dict[str, Any]] | None = None
    bytes: int | None = None
    warnings: list[str] | None = None
    log_cut: str | None = None


@dataclass(kw_only=True)
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
        record_cut: the run record could not be written in full (its file system full,
            :mod:`fleetctl.reporting.recordcut`): the command's error line (the cause, the runs
            folder and its free space, the cut host logs). Such a run is never ``ok``.
        interrupted_by: the signal that interrupted the run, ``SIGINT`` (the command exits 130) or
            ``SIGTERM`` (143), set by :func:`fleetctl.cli.runend.run_async`; None for a run no signal
            stopped (and in records written before it was kept).
    """

    schema_version: int = SCHEMA_VERSION
    run_id: str = field(default_factory=new_run_id)
    kind: str = "deploy"
    mode: RunMode = "apply"
    command: list[str] = field(default_factory=list)
    user: str = ""
    controller: str = ""
    controller_pid: int | None = None
    controller_start: int | None = None
    playbook: str | None = None
    playbook_sha256: str | None = None
    pattern: str | None = None
    argv: list[str] | None = None
    started: str = field(default_factory=utc_now)
    finished: str | None = None
    status: str = "running"
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    batches: list[list[str]] = field(default_factory=list)
    stopped: str | None = None
    failed_hosts: list[str] = field(default_factory=list)
    inventory: dict[str, Any] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    record_cut: str | None = None
    interrupted_by: Literal["SIGINT", "SIGTERM"] | None = None

    def __post_init__(self) -> None:
        #: Secrets found so far (see :mod:`fleetctl.util.redact`); every observer redacts through it.
        self._redactor = Redactor()
        self._t0 = time.monotonic()

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
        doc = {k: doc[k] if k != "hosts" else {} for k in type(self).model_fields() if k in doc or k == "hosts"}
        return self.redactor.obj(doc)

    def host_json(self, name: str, *, facts: bool = True) -> dict[str, Any]:
        """One host of :meth:`as_json`, secrets redacted; without its ``facts`` when not ``facts``
        (what a summary needs of 10,000 hosts, without their facts' megabytes)."""
        host = self.hosts[name].model_dump(mode="json", exclude_none=False, exclude=None if facts else {"facts"})
        return self.redactor.obj({k: v for k, v in host.items() if v is not None and v != [] or k == "tasks"})


@dataclass(frozen=True, kw_only=True)
class Event(_Model):
    """One line of ``events.jsonl``: ``name`` is ``noun.verb_past`` (``task.finished``), ``host``
    the host it is about (``None`` for run-level events), ``data`` its fields (JSON-able).

    The schema of each event name's fields is in ``docs/schema/events.md``.
    """

    name: str
    host: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
