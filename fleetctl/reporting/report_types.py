"""The view data of the HTML report (what :mod:`.report_model` makes and :mod:`.html` renders).

Seconds for every ``*_s``; ``*_pct`` are percent of the timeline's axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

@dataclass
class Bar:
    """One phase bar: seconds after the run started, and its place on the axis in percent."""

    phase: str
    start_s: float
    duration_s: float
    status: str
    x_pct: float = 0.0
    w_pct: float = 0.0


@dataclass
class HostRow:
    name: str
    status: str
    error: str | None
    duration_s: float
    bars: list[Bar]
    phases: dict[str, tuple[float, str]]  # phase -> (seconds, worst status)
    rc: int | None = None
    cause_id: int | None = None
    class_id: int | None = None
    role: str | None = None
    built_on: str | None = None
    wheel_sha256: str | None = None
    tail_id: int | None = None
    log_rel: str = ""
    log_size_bytes: int = 0
    changed: bool = False
    environment: str | None = None  # the Python environment it runs (staged environments)


@dataclass
class Cause:
    id: int
    status: str
    text: str
    hosts: list[str]
    folded: str
    first_error: str | None
    example_host: str
    example_tail: list[str]


@dataclass
class ArchClass:
    id: int
    key: str
    archs: str
    sass: str
    hosts: list[str]
    folded: str
    built_on: list[str]
    pushed: str
    reused: str
    failed: str
    wheel: str
    sha256: str


@dataclass
class Tail:
    """A log tail shared by ``hosts`` (identical once each host's own name is taken out; for hosts
    that succeeded, also once numbers are: ``numbers_differ`` says the shown one is the first
    host's and the others' numbers (times, sizes) differ)."""

    id: int
    hosts: list[str]
    folded: str
    lines: list[str]
    cut: bool
    numbers_differ: bool = False


@dataclass
class Folded:
    text: str
    hosts: list[str]
    folded: str


@dataclass
class PhaseStat:
    phase: str
    hosts: int
    min_s: float
    median_s: float
    p95_s: float
    max_s: float


@dataclass
class Report:
    run_id: str
    kind: str
    mode: str
    status: str
    exit_status: int | None
    exit_meaning: str
    command: str
    playbook: str | None
    playbook_sha256: str | None
    pattern: str | None
    user: str
    controller: str
    started: str
    finished: str | None
    duration_s: float | None
    record_dir: str
    stopped: str | None
    host_counts: list[tuple[str, int]]
    task_counts: list[tuple[str, int]]
    hosts: list[HostRow]
    causes: list[Cause]
    classes: list[ArchClass]
    tails: list[Tail]
    notes: list[Folded]
    events: list[Folded]
    phases: list[str]
    phase_stats: list[PhaseStat]
    timeline: list[HostRow]
    timeline_note: str
    axis_s: float
    ticks: list[tuple[float, str]]
    anchors: dict[str, str] = field(default_factory=dict)  # host -> its row's element id
    fleetctl_version: str = ""
