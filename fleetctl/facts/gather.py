"""Gather a host's facts in one round trip: upload the facts script, run it, parse its JSON.

The script (``playbooks/scripts/facts.py``) runs on the host with the host's own ``python3``
and probes GPUs (nvidia-smi, NVML), the CUDA toolkit, the build interpreter and its torch,
cmake/ninja/uv, CPUs, memory and disk. This module adds what fleetctl derives from them:
``build`` (:func:`fleetctl.build.archs.build_plan`) and ``reachable``.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..build.archs import DEFAULT_FALLBACK_ARCHS, build_plan
from ..build.cudacompat import parse_tokens, toolkit_torch_mismatch, with_toolkit_for
from ..build.hostcompiler import choose as choose_host_compiler
from ..connection.base import Connection
from ..errors import FleetError, TaskFailed
from ..build.gpustack import check_gpu_stack, slurm_label_warnings, unmet_gres_warning
from .refusals import builder_warning, host_refusals, warning as refusal_warning
from .venv import SIZE_ASKED_BELOW_MIB, venv_free_mib, venv_warnings
from .workdir import RECEIVER_MIN_FREE_DISK_MIB, statvfs_problem, workdir_warning
from .scripts import script_path

#: Name of the facts script, locally (``playbooks/scripts/``) and in the remote workdir.
FACTS_SCRIPT = "facts.py"


def remote_workdir(workdir: str, home: str) -> str:
    """The absolute remote workdir: ``~`` and ``~/x`` expand to the login home, a relative
    path is taken under it, an absolute one is kept (normalised, POSIX)."""
    if workdir in ("~", "") or workdir.startswith("~/"):
        workdir = posixpath.join(home or ".", workdir[2:]) if workdir.startswith("~/") else (home or ".")
    elif not workdir.startswith("/"):
        workdir = posixpath.join(home or ".", workdir)
    return posixpath.normpath(workdir)


def facts_argv(python: str, script: str, *, workdir: str, venv: str | None = None,
               cuda_home: str | None = None, gpu_timeout_s: float | None = None, read_only: bool = False) -> list[str]:
    """The argv that runs the uploaded facts script (pure; shown by ``--dry-run``); ``read_only``:
    the script writes nothing on the host (``--read-only 1``: ``fleetctl facts``)."""
    return [python, script, "--workdir", workdir] + facts_options(venv=venv, cuda_home=cuda_home,
                                                                 gpu_timeout_s=gpu_timeout_s) \
        + (["--read-only", "1"] if read_only else [])


def facts_options(*, venv: str | None = None, cuda_home: str | None = None,
                  gpu_timeout_s: float | None = None) -> list[str]:
    """The facts script's options from host settings: ``--venv``, ``--cuda-home`` and
    ``--gpu-timeout-s`` (seconds nvidia-smi may take; the ``gpu_probe_timeout_s`` var)."""
    argv: list[str] = []
    if venv:
        argv += ["--venv", venv]
    if cuda_home:
        argv += ["--cuda-home", cuda_home]
    if gpu_timeout_s is not None:
        argv += ["--gpu-timeout-s", f"{float(gpu_timeout_s):g}"]
    return argv


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


#: A Python exception line (``OSError: [Errno 122] Disk quota exceeded``, ``KeyboardInterrupt``).
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


def _cause(stderr: str, stdout: str) -> str:
    """The line that says why the script failed: after a Python traceback its exception line (the
    last such line: the traceback's first line, ``Traceback (most recent call last):``, says
    nothing), else the first line of stderr, else of stdout."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if "Traceback (most recent call last):" in lines:
        raised = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
        if raised:
            return raised[-1]
    return _first_line(stderr) or _first_line(stdout)


