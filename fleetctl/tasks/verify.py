"""``verify``: run the verification script isolated from the login environment.

The script (``playbooks/scripts/verify_package.py`` unless the task names another) is uploaded into
the run's folder and run with ``VENV_PYTHON -I`` (no PYTHONPATH, no user site-packages, not the
script's folder on sys.path) from ``/`` with VIRTUAL_ENV, CONDA_PREFIX, PYTHONPATH and PYTHONHOME
unset, so the package is imported from the venv's site-packages, never from a source tree. On a
host whose facts list GPUs it runs on the GPU (``--device cuda``), on EVERY GPU the facts list
(``--gpus``), and fails if torch cannot see one (a ``CUDA_VISIBLE_DEVICES`` of the login
environment that hides some makes that a warning in the result instead).
When the login environment (facts' ``login_env``) sets PYTHONPATH, PYTHONUSERBASE,
PYTHONNOUSERSITE or PYTHONHOME, they are handed to the script (``--login-env``), which also imports
the package as the host's users would (the venv's python without ``-I``, with those values) and
FAILS when another copy of the package comes first there, or the import fails there: fleetctl's own
steps are right to run without PYTHONPATH (a build must not pick up a source tree), but a verify
that only looked isolated said OK for a host where every user's job imports a stale copy.
See the script's docstring for the checks. Verify reads and changes nothing on the host besides its
own script, so it runs in a deploy, never in a dry run (there is nothing installed yet to check).
"""

from __future__ import annotations

import json
import signal
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..connection.base import UNNAMED_SIGNAL, CommandResult
from ..facts.venv import address_space_cause
from ..status import Status
from .argtypes import ActionArgs, is_template
from .base import Action, HostView, Plan, TaskResult, first_error_line
from .build_preflight import CLEAN_PYTHON_ENV
from .runtime_preflight import interpreter_problem, torch_cuda_problem, torch_runtime_problem
from .steps import Put, Run

#: The verification script used when ``verify.script`` is not given, relative to the fleetctl
#: project root (the folder holding ``playbooks/``).
DEFAULT_VERIFY_SCRIPT = "playbooks/scripts/verify_package.py"


class VerifyArgs(ActionArgs):
    """``verify``: import an installed package on the host and check it.

    Attributes:
        package: import name (``fp4_kernels``); torch is imported first.
        symbols: attribute names the package must have.
        script: local verification script; ``None`` means :data:`DEFAULT_VERIFY_SCRIPT`.
        smoke: run the numeric smoke test against the reference.
        device: ``"auto"`` (the GPU when the host's facts list GPUs, else the CPU), ``"cuda"`` or
            ``"cpu"`` (a host whose GPUs torch is not meant to use, e.g. a build host).
        fa3_fallback: when set, require that the FA3 fallback is (True) or is not (False) active.
        needs_torch: the package needs torch at run time (the FP4 kernels and every torch
            extension do; fleetctl never installs torch), so a venv whose facts show no torch is
            refused while planning (:mod:`~fleetctl.tasks.runtime_preflight`); ``false`` for a
            package verified without torch (the script then says ``torch not installed``).
    """

    package: str
    symbols: list[str] = Field(default_factory=list)
    script: str | None = None
    smoke: bool = True
    device: str = "auto"
    fa3_fallback: bool | None = None
    needs_torch: bool | str = True

    @field_validator("needs_torch")
    @classmethod
    def _needs_torch(cls, v: bool | str) -> bool | str:
        if isinstance(v, str) and not is_template(v):
            raise ValueError(f"needs_torch must be true or false, got {v!r}")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not is_template(v) and v not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device must be auto, cuda or cpu, got {v!r}")
        return v

    @field_validator("package")
    @classmethod
    def _package(cls, v: str) -> str:
        if not is_template(v) and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", v):
            raise ValueError(f"package must be an import name such as 'fp4_kernels', got {v!r}")
        return v

    @field_validator("symbols", mode="before")
    @classmethod
    def _symbols(cls, v: object) -> object:
        if isinstance(v, str) and not is_template(v):
            raise ValueError("symbols must be a list of names")
        return v


