"""``build_wheel``'s preflight: everything that would make a build fail or come out wrong, found
before anything is uploaded or compiled. Pure functions of facts, the source tree's build
metadata (:mod:`~fleetctl.tasks.build_meta`) and the venv probe's answer
(:data:`~fleetctl.tasks.venv_probe.VENV_PROBE`: each question in its own process), and the plan
steps that ask those questions (:func:`source_checks`: the tree and its dependencies;
:func:`venv_checks`: the venv and the build's space; :func:`receiver_space`), each refusal made
by :func:`refuse`. :func:`facts_problems` refuse a host whatever its role; what only a compile
needs (:func:`compile_problems`, the venv's build requirements, cmake, the build's space) refuses
only a host that will compile: one that reuses or receives its arch class's wheel compiles nothing.

Each problem is one line: the cause and the fix. The task joins them into its message, so a
failed preflight reads ``preflight: driver 535.104.05 is older than ... (install driver >= 580 ...)``
next to the host's name.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..build.archs import DEFAULT_PATH, available_memory_mib, unsupported_archs
from ..build.cudacompat import ArchToken, toolkit_torch_mismatch
from ..facts.refusals import build_requirements_problem, host_refusals, old_pip_problem
from ..status import Status
from .base import HostView, Plan, TaskResult, first_error_line
from .build_deps import plan_deps, read_tree
from .build_meta import TORCH_EXTENSION_TOOLS, BuildMeta, meta_from_texts, requirement_name
from .build_space import RECEIVER_MIN_FREE_DISK_MIB, build_paths, receive_paths, space_check
from .pytool import existing_venv, install_command, pick_tool
from .venv_probe import CLEAN_PYTHON_ENV, VENV_PROBE, torch_probe_problem, venv_probe  # noqa: F401 - their home
from .venv_probe import parse_venv_probe, probe_fault_problems, probe_started

_SETUPTOOLS_OWN_BDIST_WHEEL = (70, 1)


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def facts_problems(facts: Mapping[str, Any], tokens: Sequence[ArchToken], args: Any, venv: str | None,
                   cuda_home: str | None = None, cuda_home_origin: str | None = None) -> list[str]:
    """Problems found from facts alone (see the module docstring), which fail the host whatever its
    role: :func:`fleetctl.facts.refusals.host_refusals`, the one rule ``fleetctl facts`` warns
    with too (operator trial: facts said ok where ``--plan`` refused). Free disk space is not one:
    a host short of the build's space may still receive its arch class's wheel
    (:mod:`~fleetctl.tasks.build_space`). ``args`` is the task's (none of these depends on it)."""
    return host_refusals(facts, tokens, venv, cuda_home, cuda_home_origin)


def compile_problems(facts: Mapping[str, Any], tokens: Sequence[ArchToken], args: Any) -> list[str]:
    """Problems found from facts that only a host which compiles has: no nvcc, an arch its nvcc
    rejects, a noexec or read-only workdir (the build runs what it makes there), too little memory
    (``min_free_mem_mib``, after the cgroup's limit: :func:`~fleetctl.build.archs.available_memory_mib`).
    A host that reuses the wheel it holds, or receives its arch class's wheel, compiles nothing, so
    these never refuse it (fresh operator's trial: a host whose wheel was installed and current was
    refused for build memory). The build's cmake is checked with the tree's own floor
    (:func:`cmake_too_old`), the host compiler by :mod:`~fleetctl.tasks.build_toolchain`.
    """
    problems: list[str] = []
    cuda = facts.get("cuda") or {}
    arch_list = ";".join(t.text for t in tokens)
    if not cuda.get("nvcc"):
        problems.append(f"nvcc not found (looked in the cuda_home var, $CUDA_HOME, /usr/local/cuda, PATH, "
                        f"/usr/local/cuda-* and the interactive login PATH){': ' + cuda['error'] if cuda.get('error') else ''}; "
                        "set the host var 'cuda_home'")
    else:
        missing = unsupported_archs([t.arch for t in tokens], cuda.get("archs"), cuda.get("version"))
        if missing:
            others = [f"{tk.get('version')} at {tk.get('home')}" for tk in cuda.get("toolkits") or []
                      if tk.get("nvcc") != cuda.get("nvcc")]
            problems.append(f"nvcc {cuda.get('version')} at {cuda['nvcc']} rejects {', '.join(missing)} "
                            f"(arch list {arch_list}; its --list-gpu-arch: {' '.join(cuda.get('archs') or [])})"
                            + (f"; no other toolkit here does either ({', '.join(others)})" if others else "")
                            + ": use archs this nvcc knows, or a newer toolkit (host var cuda_home)")
        mismatch = toolkit_torch_mismatch(facts)  # worded once: facts warns with the same line
        problems += [mismatch] if mismatch else []
    wfs = facts.get("workdir_fs") or {}
    if "TMPDIR" not in (args.env or {}) and (wfs.get("noexec") or wfs.get("readonly")):
        problems.append(f"the workdir's file system ({wfs.get('path')}) is mounted "
                        f"{'noexec' if wfs.get('noexec') else 'read-only'}: builds run the programs they make there "
                        "(TMPDIR is put in the workdir); set the host var workdir to a folder on an exec, "
                        "writable file system")
    mem, source = available_memory_mib(facts)
    if mem is not None and mem < args.min_free_mem_mib:
        problems.append(f"only {int(mem)} MiB of memory for the build ({source}); it needs {args.min_free_mem_mib} MiB "
                        "(min_free_mem_mib): raise the memory limit, free memory, or let another member build "
                        "(build_host)")
    return problems