def parse_facts_output(host: str, rc: int | None, stdout: str, stderr: str) -> dict[str, Any]:
    """Parse the script's stdout into the facts dict.

    The JSON object is the last non-empty stdout line that parses (a login banner or a
    stray print before it is ignored).

    Raises:
        TaskFailed: (a :class:`FleetError`) the script exited non-zero or printed no JSON object;
            the message names the host, the exit status and the first stderr line
            (``python3: command not found`` and the like), or a traceback's exception line.
    """
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            if rc not in (0, None):
                break
            return data
    cause = _cause(stderr, stdout) or "no output"
    status = f"exit {rc}" if rc is not None else "killed by a signal"
    raise TaskFailed(host, f"facts script printed no JSON object ({status}): {cause}")


async def gather_facts(
    conn: Connection,
    *,
    venv: str | None = None,
    cuda_home: str | None = None,
    workdir: str,
    fallback_archs: str | Sequence[str] = DEFAULT_FALLBACK_ARCHS,
    timeout_s: float = 120,
    python: str = "python3",
    max_jobs: int | None = None,
    gpu_timeout_s: float | None = None,
    verify_device: str = "auto",
    read_only: bool = False,
    install_requirements: bool = False,
    class_wheel: ClassWheel | None = None,
) -> dict[str, Any]:
    """Upload and run the facts script on ``conn``'s host; return its facts plus ``build``.

    Args:
        conn: an open connection (``conn.home`` known).
        venv: the host's ``venv`` var: the interpreter builds use is ``<venv>/bin/python3``.
        cuda_home: the host's ``cuda_home`` var (``--cuda-home``); searched first.
        workdir: remote working folder (``~``, relative or absolute); the script goes to
            ``<workdir>/facts.py`` and free disk space is measured there.
        fallback_archs: torch archs to build when the host reports no GPU.
        timeout_s: deadline in seconds for the script run.
        python: the interpreter that runs the script (any Python >= 3.8 on the host).
        max_jobs: fixed build job count (host var); derived from CPUs and memory when None.
        gpu_timeout_s: seconds nvidia-smi may take on the host (the script's default when None).
        verify_device: the host var (``auto``, ``cuda``, ``cpu``), for :func:`complete_facts`.
        read_only: write nothing that stays on the host (``fleetctl facts``): the script goes to
            a private folder ``mktemp -d`` makes (removed after the run), not ``workdir``, and runs
            with ``--read-only 1`` (no id file, no cache saved; ``workdir`` need not exist).
        install_requirements: see :func:`complete_facts`.
        class_wheel: see :func:`complete_facts`.

    Returns:
        The script's JSON object (see ``playbooks/scripts/facts.py``) with ``reachable: True``
        and ``build`` (see :func:`fleetctl.build.archs.build_plan`) added. When the toolkit found first
        cannot compile the host's archs and another one of the host's toolkits can (the newest
        such), ``cuda`` describes that one and a build note says so (unless ``cuda_home`` pins it).

    Raises:
        TaskFailed: the script could not run or printed no JSON (names host and first stderr line).
        GpuStackBroken: the host's NVIDIA stack is installed but broken (see :func:`complete_facts`).
        TransferError: the upload failed.
        CommandTimeout: the script ran past ``timeout_s``.
        HostUnreachable: the connection was lost.
        FleetError: the local facts script is missing.
    """
    local = script_path(FACTS_SCRIPT)
    workdir_abs = remote_workdir(workdir, conn.home)
    scratch = None
    if read_only:
        made = await conn.run(["mktemp", "-d", "-t", "fleetctl-facts.XXXXXXXX"], timeout_s=timeout_s)
        scratch = made.stdout_text.strip().splitlines()[-1] if made.rc == 0 and made.stdout_text.strip() else ""
        if not scratch.startswith("/"):
            raise TaskFailed(conn.host, f"mktemp -d failed: {_first_line(made.stderr_text) or f'exit {made.rc}'}")
    remote = posixpath.join(scratch or workdir_abs, FACTS_SCRIPT)
    try:
        await conn.put(str(local), remote, mode=0o644)
        argv = facts_argv(python, remote, workdir=workdir_abs, venv=venv, cuda_home=cuda_home,
                          gpu_timeout_s=gpu_timeout_s, read_only=read_only)
        result = await conn.run(argv, timeout_s=timeout_s)
    finally:
        if scratch:
            await conn.run(["rm", "-rf", "--", scratch], timeout_s=timeout_s)
    facts = parse_facts_output(conn.host, result.rc, result.stdout_text, result.stderr_text)
    return complete_facts(conn.host, facts, fallback_archs=fallback_archs, max_jobs=max_jobs, cuda_home=cuda_home,
                          extra=conn.extra_facts(), verify_device=verify_device,
                          install_requirements=install_requirements, class_wheel=class_wheel)


