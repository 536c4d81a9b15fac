"""The planner contract: what an action declares, what a planner sees, and what it returns.

An action is one module of :mod:`fleetctl.tasks` holding an :class:`Action`: its name, its
arguments model (pydantic, see :mod:`fleetctl.tasks.argtypes`), its phase (for deadlines and the
report's timeline), its default deadline in seconds, and its planner.

A planner is a generator function ``plan(args, host) -> Generator[Step, Any, TaskResult]``. It
reads the arguments and the :class:`HostView` (facts, settings, what earlier tasks left on the
host), yields :mod:`~fleetctl.tasks.steps` (probes, commands, uploads) receiving each outcome, and
returns the :class:`TaskResult`. It never performs I/O, prints or reads the clock: the engine does
all of that, or simulates it in a dry run (see :mod:`fleetctl.tasks.steps`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..connection.base import CommandResult
from ..status import Status
from .steps import Step

#: Phases, in the order a deploy goes through them: the deadline a ``--phase-timeout PHASE=S``
#: sets, and the report's timeline bars. ``connect`` and ``facts`` belong to the engine.
PHASES: tuple[str, ...] = ("connect", "facts", "upload", "build", "install", "verify", "command")


@dataclass
class TaskResult:
    """A task's outcome on one host.

    Attributes:
        status: OK / CHANGED / FAILED / SKIPPED / UNREACHABLE.
        msg: one line for the summary (for a failure: its cause, e.g. the compiler's first error).
        rc: the exit status of the decisive command, if any.
        data: action-specific results (``wheel``, ``archs``...), visible to later tasks via
            ``register``; ``data["decision"]`` is what ``--plan`` shows for the task.
        stdout, stderr: the decisive command's output (``register``), possibly cut (see
            :attr:`CommandResult.truncated`).
        files: remote path -> sha256 (hex) of what the task left there; ``None`` when a file will
            exist but its content is not known yet (a dry run's build). Later tasks' planners see
            them in :attr:`HostView.files` instead of probing.
        stamps: remote wheel path -> the build stamp beside it (``build_wheel``'s: archs, inputs,
            what the build used), also for a wheel not built yet (a dry run's or ``--plan``'s
            build), so that a later task knows what a wheel is built for before it exists
            (``pip_install``'s shared-venv check). Later tasks' planners see them in
            :attr:`HostView.stamps`.
        trees: remote folder -> the tree hash of the files the task put there (see
            :func:`fleetctl.tasks.copy.tree_hash`).
        sources: remote folder -> the controller folder the task copied there, so a later task
            can read the tree's own files (a build's ``pyproject.toml``) before it is uploaded.
        venv: the venv the host's later tasks of this play use instead (``venv_stage``: the
            staged version; ``venv_switch``: the live path again); ``None``: unchanged.
        facts: facts keys replaced for the host's later tasks of this play (``python`` after a
            stage or an upgrade changed the venv); the gathered facts in the record stay as gathered.
        environment: the host's Python environment as this task leaves it (``venv_stage``,
            ``venv_switch``): the run record's per-host ``environment``.
        stand_in: ``(venv, folder)``: ``venv`` does not exist yet while planning (a dry run's
            ``venv_stage``), ``folder`` (the live venv it reproduces file for file) answers for it:
            later tasks' commands name ``venv`` exactly as the deploy runs them, and their read-only
            probes are run with ``venv`` read as ``folder`` (:class:`fleetctl.engine.executor.StepRunner`).
        preflight: a refusal found from the facts alone before the task's first step (e.g.
            :mod:`~fleetctl.tasks.runtime_preflight`), or from facts, read-only probes and what
            earlier tasks planned (``pip_install``: a shared venv's install another host's SM
            needs, see :func:`~fleetctl.tasks.install_target.dropped_by`): it stops the host while
            planning even when an earlier task's command was simulated, so nothing is uploaded or built.
    """

    status: Status
    msg: str = ""
    rc: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    files: dict[str, str | None] = field(default_factory=dict)
    stamps: dict[str, dict[str, Any]] = field(default_factory=dict)
    trees: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    venv: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] | None = None
    stand_in: tuple[str, str] | None = None
    preflight: bool = False

    def as_registered(self) -> dict[str, Any]:
        """The value ``register:`` stores: status, rc, msg, stdout, stderr, data, and the flags
        ``changed``, ``failed``, ``skipped`` (Ansible's names)."""
        return {
            "status": self.status.value, "rc": self.rc, "msg": self.msg, "stdout": self.stdout,
            "stderr": self.stderr, "data": self.data, "changed": self.status is Status.CHANGED,
            "failed": self.status.is_failure, "skipped": self.status is Status.SKIPPED,
        }


@dataclass(frozen=True)
class HostView:
    """What a planner knows about its host. Read-only; the engine builds a new one per task.

    Attributes:
        name: the inventory host name.
        facts: the host's facts (every key: docs/contracts.md, "Facts"; ``build`` holds the build plan).
        venv: the Python environment builds and installs use, or ``None``.
        python: its interpreter (``<venv>/bin/python3``; ``python3`` without a venv).
        cuda_home: the ``cuda_home`` host var, or ``None`` (then facts found the toolkit).
        cuda_home_origin: where ``cuda_home`` was set, as a fix names it (``-e cuda_home``, or
            ``the inventory var 'cuda_home' (inventory.yaml:7)``: :meth:`~fleetctl.inventory.vars.VarSource.origin`),
            or ``None`` when not known.
        build_host: the ``build_host`` host var: the member that builds for its arch class.
        workdir: the host's absolute fleetctl folder.
        run_dir: this run's folder on the host (``<workdir>/runs/<run_id>``).
        playbook_dir: the controller folder relative local paths resolve against.
        project_root: the fleetctl checkout (default scripts live under ``playbooks/scripts``).
        files: remote path -> sha256 known from earlier tasks of this run (``None``: will exist).
        stamps: remote wheel path -> its build stamp, from earlier tasks of this run (a wheel a dry
            run's build would make too; see :attr:`TaskResult.stamps`).
        trees: remote folder -> tree hash of what an earlier ``copy`` put there.
        sources: remote folder -> the controller folder an earlier ``copy`` put there.
        force: ``--force``: rebuild and reinstall even when nothing changed.
        build_each: ``--build each``: every host builds its own wheel.
        env: the task's rendered ``env`` (added to every command the engine runs for it).
        controller_env: for a local connection, the environment this fleetctl itself runs from
            (``sys.prefix`` as given and resolved); empty for any other host. Its venv must never
            be staged or switched: that would move the running controller's own files.
        keep_live: the engine planned this host's whole pass and found that no task between the
            play's ``venv_stage`` and its ``venv_switch`` changes anything: the stage makes no new
            version and the switch keeps the live one (see
            :func:`fleetctl.engine.host.nothing_to_stage`).
    """

    name: str
    facts: Mapping[str, Any]
    venv: str | None
    python: str
    workdir: str
    run_dir: str
    playbook_dir: Path
    project_root: Path
    cuda_home: str | None = None
    cuda_home_origin: str | None = None
    build_host: str | None = None
    verify_device: str = "auto"
    files: Mapping[str, str | None] = field(default_factory=dict)
    stamps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    trees: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    force: bool = False
    build_each: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    keep_live: bool = False
    controller_env: tuple[str, ...] = ()

    def local_path(self, path: str) -> Path:
        """A playbook path on the controller: absolute, or relative to the playbook's folder."""
        return controller_path(self.playbook_dir, path)

    def remote_script(self, name: str) -> str:
        """Where a helper script goes on the host: ``<run_dir>/scripts/<name>``."""
        return posixpath.join(self.run_dir, "scripts", name)

    @property
    def gpu_caps(self) -> list[str]:
        """The compute capabilities of the host's GPUs, sorted and unique (``["9.0"]``)."""
        return sorted({str(g["compute_cap"]) for g in self.facts.get("gpus") or [] if g.get("compute_cap")})


Plan = Generator[Step, Any, TaskResult]
Planner = Callable[[Any, HostView], Plan]


@dataclass(frozen=True)
class Action:
    """One action a playbook task can name.

    Attributes:
        name: the task key (``copy``, ``build_wheel``...).
        args: the arguments model (unknown keys refused with a did-you-mean by the playbook parser).
        phase: one of :data:`PHASES`.
        timeout_s: the default deadline in seconds (a task's ``timeout`` or ``--phase-timeout`` wins).
        plan: the planner.
        runs_commands: the action runs commands on the host, so the task controls ``env`` and
            ``become`` apply to it.
        unapplied_hint: what a task of this action says when its arguments name what a task left
            out by ``--tags``/``--skip-tags`` registers and that task has not made it on the host
            (it would change the host, or fail): one line naming the fix.
        plan_shows: what ``--plan`` shows for a task of this action (Markdown, for the playbook
            reference, ``docs/reference/playbook.md``).
        example: one task of this action in playbook YAML (a list of one task); the reference
            prints it and a test parses it with the real playbook parser.
    """

    name: str
    args: type[BaseModel]
    phase: str
    timeout_s: float
    plan: Planner
    runs_commands: bool = True
    unapplied_hint: str = ""
    plan_shows: str = ""
    example: str = ""


def controller_path(playbook_dir: Path, path: str) -> Path:
    """A playbook's path on the controller (``copy``/``script`` ``src``...): ``~`` expanded,
    absolute as it is, else relative to the playbook's folder ``playbook_dir``."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (Path(playbook_dir) / p).resolve()


def first_error_line(res: CommandResult) -> str:
    """The most telling line of a failed command, for the one-line summary.

    A compiler's own diagnostic (``file.cu(13): error: ...``, ``file.cpp:3:5: error: ...``,
    nvcc's ``nvcc fatal   : ...`` and ``nvcc error   : ...`` (a tool it ran died: ``'ptxas' died
    due to signal 11``; runs of blanks squeezed), ``CMake Error at ...`` with its indented message)
    wins over the front end's wrap-up (pip's ``Failed to build``): the first such line is the
    cause, the rest follow from it. Ninja's ``FAILED: OBJECT`` (the object it could not build)
    follows a compiler line that names no source file (nvcc's own) as ``(building OBJECT)``;
    without a compiler line it is the line itself. Otherwise
    the last ``error``-looking line, else stderr's last line (where a program says why it failed:
    ``env: '.../python3': No such file or directory``), else stdout's. A build's or an install's
    failure is named by :func:`fleetctl.tasks.causes.cause_line`, which falls back to this.
    """
    raw = (res.stderr_text + "\n" + res.stdout_text).splitlines()
    lines = [ln.strip() for ln in raw if ln.strip()]
    failed = next((m for m in map(_NINJA_FAILED.match, raw) if m), None)
    for i, line in enumerate(raw):
        line = line.strip()
        if _COMPILER_ERROR.search(line):
            if line.startswith("CMake Error") and line.endswith(":"):
                quoted = _quoted_compiler_line(raw, i)
                if quoted:  # the compiler's own line in CMake's block (its compiler check failed)
                    return quoted[:300]
                line = _cmake_message(line, raw, i)
            if line.startswith("nvcc "):
                line = " ".join(line.split())
            if failed is not None and not _AT_SOURCE.match(line):  # nvcc's own line names no file
                obj = f" (building {failed[1]})"
                return (line[:300 - len(obj)] + obj) if len(obj) < 150 else line[:300]
            return line[:300]
    if failed is not None:
        return failed[0].strip()[:300]
    for line in reversed(lines):
        if re.search(r"error|fatal|failed|not found|killed|Traceback", line, re.I):
            return line[:300]
    tail = [ln.strip() for ln in res.stderr_text.splitlines() if ln.strip()] or lines
    return tail[-1][:300] if tail else f"exit status {res.rc}"


def _quoted_compiler_line(raw: list[str], i: int) -> str | None:
    """The compiler's own diagnostic quoted in the ``CMake Error at ...:`` block at ``raw[i]``, with
    what CMake was doing, or ``None``. CMake's compiler checks print the compiler's output inside
    their error (``CMakeDetermineCompilerId.cmake``: ``Compiling the CUDA compiler identification
    source file "CMakeCUDACompilerId.cu" failed.`` ... ``The output was:``, the output indented;
    ``CMakeTestCUDACompiler.cmake``: ``is not able to compile a simple test program``), so nvcc's
    ``nvcc fatal   : Memory allocation failure`` is the cause, not CMake's wrap-up (fresh operator's
    trial: the summary named CMake's line, nvcc's was line 64 of the log): ``nvcc fatal : Memory
    allocation failure (CMake's CUDA compiler identification)``."""
    indent = len(raw[i]) - len(raw[i].lstrip())
    what = ""
    for more in raw[i + 1:]:
        if more.strip() and len(more) - len(more.lstrip()) <= indent:
            return None  # the block ended: no compiler line in it
        text = more.strip()
        m = _CHECK_KIND.search(text)
        if m and not what:
            what = f" (CMake's {m[1]} compiler {'identification' if m[2] else 'check'})"
        if _COMPILER_ERROR.search(text) and not text.startswith("CMake Error"):
            return (" ".join(text.split()) if text.startswith("nvcc ") else text)[:300 - len(what)] + what
    return None


#: CMake's compiler checks: ``Compiling the CUDA compiler identification source file``, ``The
#: CUDA compiler ... is not able to compile a simple test program.``
_CHECK_KIND = re.compile(r"\b(C|CXX|CUDA|HIP|Fortran) compiler\b( identification)?")


def _cmake_message(line: str, raw: list[str], i: int) -> str:
    """``CMake Error at FILE:LINE (CMD):`` (``raw[i]``) with its message, one line: CMake prints the
    message on the lines after it, indented, in paragraphs parted by blank lines (cmake's
    ``cmMessenger``); a paragraph ending in ``:`` goes on in the next one (``Cannot find source
    file:``, a blank line, then the file's path, indented deeper). The message ends at the first
    line that is not indented (``Call Stack (most recent call first):``) or at a blank line after a
    paragraph that does not end in ``:`` (``Tried extensions .c .C ...`` is left out).

    At most 300 characters, the end kept (what is missing is named last): over that, the file
    CMake was reading is shortened to its last two path parts (``CMake Error at
    .../cmake/nanobind-config.cmake:158 (add_library): ...``), then the middle is cut (``…``)."""
    indent = len(raw[i]) - len(raw[i].lstrip())
    for more in raw[i + 1:]:
        if not more.strip():
            if line.endswith(":"):
                continue
            break
        if len(more) - len(more.lstrip()) <= indent:
            break
        line += " " + more.strip()
    if len(line) > 300:
        line = re.sub(r"^(CMake Error at )(\S*?)([^/\s]+/[^/\s]+:\d+)", lambda m: m.group(1) + (".../" if m.group(2) else "") + m.group(3),
                      line, count=1)
    return line if len(line) <= 300 else line[:140] + " \u2026 " + line[-157:]


_COMPILER_ERROR = re.compile(
    r"^\S+?(\(\d+\)|:\d+(:\d+)?): (fatal )?error\b"       # nvcc/EDG file(13): error, gcc file:3:5: error
    r"|\bnvcc (fatal|error)\s*:|^CMake Error\b|^ld(\.\w+)?: .*error|^error: command '.*' failed"
    r"|^ERROR: Could not find a version|^ModuleNotFoundError: ")


#: A diagnostic that names its source file and line (``file.cu(13): ``, ``file.cpp:3:5: ``).
_AT_SOURCE = re.compile(r"^\S+?(\(\d+\)|:\d+(:\d+)?): ")
#: Ninja's line for the object it could not build (``FAILED: [code=1] OBJ``: ninja 1.12 adds the code).
_NINJA_FAILED = re.compile(r"^\s*FAILED: (?:\[code=\d+\] )?(\S+)")


def result_of(res: CommandResult, *, ok_status: Status = Status.CHANGED, what: str = "") -> TaskResult:
    """A command's :class:`TaskResult`: ``ok_status`` on exit 0, else FAILED naming the exit
    status (or signal) and :func:`first_error_line`."""
    if res.rc == 0:
        return TaskResult(ok_status, rc=0, stdout=res.stdout_text, stderr=res.stderr_text)
    code = f"rc={res.rc}" if res.rc is not None else f"signal {res.signal or '?'}"
    prefix = f"{what}: " if what else ""
    return TaskResult(Status.FAILED, msg=f"{prefix}{code}: {first_error_line(res)}", rc=res.rc,
                      stdout=res.stdout_text, stderr=res.stderr_text)