def requirement_list(meta: BuildMeta, args: Any, isolated: bool) -> list[str]:
    """What the venv must hold before a non-isolated build: the package's own ``[build-system]
    requires`` and, for a torch extension, :data:`~fleetctl.tasks.build_meta.TORCH_EXTENSION_TOOLS`
    and ``wheel`` (which :func:`missing_tools` excuses when setuptools builds wheels itself)."""
    if isolated or not meta.found:
        return []
    reqs = list(meta.requires)
    if meta.torch_extension:
        have = {requirement_name(r) for r in reqs}
        reqs += [t for t in (*TORCH_EXTENSION_TOOLS, "wheel") if t not in have]
    return reqs


def probe_problems(info: Mapping[str, Any], meta: BuildMeta, facts: Mapping[str, Any], args: Any,
                   venv: str | None, python: str, isolated: bool) -> list[str]:
    """Problems found from the venv probe's answer (see :data:`VENV_PROBE`) and the tree's metadata."""
    problems = []
    py = facts.get("python") or {}
    where = existing_venv(facts, venv, python)[0]  # a stage not made yet: the live venv it copies
    if venv and posixpath.realpath(info["prefix"]) != posixpath.realpath(venv) and info["prefix"] != venv.rstrip("/"):
        problems.append(f"{python} runs in {info['prefix']}, not the venv {venv}")
    if info.get("missing"):
        problems.append(f"build requirements missing in {where}: {', '.join(info['missing'])} "
                        f"(install them into the venv: {install_command(facts, python, ' '.join(info['missing']))})")
    if isolated and meta.torch_extension and not meta.torch_required:
        problems.append("an isolated build cannot import torch (ModuleNotFoundError: No module named 'torch'): "
                        "the package's [build-system] requires lacks torch, and it builds against torch; build in the "
                        "venv with its own torch: no_build_isolation: true (the default)")
    too_old = cmake_too_old(facts, meta, isolated, python, args.min_cmake)
    problems += [too_old] if too_old else []
    tools = missing_tools(info, facts, venv)
    needs_torch = not isolated and (meta.torch_extension or meta.torch_required)
    if needs_torch and not py.get("torch") and py.get("torch_probe_error"):
        problems.append(torch_probe_problem(py["torch_probe_error"]))
    elif needs_torch and not py.get("torch"):
        problems.append(f"torch does not import in {where} ({py.get('torch_error') or 'not installed'}): the build "
                        "compiles against the venv's torch; install the torch build for this host's CUDA into the venv "
                        "(not an isolated build: that would compile against another torch)")
    if tools and not args.install_build_requirements:
        reqs = info.get("requirements") or {}
        have = [(m, reqs.get(m, {}).get("installed")) for m in tools]
        problems.append(build_requirements_problem(facts, where, python, have, meta.torch_extension))
    if info.get("torch_archs_error") and meta.torch_extension and py.get("torch"):
        problems.append(f"cannot ask torch which archs it accepts ({info['torch_archs_error']}): the build imports "
                        "torch.utils.cpp_extension too, so it would fail the same way")
    for tok, res in (info.get("torch_archs") or {}).items():
        if not res.get("ok"):
            problems.append(f"arch {tok}: torch {py.get('torch')}'s torch.utils.cpp_extension rejects it "
                            f"({res.get('error')}); use an arch name this torch knows (such as "
                            f"{tok.split('+')[0].rstrip('af')}a for an arch-specific build)")
    tmp = info.get("tmp")
    if tmp and (tmp.get("noexec") or not tmp.get("writable")):
        problems.append(f"TMPDIR {tmp['path']} (the task's env) is {'noexec' if tmp.get('noexec') else 'not writable'}: "
                        "nvcc and the build run programs from there; drop TMPDIR from the task's env (fleetctl then "
                        "uses a folder in the workdir)")
    elif tmp and tmp.get("free_mib", 1 << 30) < args.min_free_disk_mib:
        problems.append(f"only {tmp['free_mib']} MiB free in TMPDIR {tmp['path']} (the task's env); the build needs "
                        f"{args.min_free_disk_mib} MiB: drop TMPDIR from the task's env (fleetctl then uses the workdir)")
    return problems