#: Finds the wheel a deploy would install on a host from its completed facts: ``(file name,
#: unpacked bytes)`` of its arch class's wheel in the controller's cache, or None (the engine's
#: :func:`fleetctl.engine.wheelcache.class_wheel_like`: this layer does not read the cache).
ClassWheel = Callable[[str, Mapping[str, Any]], "tuple[str, int] | None"]


def complete_facts(host: str, facts: dict[str, Any], *,
                   fallback_archs: str | Sequence[str] = DEFAULT_FALLBACK_ARCHS,
                   max_jobs: int | None = None, cuda_home: str | None = None,
                   extra: Mapping[str, Any] | None = None, verify_device: str = "auto",
                   install_requirements: bool = False, class_wheel: ClassWheel | None = None) -> dict[str, Any]:
    """The script's facts with ``build`` (:func:`fleetctl.build.archs.build_plan`) and ``reachable``
    added. When the toolkit found first cannot compile the host's archs and another of the host's
    toolkits can, the returned facts (a new dict) describe that one, with a build note, unless
    ``cuda_home`` (the host var) pins the toolkit. Use the returned dict, not ``facts``.
    ``build.notes`` holds every warning ``fleetctl facts`` gives; those about the venv that only the
    shipped deploy's ``install`` or ``verify`` refuses for are listed under their phase in
    ``build.phase_notes`` too (``{"verify": [str]}``), so that a play without that phase does not
    tell them (:func:`fleetctl.build.arch_notes.told_notes`).

    Args:
        extra: what the connection knows of the host (:meth:`Connection.extra_facts`: Slurm's view
            of a node, with its GRES), merged in first.
        verify_device: the host var (``auto``, ``cuda``, ``cpu``): see
            :func:`fleetctl.build.gpustack.check_gpu_stack`. With ``cpu`` on a node whose GRES
            gives it GPUs facts did not find, ``build.notes`` and ``build.env_notes`` (told by every
            play) carry ``warning: Slurm GRES ... gives it N GPUs, but facts found none ...``
            (:func:`fleetctl.build.gpustack.unmet_gres_warning`). A GRES type or ``sm_XY``
            feature that no GPU found fits is a warning the same way
            (:func:`fleetctl.build.gpustack.slurm_label_warnings`).
        install_requirements: the deploy's build installs missing build requirements on this
            host (:func:`fleetctl.facts.venv.installs_build_requirements`): said as a note, not
            as a refusal's warning.
        class_wheel: asked ``(host, facts)`` for the wheel a deploy would install, when the venv
            has under :data:`fleetctl.facts.venv.SIZE_ASKED_BELOW_MIB` free: the venv's room
            warning then counts its size as ``--plan`` does (:func:`fleetctl.facts.venv.install_need`).

    Raises:
        GpuStackBroken: (a :class:`TaskFailed`) the host's NVIDIA stack is installed but broken, or
            Slurm's GRES (or ``verify_device: cuda``) says it has GPUs and no driver answers
            (:func:`fleetctl.build.gpustack.check_gpu_stack`): the host fails at facts, never builds
            for ``fallback_archs`` as if it had no GPU.
        FleetError: the build cannot be planned from these facts.
    """
    facts.update(extra or {})
    check_gpu_stack(host, facts, verify_device=verify_device)
    try:
        facts["build"] = build_plan(facts, fallback_archs=fallback_archs, max_jobs=max_jobs)
        switched, note = with_toolkit_for(facts, parse_tokens(facts["build"]["torch_cuda_arch_list"]),
                                          pinned=bool(cuda_home))
        if note:
            facts = dict(switched)
            facts["build"] = build_plan(facts, fallback_archs=fallback_archs, max_jobs=max_jobs)
            facts["build"]["notes"].insert(0, note)
        cxx = choose_host_compiler(facts)  # what nvcc will compile host code with (fleetctl/build/hostcompiler.py)
        if cxx.note:
            facts["build"]["notes"].append(cxx.note)
        if cxx.problem:  # the build's toolchain check refuses it (fleetctl/tasks/build_toolchain.py)
            facts["build"]["notes"].append(builder_warning(cxx.problem))
        cuda = facts.get("cuda") or {}
        for skipped in cuda.get("skipped") or []:  # the login's CUDA_HOME passed over: said, never silent
            facts["build"]["notes"].append(
                f"the login environment's CUDA_HOME {skipped.get('home')} has {skipped.get('why')}: skipped; "
                + (f"nvcc {cuda.get('version')} at {cuda['nvcc']} ({cuda.get('source')}) is used"
                   if cuda.get("nvcc") else "no other nvcc was found either"))
        mismatch = toolkit_torch_mismatch(facts)  # operator trial: CUDA_HOME=cuda-12.4 beside a +cu130 torch
        if mismatch:
            facts["build"]["notes"].append(builder_warning(mismatch))
    except ValueError as exc:
        raise FleetError(f"{host}: cannot plan the build: {exc}") from None
    for warning in (facts.get("gpu_stack") or {}).get("warnings") or []:
        facts["build"]["notes"].append(f"warning: {warning}")
    py = facts.get("python") or {}
    # every refusal of the build's facts preflight, by its own rule (new-user trials: a missing venv
    # python, venv: /usr; operator trial: a driver too old for the toolkit read "ok"); cuda_home's is
    # the session's, which knows where the var was set (fleetctl/engine/session.py finish_facts)
    tokens = parse_tokens(facts["build"]["torch_cuda_arch_list"])
    for problem in host_refusals(facts, tokens, py.get("venv"), need_venv=False):
        facts["build"]["notes"].append(refusal_warning(problem))
    # new-user trial: a venv the login user cannot write, a full one, a torch that does not import
    free = venv_free_mib(facts)
    wheel = class_wheel(host, facts) if class_wheel and free is not None and free < SIZE_ASKED_BELOW_MIB else None
    for note in venv_warnings(facts, install_requirements, wheel, verify_device):
        facts["build"]["notes"].append(note.text)
        if note.phase != "build":  # told only by a play with that phase (fleetctl/build/arch_notes.py)
            facts["build"].setdefault("phase_notes", {}).setdefault(note.phase, []).append(note.text)
    wd = workdir_warning(facts)  # new-user trial: a read-only or full workdir read "ok: disk free GiB 0"
    short = None if wd else statvfs_problem(facts)  # operator trial: 29 MiB free read ok; the build refuses it
    # below the receiver's own floor the host is refused whatever its role (fleetctl/tasks/build_space.py)
    either = short and statvfs_problem(facts, RECEIVER_MIN_FREE_DISK_MIB)
    for note in ([wd] if wd else []) + ([(refusal_warning if either else builder_warning)(short)] if short else []):
        facts["build"]["notes"].append(note)
    unmet = unmet_gres_warning(facts, verify_device)
    # about the host, not only its build: told by every play (env_notes), verify included
    for warning in ([unmet] if unmet else []) + slurm_label_warnings(facts):
        facts["build"]["notes"].append(f"warning: {warning}")
        facts["build"].setdefault("env_notes", []).append(f"warning: {warning}")
    facts["reachable"] = True
    return facts
