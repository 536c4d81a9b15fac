"""``build_wheel``: build a source tree on the host into a wheel for exactly the host's SM.

The environment is derived from facts and set explicitly (CUDA_HOME, CUDACXX, PATH, VIRTUAL_ENV,
TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES, MAX_JOBS...; :func:`fleetctl.build.build_environment`)
so nothing depends on what the login shell happens to set. The planner:

1. preflight from facts alone (:func:`preflight_problems`), then one probe of the venv's python:
   every problem fails the task before anything is uploaded or compiled, in ``--plan`` too;
2. the build key (:func:`fleetctl.tasks.build_keys.build_key`: source tree, archs, defines,
   toolchain, torch, Python tag) and the host's stamps: a wheel for exactly these inputs is reused;
3. the arch class's role (:class:`~fleetctl.tasks.steps.ClassRole`): build here, receive the
   class's wheel (push), or hand the wheel this host already holds to the others (serve);
4. build with ``uv build --wheel --python VENV_PYTHON`` (uv on the host) or ``VENV_PYTHON -m pip
   wheel --no-deps``; a compiler killed for memory (exit 137, "Killed") is retried once with half
   the jobs;
5. the wheel's extension SASS (``cuobjdump --list-elf``) must hold every target arch, checked on
   the host with its cuobjdump, else on the controller (the wheel fetched into the cache).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from ..build import build_environment, cmake_defines
from ..scripts import script_path
from ..status import Status
from .argtypes import ActionArgs, ARCH_TOKEN, CMAKE_NAME, VERSION_RE, env_mapping, is_template, non_empty, scalar_to_str
from .base import Action, HostView, Plan, TaskResult, first_error_line
from .build_keys import (STAMP_NAME, build_argv, build_inputs, build_key, changed_inputs, is_killed, parse_stamps,
                         preflight_problems, python_probe, sass_targets, stamps_probe, target_plan, wheel_sass_local)
from .copy import REMOTE_TREE_HASH
from .steps import ClassRole, Emit, Fail, Fetch, Get, Local, Publish, Put, Run, probe

import re

from ..connection.base import CommandResult


class BuildWheelArgs(ActionArgs):
    """``build_wheel``: build a wheel from a remote source tree for the host's own SM.

    Attributes:
        src: remote source folder (holds ``pyproject.toml``).
        out_dir: remote folder the wheel is written to (one sub-folder per build key).
        no_build_isolation: build in the venv itself (torch, scikit-build-core, nanobind there).
        cmake_defines: extra ``-D`` defines, NAME -> value; YAML booleans become ``ON``/``OFF``.
        env: environment overrides for the build (over the computed CUDA/venv environment).
        max_jobs: parallel compile jobs; ``None`` derives it from the host's cores and memory.
        archs: arch list override in ``TORCH_CUDA_ARCH_LIST`` form (``"9.0a;12.0a"``); ``None``
            means the host's own GPUs.
        required_build_packages: import names that must be importable in the venv before building.
        min_cmake: lowest CMake version accepted (a string: ``"3.18"``).
        min_free_disk_mib: free disk space (MiB) required in the workdir's file system.
        check_sass: after the build, require every target arch in the built extension's SASS.
        tool: ``"uv"``, ``"pip"``, or ``"auto"`` (uv when the host has it).
        build: ``"once"`` builds one wheel per arch class (hosts that would build the same
            wheel) on one member and pushes it to the others; ``"each"`` builds on every host.
    """

    src: str
    out_dir: str
    no_build_isolation: bool = True
    cmake_defines: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    max_jobs: int | None = Field(default=None, ge=1)
    archs: str | None = None
    required_build_packages: list[str] = Field(default_factory=lambda: ["scikit_build_core", "nanobind"])
    min_cmake: str = "3.18"
    min_free_disk_mib: int = Field(default=2048, ge=0)
    check_sass: bool = True
    tool: Literal["auto", "uv", "pip"] = "auto"
    build: Literal["once", "each"] = "once"

    @field_validator("src", "out_dir")
    @classmethod
    def _paths(cls, v: str, info) -> str:
        return non_empty(v, info.field_name)

    @field_validator("cmake_defines", mode="before")
    @classmethod
    def _defines(cls, v: object) -> object:
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            return v
        out: dict[object, object] = {}
        for key, val in v.items():
            if not isinstance(key, str) or not (CMAKE_NAME.match(key) or is_template(key)):
                raise ValueError(f"invalid CMake variable name {key!r}")
            if isinstance(val, bool):
                val = "ON" if val else "OFF"
            out[key] = scalar_to_str(val, f"cmake_defines.{key}")
        return out

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: object) -> object:
        return env_mapping(v)

    @field_validator("archs", mode="before")
    @classmethod
    def _archs(cls, v: object) -> object:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"archs must be a string such as '9.0a;12.0a' (quote it), got {v!r}")
        if isinstance(v, str) and not is_template(v):
            parts = [p for p in re.split(r"[;\s]+", v.strip()) if p]
            if not parts or not all(ARCH_TOKEN.match(p) for p in parts):
                raise ValueError(f"archs must look like '9.0a;12.0a', got {v!r}")
        return v

    @field_validator("min_cmake", mode="before")
    @classmethod
    def _min_cmake(cls, v: object) -> object:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"min_cmake must be a quoted version string such as '3.18', got {v!r}")
        if isinstance(v, str) and not is_template(v) and not VERSION_RE.match(v.strip()):
            raise ValueError(f"min_cmake must be a version such as '3.18', got {v!r}")
        return v

    @field_validator("required_build_packages", mode="before")
    @classmethod
    def _packages(cls, v: object) -> object:
        if isinstance(v, str) and not is_template(v):
            raise ValueError("required_build_packages must be a list of import names")
        return v


def _fail(msg: str, decision: dict[str, Any], **data: Any) -> TaskResult:
    return TaskResult(Status.FAILED, msg=msg, data={**data, "decision": {**decision, "action": "fail"}})


def plan(args: BuildWheelArgs, host: HostView) -> Plan:
    """Preflight, decide (reuse / build / push / serve), then build or receive the class's wheel."""
    facts = host.facts
    target = target_plan(facts, args)
    decision: dict[str, Any] = {"archs": target.get("torch_cuda_arch_list")}
    problems = preflight_problems(facts, target, args, host.venv, host.cuda_home)
    if problems:
        return _fail("preflight: " + "; ".join(problems), decision, preflight=problems)
    info_res = yield python_probe(host.python, args.required_build_packages)
    try:
        info = json.loads(info_res.stdout_text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return _fail(f"preflight: venv python {host.python} does not run: {first_error_line(info_res)}", decision)
    venv = host.venv
    if venv and posixpath.realpath(info["prefix"]) != posixpath.realpath(venv) and info["prefix"] != venv.rstrip("/"):
        return _fail(f"preflight: {host.python} runs in {info['prefix']}, not the venv {venv}", decision)
    if args.no_build_isolation and info["missing"]:
        return _fail(f"preflight: build requirements missing in {venv}: {', '.join(info['missing'])} "
                     f"(install them into the venv: {host.python} -m pip install {' '.join(info['missing'])})",
                     decision)

    defines = cmake_defines({**facts, "build": target}, args.cmake_defines)
    src = args.src.rstrip("/") or "/"
    tree = host.trees.get(src)
    if tree is None:
        res = yield probe(["/bin/sh", "-c", REMOTE_TREE_HASH, "fleetctl-tree-hash", src], f"hash the sources in {src}",
                          timeout_s=300)
        if res.rc != 0 or not res.stdout_text.split():
            return _fail(f"source tree {src}: {first_error_line(res)}", decision)
        tree = res.stdout_text.split()[0]
    inputs = build_inputs(tree, target, defines, facts, host.name)
    key = build_key(inputs)
    dest = posixpath.join(args.out_dir, key[:16])
    stamp_path = posixpath.join(dest, STAMP_NAME)
    listing = yield stamps_probe(args.out_dir, posixpath.join(host.workdir, "installed"))
    stamps, installed = parse_stamps(listing.stdout_text)
    mine = next((s for s in stamps if s.get("key") == key), None)
    installed_shas = {i.get("sha256") for i in installed}
    decision.update(key=key[:16], installed=bool(mine and mine.get("sha256") in installed_shas),
                    changed=changed_inputs(inputs, stamps, installed_shas))
    holds = bool(mine) and not host.force
    once = args.build == "once" and not host.build_each
    role = yield ClassRole(key=key, holds=holds, once=once, reason="who builds this arch class")
    if role in ("reuse", "serve"):
        data = {**mine, "reused": True, "decision": {**decision, "action": role}}
        if role == "serve":
            err = yield Publish(key=key, wheel=mine["wheel"], sha256=mine["sha256"], data=mine,
                                reason="hand this host's wheel to the rest of its arch class")
            if err is not None:
                yield Emit(name="class.serve_failed", data={"key": key[:16], "error": str(err)})
        return TaskResult(Status.OK, msg=f"unchanged inputs: reusing {posixpath.basename(mine['wheel'])}", data=data,
                          files={mine["wheel"]: mine["sha256"]})
    if role == "push":
        got = yield Fetch(key=key, dest=dest, reason="one member of the arch class builds; this host receives it")
        if got == "build":  # the builder became unreachable: this host builds instead
            role = "build"
        elif isinstance(got, BaseException):
            return _fail(f"the build of this arch class failed on its builder: {got}", {**decision, "action": "push"})
        else:
            data = {**dict(got.data), "wheel": got.remote, "sha256": got.sha256, "key": key, "reused": False,
                    "pushed_from": got.builder, "decision": {**decision, "action": "push"}}
            err = yield Put(data=_stamp_bytes(data), remote=stamp_path, mode=0o600, reason="the build stamp")
            if err is not None:
                return _fail(f"cannot write the build stamp: {err}", decision)
            return TaskResult(Status.CHANGED, data=data, files={got.remote: got.sha256 or None},
                              msg=f"pushed {got.name} (built once for this arch class on {got.builder})")
    decision["action"] = "build"
    result = yield from _build_here(args, host, target, inputs, key, dest, stamp_path, defines, decision, once)
    return result


def _stamp_bytes(data: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in data.items() if k != "decision"}, sort_keys=True).encode()