def missing_tools(info: Mapping[str, Any], facts: Mapping[str, Any], venv: str | None) -> list[str]:
    """The requirements the venv lacks, torch aside (fleetctl never installs torch): what
    ``install_build_requirements`` installs. ``wheel`` counts only for setuptools < 70.1 (newer
    setuptools builds wheels itself); ``ninja`` not when a ninja is on the build's PATH."""
    out = []
    ninja = (facts.get("ninja") or {}).get("path")
    build_path = [f"{venv}/bin" if venv else "", *DEFAULT_PATH.split(":")]
    for req, v in (info.get("requirements") or {}).items():
        name = requirement_name(req)
        if v.get("ok") or name == "torch":
            continue
        if name == "wheel" and _version(info.get("setuptools")) >= _SETUPTOOLS_OWN_BDIST_WHEEL:
            continue
        if name == "ninja" and ninja and posixpath.dirname(ninja) in build_path:
            continue
        out.append(req)
    return out


def cmake_too_old(facts: Mapping[str, Any], meta: BuildMeta, isolated: bool, python: str = "python3",
                  min_cmake: str | None = None) -> str | None:
    """The build's cmake (facts ``cmake``: the venv's ``bin/cmake``, else the login PATH's first,
    which :func:`fleetctl.build.env.build_environment` keeps on the build's PATH) against the
    tree's own floor (:attr:`BuildMeta.cmake_minimum`), raised by the task's ``min_cmake`` when
    that is newer, or ``None``: the one minimum every message names (fresh operator's trial: a
    default ``min_cmake`` of 3.18 said "older than 3.18" for a tree that requires 3.25). An isolated
    scikit-build-core build is not checked: scikit-build-core adds PyPI's ``cmake`` to its build
    requirements when the one it finds is too old (its docs, "Configuration")."""
    cmake, floor = facts.get("cmake") or {}, meta.cmake_minimum
    if min_cmake and (not floor or _version(min_cmake) > _version(floor[0])):
        floor = (min_cmake.strip(), "build_wheel min_cmake")
    if not floor or not cmake.get("version") or (isolated and (meta.backend or "").startswith("scikit_build_core")):
        return None
    if _version(cmake["version"]) >= _version(floor[0]):
        return None
    who = "the task requires" if floor[1] == "build_wheel min_cmake" else "the tree requires"
    return (f"cmake {cmake['version']} at {cmake.get('path')} is older than {floor[0]}, which {who} "
            f"({floor[1]}): install a newer cmake into the venv "
            f"({install_command(facts, python, shlex.quote(f'cmake>={floor[0]}'))}) or put one first "
            "on the host's login PATH")


def failed(msg: str, decision: dict[str, Any], **data: Any) -> TaskResult:
    """A failed build_wheel; ``data`` joins the result's data (``role="push"``: this host was to
    receive the class's wheel, so the failure is not a build's: the run's class summary says so)."""
    return TaskResult(Status.FAILED, msg=msg, data={**data, "decision": {**decision, "action": "fail"}})


def refuse(problems: list[str], decision: dict[str, Any], *, facts_only: bool = False, **data: Any) -> TaskResult:
    """A failed preflight: ``preflight: PROBLEM; PROBLEM`` with ``data["preflight"]`` the problems,
    which is how the run record, the summary's class line and the report tell a host refused
    before anything was built from a build that failed (:func:`fleetctl.reporting.tables.build_classes`).

    ``facts_only``: found from facts and what earlier tasks planned alone (wrong ``cuda_home``,
    an arch nvcc lacks, no accepted host compiler, a shared workdir), so
    :attr:`TaskResult.preflight` is set: it stops the host while planning even after an earlier
    task's command was simulated (pip_install's and verify's refusals do the same). A refusal from
    a probe's answer (the tree read, the venv probe, the space check, the dependencies) is not
    flagged: a simulated command before it (the nightly play's ``git pull`` of the tree) may
    change what the probe sees, so it stops the host while planning only when nothing was
    simulated before it (:func:`fleetctl.engine.host.run_pass`), and else when the task is applied."""
    return dataclasses.replace(failed("preflight: " + "; ".join(problems), decision, preflight=list(problems), **data),
                               preflight=facts_only)


