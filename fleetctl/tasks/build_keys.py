"""The pure parts of ``build_wheel``: the target plan, preflight checks, the build key, stamps.

Hosts whose build inputs (:func:`build_inputs`) are equal form one arch class and build one wheel.
A build leaves a stamp (:data:`STAMP_NAME`, JSON: the wheel path, its sha256, the key, the inputs,
archs and SASS found) beside its wheel in ``<out_dir>/<key[:16]>/``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..build import config_settings_args, cuda_arch, parse_arch_list, unsupported_archs, wheel_defines
from ..connection.base import CommandResult
from .steps import Run, probe

#: The stamp a build leaves next to its wheel (``<out_dir>/<key16>/``).
STAMP_NAME = ".fleetctl-build.json"

KILLED = re.compile(r"\bKilled\b|out of memory|Cannot allocate memory|signal 9|std::bad_alloc", re.I)

_PYTHON_PROBE = (
    "import importlib.util, json, sys\n"
    "print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix,"
    " 'missing': [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]}))\n"
)

_STAMPS = (f'for f in "$1"/*/{STAMP_NAME}; do [ -f "$f" ] || continue; w=$(sed -n \'s/.*"wheel": "\\([^"]*\\)".*/\\1/p\' "$f"); '
           '[ -n "$w" ] && [ -f "$w" ] && { cat "$f"; echo; }; done; '
           'for f in "$2"/*.json; do [ -f "$f" ] && { printf "INSTALLED "; cat "$f"; echo; }; done; true')


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def target_plan(facts: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """The build plan from facts (:func:`fleetctl.build.build_plan`), with the task's ``archs`` and
    ``max_jobs`` overrides applied."""
    plan = dict(facts.get("build") or {})
    if args.archs:
        archs = parse_arch_list(args.archs.replace("+PTX", ""))
        plan["torch_cuda_arch_list"] = ";".join(archs)
        plan["cuda_architectures"] = ";".join(cuda_arch(a) for a in archs)
    if args.max_jobs:
        plan["max_jobs"] = args.max_jobs
    return plan


def sass_targets(plan: Mapping[str, Any]) -> list[str]:
    """``["sm_90a", "sm_120a"]`` for ``cuda_architectures`` ``"90a;120a"`` (``-virtual`` entries skipped)."""
    return [f"sm_{a.split('-')[0]}" for a in str(plan.get("cuda_architectures", "")).split(";")
            if a and not a.endswith("-virtual")]


def preflight_problems(facts: Mapping[str, Any], plan: Mapping[str, Any], args: Any, venv: str | None,
                       cuda_home: str | None = None) -> list[str]:
    """Everything that would make the build fail, found from facts alone.

    ``cuda_home`` is the host var: when set, the toolkit found must be that one (a silent fallback
    to another toolkit is how builds end up with the wrong nvcc).
    """
    problems = []
    cuda = facts.get("cuda") or {}
    if cuda_home and cuda.get("source") != "cuda_home var":
        problems.append(f"cuda_home {cuda_home} has no bin/nvcc (fix the host var 'cuda_home')")
    if not venv:
        problems.append("no venv for this host: set the host var 'venv' (the build must not pick the system Python)")
    py = facts.get("python") or {}
    if venv and not py.get("exists", True):
        problems.append(f"venv python {posixpath.join(venv, 'bin', 'python3')} does not exist (venv var: {venv})")
    if not cuda.get("nvcc"):
        problems.append(f"nvcc not found (looked in the cuda_home var, /usr/local/cuda and PATH)"
                        f"{': ' + cuda['error'] if cuda.get('error') else ''}; set the host var 'cuda_home'")
    else:
        archs = str(plan.get("torch_cuda_arch_list", "")).split(";")
        missing = unsupported_archs([a for a in archs if a], cuda.get("archs"), cuda.get("version"))
        if missing:
            problems.append(f"nvcc {cuda.get('version')} at {cuda['nvcc']} does not support {', '.join(missing)} "
                            f"(arch list {plan.get('torch_cuda_arch_list')})")
    cmake = facts.get("cmake") or {}
    if cmake.get("version") and _version(cmake["version"]) < _version(args.min_cmake):
        problems.append(f"cmake {cmake['version']} at {cmake.get('path')} is older than {args.min_cmake}")
    free = facts.get("disk_free_mib")
    if isinstance(free, (int, float)) and free < args.min_free_disk_mib:
        problems.append(f"only {free} MiB free at {facts.get('workdir') or 'the workdir'}; "
                        f"the build needs {args.min_free_disk_mib} MiB")
    return problems


def build_argv(tool: str, python: str, uv: str | None, src: str, dest: str, defines: Mapping[str, str],
               no_build_isolation: bool) -> list[str]:
    """The build command for ``uv`` or ``pip`` (config settings carry the CMake defines)."""
    if tool == "uv":
        argv = [uv or "uv", "build", "--wheel", "--python", python, "--out-dir", dest]
        if no_build_isolation:
            argv.append("--no-build-isolation")
        return [*argv, *config_settings_args(defines, frontend="uv"), src]
    argv = [python, "-m", "pip", "wheel", "--no-deps", "-v", "--wheel-dir", dest]
    if no_build_isolation:
        argv.append("--no-build-isolation")
    return [*argv, *config_settings_args(defines, frontend="pip"), src]


def build_inputs(tree_hash: str, plan: Mapping[str, Any], defines: Mapping[str, str], facts: Mapping[str, Any],
                 host: str | None = None) -> dict[str, Any]:
    """Everything that decides the wheel's bytes: hosts with equal inputs form one arch class.

    A host whose GPUs mix SMs is its own class (``host`` is part of its inputs).
    """
    py = facts.get("python") or {}
    material = {
        "tree": tree_hash, "archs": plan.get("torch_cuda_arch_list"), "defines": wheel_defines(defines),
        "cuda": (facts.get("cuda") or {}).get("version"), "torch": py.get("torch"),
        "torch_cuda": py.get("torch_cuda"), "python": py.get("tag") or py.get("version"),
    }
    if plan.get("mixed_sm") and host:
        material["mixed_sm_host"] = host
    return material


def build_key(material: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of :func:`build_inputs`; its first 16 digits name folders and cache entries."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def changed_inputs(inputs: Mapping[str, Any], stamps: Sequence[Mapping[str, Any]], installed_shas: set) -> list[str]:
    """Which inputs differ from those of the wheel installed now (``["tree", "torch"]``), or
    ``["nothing installed"]`` / ``["inputs not recorded"]``; ``[]`` when they are equal."""
    current = next((s for s in stamps if s.get("sha256") in installed_shas), None)
    if current is None:
        return ["nothing installed"]
    old = current.get("inputs")
    if not old:
        return ["inputs not recorded"]
    return sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))


def is_killed(res: CommandResult) -> bool:
    """The compiler died of memory: exit 137, SIGKILL, or "Killed"/"out of memory" in the output."""
    return (res.rc == 137 or res.signal == "KILL"
            or bool(KILLED.search(res.stderr_text[-20000:] + res.stdout_text[-20000:])))


def python_probe(python: str, packages: Sequence[str]) -> Run:
    """Which interpreter ``python`` is (prefix) and which of ``packages`` it cannot import."""
    return probe([python, "-c", _PYTHON_PROBE, *packages], f"check {python} and the build requirements")


def stamps_probe(out_dir: str, installed_dir: str) -> Run:
    """Every stamp under ``out_dir`` whose wheel still exists, and the install records."""
    return probe(["/bin/sh", "-c", _STAMPS, "fleetctl-stamps", out_dir, installed_dir],
                 "the wheels this host holds and the one installed")


def parse_stamps(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(stamps, install records)`` from :func:`stamps_probe`'s output; unreadable lines skipped."""
    stamps, installed = [], []
    for line in text.splitlines():
        try:
            if line.startswith("INSTALLED "):
                installed.append(json.loads(line[len("INSTALLED "):]))
            elif line.strip():
                stamps.append(json.loads(line))
        except ValueError:
            continue
    return stamps, installed


def wheel_sass_local(script: str, wheel: str) -> dict[str, Any]:
    """Run the SASS listing script on the controller (in a worker thread, see
    :class:`~fleetctl.tasks.steps.Local`); ``{"archs": [...], "error": str|None}``."""
    proc = subprocess.run([sys.executable, script, wheel], capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"archs": [], "error": f"wheel_sass.py failed: {proc.stderr.strip()[-300:]}"}