def _build_here(args: BuildWheelArgs, host: HostView, target: dict[str, Any], inputs: dict[str, Any], key: str,
                dest: str, stamp_path: str, defines: dict[str, str], decision: dict[str, Any], once: bool) -> Plan:
    """Build on this host, check the SASS, write the stamp, publish to the class."""
    facts = host.facts
    uv = (facts.get("uv") or {}).get("path")
    tool = "uv" if args.tool == "uv" or (args.tool == "auto" and uv) else "pip"
    jobs = int(target.get("max_jobs") or 1)
    yield Run(argv=("rm", "-rf", dest), quiet=True, reason="a fresh folder for this build key")
    yield Run(argv=("mkdir", "-p", "-m", "0700", dest), quiet=True)
    res: CommandResult | None = None
    for attempt in range(2):
        env = build_environment({**facts, "build": {**target, "max_jobs": jobs}}, venv=host.venv, overrides=args.env)
        argv = build_argv(tool, host.python, uv, args.src, dest, defines, args.no_build_isolation)
        yield Emit(name="build.started", data={"tool": tool, "archs": target.get("torch_cuda_arch_list"),
                                               "max_jobs": jobs, "attempt": attempt + 1})
        res = yield Run(argv=tuple(argv), env=env, cwd=args.src,
                        reason=f"build for {target.get('torch_cuda_arch_list')} with MAX_JOBS={jobs}")
        if res.rc == 0:
            break
        killed = is_killed(res)
        if killed and jobs > 1 and attempt == 0:
            yield Emit(name="build.oom_retry", data={"max_jobs": jobs, "next_max_jobs": max(1, jobs // 2)})
            jobs = max(1, jobs // 2)
            continue
        why = f"compiler killed (likely out of memory) with MAX_JOBS={jobs}" if killed else first_error_line(res)
        msg = f"build failed ({tool}): {why}"
        if once:
            yield Fail(key=key, message=f"{host.name}: {msg}")
        return TaskResult(Status.FAILED, rc=res.rc, msg=msg, data={"max_jobs": jobs, "tool": tool, "key": key,
                                                                   "decision": decision})
    wheel_name = "<built wheel>"
    found = yield Run(argv=("/bin/sh", "-c", 'for f in "$1"/*.whl; do [ -f "$f" ] && sha256sum "$f"; done; true',
                            "fleetctl-wheels", dest), mutating=False, after_change=True, quiet=True,
                      assume=CommandResult(argv=[], rc=0, stdout=f"-  {posixpath.join(dest, wheel_name)}\n".encode()),
                      reason="the wheel the build wrote")
    wheels = [ln.split("  ", 1) for ln in found.stdout_text.splitlines() if "  " in ln]
    if len(wheels) != 1:
        msg = f"build produced {len(wheels)} wheels in {dest}, expected 1"
        if once:
            yield Fail(key=key, message=f"{host.name}: {msg}")
        return _fail(msg, decision)
    digest, wheel = wheels[0][0], wheels[0][1]
    digest = None if digest == "-" else digest
    data: dict[str, Any] = {"wheel": wheel, "sha256": digest, "key": key, "tool": tool, "max_jobs": jobs,
                            "archs": target.get("torch_cuda_arch_list"), "reused": False, "inputs": inputs,
                            "decision": decision}
    if args.check_sass and (facts.get("cuda") or {}).get("nvcc"):
        targets = sass_targets(target)
        archs, where, err = yield from _sass_archs(host, wheel, digest, targets)
        data["sass"] = archs
        missing = [t for t in targets if t not in archs]
        msg = f"SASS check: {err}" if err else (
            f"SASS check ({where}): {posixpath.basename(wheel)} lacks {', '.join(missing)} "
            f"(holds {', '.join(archs) or 'no SASS'})" if missing else "")
        if msg:
            if once:
                yield Fail(key=key, message=f"{host.name}: {msg}")
            return TaskResult(Status.FAILED, msg=msg, data=data)
    err = yield Put(data=_stamp_bytes(data), remote=stamp_path, mode=0o600, reason="the build stamp")
    if err is not None:
        return TaskResult(Status.FAILED, msg=f"cannot write the build stamp: {err}", data=data)
    if once:
        err = yield Publish(key=key, wheel=wheel, sha256=digest or "", data=data,
                            reason="fetch the wheel into the controller's cache for the rest of the class")
        if err is not None:
            return TaskResult(Status.FAILED, msg=f"built, but cannot fetch the wheel for the class: {err}", data=data)
    return TaskResult(Status.CHANGED, msg=f"built {posixpath.basename(wheel)} for {data['archs']}", data=data,
                      files={wheel: digest})


def _sass_archs(host: HostView, wheel: str, digest: str | None, targets: list[str]):
    """``(archs, where, error)``: on the host with its cuobjdump, else on the controller."""
    local_script = script_path("wheel_sass.py")
    assume_json = json.dumps({"archs": targets, "error": None}).encode()
    cuobjdump = (host.facts.get("cuda") or {}).get("cuobjdump")
    if cuobjdump:
        remote_script = host.remote_script("wheel_sass.py")
        yield Put(local=str(local_script), remote=remote_script, mode=0o600, reason="the SASS check script")
        res = yield Run(argv=(host.python, remote_script, wheel, cuobjdump), mutating=False, after_change=True,
                        quiet=True, assume=CommandResult(argv=[], rc=0, stdout=assume_json),
                        reason="list the SASS in the wheel (cuobjdump --list-elf)")
        try:
            out = json.loads(res.stdout_text.strip().splitlines()[-1])
            if not out.get("error"):
                return out["archs"], "on the host", None
        except (ValueError, IndexError):
            pass
    from ..paths import cache_dir

    name = posixpath.basename(wheel)
    local = cache_dir() / "sass-check" / (digest or "unknown")[:16] / name
    err = yield Get(remote=wheel, local=str(local), after_change=True, reason="check the SASS on the controller")
    if err is not None:
        return [], "on the controller", f"cannot fetch the wheel to check it: {err}"
    out = yield Local(fn=wheel_sass_local, args=(str(local_script), str(local)), after_change=True,
                      assume={"archs": targets, "error": None}, reason="cuobjdump on the controller")
    if isinstance(out, BaseException):
        return [], "on the controller", str(out)
    if out.get("error"):
        return [], "on the controller", (f"no cuobjdump on the host or the controller ({out['error']}); "
                                         "install nvidia-cuda-cuobjdump from PyPI on the controller")
    return out["archs"], "on the controller", None


ACTION = Action(name="build_wheel", args=BuildWheelArgs, phase="build", timeout_s=7200.0, plan=plan)