#: Login-environment variables that change what the venv's python imports (the script's
#: ``LOGIN_PATH_VARS``): handed to the script from ``facts["login_env"]``.
LOGIN_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE")


def login_path_env(facts: dict) -> dict[str, str]:
    """The :data:`LOGIN_PATH_VARS` the host's login environment sets (``facts["login_env"]``)."""
    login = facts.get("login_env") or {}
    return {k: str(login[k]) for k in LOGIN_PATH_VARS if isinstance(login, dict) and login.get(k)}


def verify_device(args: VerifyArgs, host_device: str, sms: list[str]) -> str:
    """Where verify runs: the task's ``device``, else the host var ``verify_device``, else the GPU
    when the host's facts list GPUs (``sms``), else the CPU."""
    return args.device if args.device != "auto" else host_device if host_device != "auto" else (
        "cuda" if sms else "cpu")


def verify_argv(python: str, script: str, args: VerifyArgs, venv: str | None, sms: list[str],
                host_device: str = "auto", gpus: list[dict] | None = None,
                login_env: dict[str, str] | None = None) -> list[str]:
    """The verification script's command line (pure): ``python -I`` (isolated mode).

    ``gpus``: the host's facts' GPUs; on the GPU (``--device cuda``) each one is verified
    (``--gpus``: JSON of their ``index``, ``name``, ``uuid``, ``pci_bus_id``, ``mig_mode``).
    ``login_env``: :func:`login_path_env` (``--login-env``, JSON), when it holds any."""
    device = verify_device(args, host_device, sms)
    argv = [python, "-I", "-X", "faulthandler", script, "--package", args.package, "--device", device]
    if device == "cuda" and gpus:
        argv += ["--gpus", json.dumps([{k: g.get(k) for k in ("index", "name", "uuid", "pci_bus_id", "mig_mode")}
                                       for g in gpus],
                                      separators=(",", ":"))]
    if venv:
        argv += ["--venv", venv]
    if args.symbols:
        argv += ["--symbols", ",".join(args.symbols)]
    if sms:
        argv += ["--sm", ",".join(sms)]
    if args.smoke:
        argv.append("--smoke")
    if args.fa3_fallback is not None:
        argv += ["--fa3-fallback", "yes" if args.fa3_fallback else "no"]
    if login_env:
        argv += ["--login-env", json.dumps(login_env, sort_keys=True, separators=(",", ":"))]
    return argv