def source_checks(args: Any, host: HostView, src: str, decision: dict[str, Any]) -> Plan:
    """The source tree's part of the preflight: the tree read once (the controller's copy, else
    one probe on the host: :func:`~fleetctl.tasks.build_deps.read_tree`) answers both what the
    tree declares about its build (:func:`~fleetctl.tasks.build_meta.meta_from_texts`) and what
    CMake would fetch (:func:`~fleetctl.tasks.build_deps.plan_deps`, from ``args.fetch_mirror``: a
    local folder is the controller's, relative to the playbook). Returns ``(meta, deps, None)``,
    or ``(meta, deps, the refusal)`` when a dependency cannot be had; ``decision["deps"]`` lists them."""
    files = yield from read_tree(host, src)
    meta = meta_from_texts(files.meta_texts, files.where)
    mirror = args.fetch_mirror.strip()
    if mirror and not ("://" in mirror or ":" in mirror.split("/")[0]):
        mirror = str(host.local_path(mirror))
    deps = yield from plan_deps(mirror, host, src, dict(args.cmake_defines), files)
    if deps.rows:
        decision["deps"] = deps.rows
    if deps.error:  # the dependency preflight: what the build would fetch cannot be had (fetch_mirror)
        return meta, deps, refuse([deps.error], decision)
    return meta, deps, None


def venv_checks(args: Any, host: HostView, facts: Mapping[str, Any], tokens: list, meta: BuildMeta,
                decision: dict[str, Any]) -> Plan:
    """The preflight's probes of the venv (its build requirements, torch's arch flags) and of the
    space the build needs (really allocated: statvfs ignores quotas): ``(venv probe answer, None)``;
    ``(venv probe answer, the failed result)`` when the venv runs but could not build (a build
    requirement missing, too little space: a host that receives its class's wheel needs neither);
    ``(None, the failed result)`` when the venv's interpreter does not run or fleetctl's probe
    failed (the host is broken whatever it would do). Only a host that may build is asked (two
    interpreter starts on it): one holding the wheel of these inputs builds nothing. A venv whose
    pip is too old for ``pip wheel --config-settings`` (passed for a CMake tree, or one whose build
    metadata was not found) where pip builds is refused with the line ``fleetctl facts`` warns with
    (:func:`fleetctl.facts.refusals.old_pip_problem`)."""
    isolated = not args.no_build_isolation
    reqs = requirement_list(meta, args, isolated)
    torch_tokens = [t.text for t in tokens] if meta.torch_extension and (facts.get("python") or {}).get("torch") else None
    tmp_override = (args.env or {}).get("TMPDIR")
    info_res = yield venv_probe(host.python, args.required_build_packages, reqs, torch_tokens, tmp_override)
    info = parse_venv_probe(info_res)
    if info is None and probe_started(info_res):  # the interpreter ran fleetctl's code: its fault
        info = {"probe_errors": {"venv": f"rc={info_res.rc}: {first_error_line(info_res)}"}}
    if info is None:
        return None, refuse([f"venv python {host.python} does not run: {first_error_line(info_res)}"], decision)
    problems = probe_fault_problems(info)
    if problems:
        return None, refuse(problems, decision)
    problems = probe_problems(info, meta, facts, args, host.venv, host.python, isolated)
    tool = pick_tool(args.tool, facts, host.venv, host.python)[0]
    old_pip = old_pip_problem(facts, host.venv, host.python, tool) if meta.cmake or not meta.found else None
    problems += [old_pip] if old_pip else []
    if problems:
        return info, refuse(problems, decision, build_meta=meta.as_dict())
    problems = yield from space_check(host.python, build_paths(host.workdir, args.out_dir), facts,
                                      args.min_free_disk_mib, "the build needs", "min_free_disk_mib")
    if problems:
        return info, refuse(problems, decision)
    return info, None


def receiver_space(args: Any, host: HostView, facts: Mapping[str, Any], build_checked: bool) -> Plan:
    """The disk problems of a host that receives its class's wheel: room for the wheel and its
    install, not the build tree (:mod:`~fleetctl.tasks.build_space`). ``build_checked``: the
    build's own space check passed (no second probe unless the receiver's number is larger)."""
    mib = args.receiver_min_free_disk_mib
    if mib is None:
        mib = min(RECEIVER_MIN_FREE_DISK_MIB, args.min_free_disk_mib)
    if build_checked and mib <= args.min_free_disk_mib:
        return []
    return (yield from space_check(host.python, receive_paths(host.run_dir, args.out_dir), facts, mib,
                                   "receiving this arch class's wheel (not building it) needs",
                                   "receiver_min_free_disk_mib"))