def summary_of(res: CommandResult) -> dict:
    """The script's last stdout line that is a JSON object, or ``{}``."""
    for line in reversed(res.stdout_text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


#: Signals a Python process dies of when a shared object it maps or imports is broken
#: (signal(7): SIGBUS for a file truncated after it was mapped, SIGSEGV / SIGILL for corrupt code).
_FILE_SIGNALS = {"BUS", "SEGV", "ILL"}
#: Python's faulthandler's first line as a fatal signal ends the interpreter (its text: strsignal(3)'s).
_FAULT_LINE = re.compile(r"^Fatal Python error: ([^\n]+)$", re.M)
#: strsignal(3) text -> signal name (``"Bus error"`` -> ``"BUS"``).
_SIGNAL_TEXT = {signal.strsignal(s): s.name.removeprefix("SIG") for s in signal.Signals if signal.strsignal(s)}
#: A shared object's path in what the verify printed (a loader's or faulthandler's line).
_SO_PATH = re.compile(r"(/[^\s:'\"]+\.so(?:\.[0-9]+)*)\b")


def signal_of(res: CommandResult) -> tuple[str, str] | None:
    """``(name, how)`` of the signal that killed the command (``("BUS", "signal 7")``), else None.

    From the connection's ``signal``; over SSH, one OpenSSH does not name (SIGBUS among them:
    :data:`~fleetctl.connection.base.UNNAMED_SIGNAL`) from the line Python's faulthandler printed
    as it died (``Fatal Python error: Bus error``: the interpreter runs with ``-X faulthandler``);
    else from a negative exit status (Python's :mod:`subprocess`: ``-7``), or an exit status above
    128 (``135``): POSIX XCU 2.8.2, a shell that ran the interpreter reports signal N as 128+N (the
    verify script itself exits 0 or 1)."""
    if res.signal == UNNAMED_SIGNAL:
        told = _FAULT_LINE.findall(res.stderr_text)
        name = _SIGNAL_TEXT.get(told[-1].strip()) if told else None
        if name is None:
            return "?", "a signal OpenSSH does not name"
        return name, f"signal {int(getattr(signal.Signals, 'SIG' + name))}, named by Python's faulthandler"
    if res.signal:
        name = res.signal.upper().removeprefix("SIG")
        try:
            return name, f"signal {int(getattr(signal.Signals, 'SIG' + name))}"
        except AttributeError:
            return name, "signal"
    rc = res.rc
    if rc is None or not (rc < 0 or 128 < rc < 128 + 65):
        return None
    try:
        sig = signal.Signals(-rc if rc < 0 else rc - 128)
    except ValueError:
        return None
    return sig.name.removeprefix("SIG"), f"exit status {rc}"


#: Signals a process dies of when an allocation fails and nothing catches it (signal(7)): SIGABRT
#: (an uncaught ``std::bad_alloc`` ends in std::terminate, glibc's ``cannot allocate memory for
#: thread-local data: ABORT``, a CUDA runtime that cannot reserve its address space), SIGSEGV (a
#: failed allocation used as if it had worked, a stack that cannot grow).
_ALLOC_SIGNALS = {"ABRT", "SEGV"}


def died_of(res: CommandResult, failed: list, package: str, facts: Mapping[str, Any] | None = None) -> str | None:
    """The line for a verify interpreter killed by a signal before it printed a failed check:
    which signal (and the exit status that said so), at which check, what usually causes it, and
    the shared object the output names; None otherwise. Where the host's ``facts`` carry an
    address-space limit and the signal is one a failed allocation ends in (:data:`_ALLOC_SIGNALS`)
    or the output says a mapping or an allocation failed, the cause named is that limit
    (:func:`fleetctl.facts.venv.address_space_cause`)."""
    got = signal_of(res)
    if got is None or failed:
        return None
    sig, how = got
    done = [ln.split(":", 1)[0] for ln in res.stdout_text.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    where = f"after {done[-1].split(' ', 1)[1]}" if done else "before its first check"
    hint = ""
    limit = address_space_cause(facts or {}, None if sig in _ALLOC_SIGNALS else res.stderr_text + "\n" + res.stdout_text)
    if limit:
        hint = f": {limit}"
    elif sig in _FILE_SIGNALS:
        named = _SO_PATH.findall(res.stderr_text + "\n" + res.stdout_text)
        what = f"{named[-1]} (an installed file of {package} or of torch)" if named else \
            f"an installed file of {package} (or of torch), typically its extension's .so,"
        hint = (f": {what} is probably truncated or damaged, or was replaced while in use (a mapped file "
                f"that shrinks kills its reader with SIGBUS); deploy again (an install whose files differ from "
                f"their RECORD is reinstalled) or with --force")
    return f"the verify interpreter died of SIG{sig} ({how}) {where}{hint}"


def failure_line(res: CommandResult, failed: list, package: str, facts: Mapping[str, Any]) -> str:
    """Why a verify failed, one line: the failed checks (``name: detail``, ``; `` between them),
    else the signal that killed the interpreter (:func:`died_of`), else the output's error line
    (:func:`~fleetctl.tasks.base.first_error_line`). A failed check or an error line that says a
    mapping or an allocation failed (``MemoryError``, ``Cannot allocate memory``...) on a host whose
    ``facts`` carry an address-space limit ends with that limit as the cause
    (:func:`fleetctl.facts.venv.address_space_cause`)."""
    died = died_of(res, failed, package, facts)
    if died:
        return died
    why = "; ".join(f"{c['name']}: {c['detail']}" for c in failed) or first_error_line(res)
    limit = address_space_cause(facts, why)
    return f"{why}; {limit}" if limit else why


def plan(args: VerifyArgs, host: HostView) -> Plan:
    """Upload the script, run it from ``<run_dir>/verify``; OK when every check passed. A venv
    whose torch does not import (facts) is refused first, as a preflight
    (:func:`~fleetctl.tasks.runtime_preflight.torch_runtime_problem`), and before it a venv whose
    interpreter is not there or does not start
    (:func:`~fleetctl.tasks.runtime_preflight.interpreter_problem`)."""
    problem = interpreter_problem(host.facts, host.venv)
    if problem is None and args.needs_torch is True and not is_template(args.package):
        problem = torch_runtime_problem(host.facts, host.venv, host.python, args.package) or torch_cuda_problem(
            host.facts, host.venv, host.python, args.package, verify_device(args, host.verify_device, host.gpu_caps))
    if problem:
        return TaskResult(Status.FAILED, msg=f"preflight: {problem}", preflight=True,
                          data={"decision": {"action": "fail"}, "preflight": [problem]})
    local = Path(args.script) if args.script else host.project_root / DEFAULT_VERIFY_SCRIPT
    if not local.is_absolute():
        local = host.local_path(str(local))
    neutral = posixpath.join(host.run_dir, "verify")
    remote = posixpath.join(neutral, local.name)
    err = yield Put(local=str(local), remote=remote, mode=0o600, reason="the verification script")
    if err is not None:
        return TaskResult(Status.FAILED, msg=f"verify: {err}")
    ok_summary = {"ok": True, "checks": [], "simulated": True}
    argv = verify_argv(host.python, remote, args, host.venv, host.gpu_caps, host.verify_device,
                       gpus=[g for g in host.facts.get("gpus") or [] if isinstance(g, dict)],
                       login_env=login_path_env(host.facts))
    res = yield Run(argv=tuple(argv), cwd="/", quiet=True,
                    env=CLEAN_PYTHON_ENV, mutating=False, after_change=True,
                    reason="import and check the installed package, isolated from the login environment",
                    assume=CommandResult(argv=[], rc=0, stdout=json.dumps(ok_summary).encode()))
    summary = summary_of(res)
    failed = [c for c in summary.get("checks", []) if not c.get("ok")]
    if res.rc != 0 or not summary.get("ok"):
        why = failure_line(res, failed, args.package, host.facts)
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"verify {args.package}: {why}", data=summary,
                          stdout=res.stdout_text, stderr=res.stderr_text)
    if summary.get("simulated"):
        return TaskResult(Status.OK, msg="verify after the install", data={"decision": {"action": "verify"}})
    smoke = (summary.get("selfcheck") or {}).get("device")
    warned = "".join(f"; warning: {w}" for w in summary.get("warnings") or [])
    return TaskResult(Status.OK, data={**summary, "decision": {"action": "verify"}},
                      msg=f"{args.package} verified ({len(summary.get('checks', []))} checks"
                          f"{', smoke on ' + smoke if smoke else ''}{', on ' + summary['device'] if summary.get('device') else ''})"
                          f"{warned}")


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`verify` (the check runs after the install, on apply)."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Verify fp4_kernels
  verify:
    package: fp4_kernels
    symbols: [scaled_fp4_quant, dequantize_fp4]
    device: auto
  tags: [verify]
"""

ACTION = Action(name="verify", args=VerifyArgs, phase="verify", timeout_s=600.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
