"""``build_wheel``: build a source tree on the host into a wheel for exactly the host's SM.

The environment is derived from facts and set explicitly (CUDA_HOME, CUDACXX, PATH, VIRTUAL_ENV,
TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES, MAX_JOBS...; see :func:`fleetctl.build.build_environment`)
so nothing depends on what the login shell happens to set. Steps:

1. preflight (seconds, not an hour): nvcc exists and knows every target arch, the venv's python
   exists and is the interpreter that will run, the build requirements import there, cmake is new
   enough, the disk has room;
2. skip when a wheel for exactly these inputs (source tree hash, archs, defines, toolchain, torch,
   Python tag) was already built on this host (``--force`` rebuilds);
3. build with ``uv build --wheel --python VENV_PYTHON`` when uv is on the host, else
   ``VENV_PYTHON -m pip wheel --no-deps``; a compiler killed for memory (exit 137, "Killed") is
   reported with the MAX_JOBS in use and retried once with half;
4. after the build, the wheel's extension SASS (``cuobjdump --list-elf``) must hold every target
   arch, else FAILED naming the missing one. cuobjdump comes from the host's ``$CUDA_HOME/bin``;
   a host without it has the wheel fetched and checked on the controller.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..actions import BuildWheelArgs
from ..buildclass import BuiltWheel, ClassBuildFailed, cache_root, wait_for_wheel
from ..build import (build_environment, cmake_defines, config_settings_args, cuda_arch, parse_arch_list,
                     unsupported_archs, wheel_defines)
from ..errors import FleetError
from ..scripts import script_path
from ..status import Status
from .base import TaskContext, TaskResult, first_error_line
from .copy import sha256_file, sha256_of

#: The stamp a build leaves next to its wheel (``<out_dir>/<key16>/``): the task data, inputs included.
STAMP_NAME = ".fleetctl-build.json"

_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")

KILLED = re.compile(r"\bKilled\b|out of memory|Cannot allocate memory|signal 9|std::bad_alloc", re.I)

_PROBE = (
    "import importlib.util, json, sys\n"
    "print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix,"
    " 'missing': [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]}))\n"
)

_TREE_HASH = 'cd "$1" && find . -type f ! -path "./build/*" ! -path "*/__pycache__/*" ! -name "*.pyc" | LC_ALL=C sort | xargs -d "\\n" sha256sum | sha256sum'


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def target_plan(facts: dict[str, Any], args: BuildWheelArgs) -> dict[str, Any]:
    """The build plan from facts, with the task's ``archs``/``max_jobs`` overrides applied."""
    plan = dict(facts.get("build") or {})
    if args.archs:
        archs = parse_arch_list(args.archs.replace("+PTX", ""))
        plan["torch_cuda_arch_list"] = ";".join(archs)
        plan["cuda_architectures"] = ";".join(cuda_arch(a) for a in archs)
    if args.max_jobs:
        plan["max_jobs"] = args.max_jobs
    return plan


def sass_targets(plan: dict[str, Any]) -> list[str]:
    """``["sm_90a", "sm_120a"]`` for ``cuda_architectures`` ``"90a;120a"`` (``-virtual`` entries skipped)."""
    return [f"sm_{a.split('-')[0]}" for a in str(plan.get("cuda_architectures", "")).split(";")
            if a and not a.endswith("-virtual")]


def preflight_problems(facts: dict[str, Any], plan: dict[str, Any], args: BuildWheelArgs, venv: str | None,
                       cuda_home: str | None = None) -> list[str]:
    """Everything that would make the build fail, found from facts alone (pure).

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
        archs = plan.get("torch_cuda_arch_list", "").split(";")
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


def build_argv(tool: str, python: str, uv: str | None, src: str, dest: str, defines: dict[str, str],
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


def build_inputs(tree_hash: str, plan: dict[str, Any], defines: dict[str, str], facts: dict[str, Any],
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


def build_key(material: dict[str, Any]) -> str:
    """SHA-256 (hex) of :func:`build_inputs`; its first 16 digits name folders and cache entries."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


async def run(ctx: TaskContext, args: BuildWheelArgs, *, force: bool = False) -> TaskResult:
    """Preflight, build (or reuse), check SASS. ``data`` holds ``wheel``, ``sha256``, ``archs``, ``max_jobs``."""
    facts = ctx.facts
    plan = target_plan(facts, args)
    venv = ctx.session.venv
    problems = preflight_problems(facts, plan, args, venv, ctx.session.host.cuda_home)
    if problems:
        return TaskResult(Status.FAILED, msg="preflight: " + "; ".join(problems), data={"preflight": problems})
    python = ctx.session.python
    probe = await ctx.run([python, "-c", _PROBE, *args.required_build_packages], quiet=True, mutating=False,
                          timeout_s=120)
    if probe.rc != 0:
        return TaskResult(Status.FAILED, rc=probe.rc, msg=f"preflight: venv python {python} does not run: "
                          f"{first_error_line(probe)}")
    info = json.loads(probe.stdout_text.strip().splitlines()[-1])
    if venv and posixpath.realpath(info["prefix"]) != posixpath.realpath(venv) and info["prefix"] != venv.rstrip("/"):
        return TaskResult(Status.FAILED, msg=f"preflight: {python} runs in {info['prefix']}, not the venv {venv}")
    if args.no_build_isolation and info["missing"]:
        return TaskResult(Status.FAILED, msg=f"preflight: build requirements missing in {venv}: "
                          f"{', '.join(info['missing'])} (pip install them into the venv, or set no_build_isolation: false)")

    tool, uv = ctx.build_tool(args.tool)
    defines = cmake_defines({**facts, "build": plan}, args.cmake_defines)
    tree = await ctx.run(["/bin/sh", "-c", _TREE_HASH, "fleetctl-tree-hash", args.src], quiet=True,
                         mutating=False, timeout_s=300)
    if tree.rc != 0 and not ctx.dry_run:
        return TaskResult(Status.FAILED, rc=tree.rc, msg=f"source tree {args.src}: {first_error_line(tree)}")
    # in a dry run the sources may not be uploaded yet: plan with an unknown tree
    tree_hash = tree.stdout_text.split()[0] if tree.rc == 0 and tree.stdout_text.split() else "not-uploaded-yet"
    inputs = build_inputs(tree_hash, plan, defines, facts, ctx.host)
    key = build_key(inputs)
    dest = posixpath.join(args.out_dir, key[:16])
    stamp = posixpath.join(dest, STAMP_NAME)
    if not force and not ctx.dry_run:
        old = await ctx.run(["cat", stamp], quiet=True, mutating=False)
        if old.rc == 0:
            try:
                data = json.loads(old.stdout_text)
                check = await ctx.run(["test", "-f", data["wheel"]], quiet=True, mutating=False)
                if check.rc == 0:
                    data["reused"] = True
                    await _offer_to_class(ctx, args, key, data)
                    return TaskResult(Status.OK, msg=f"unchanged inputs: reusing {posixpath.basename(data['wheel'])}",
                                      data=data)
            except (ValueError, KeyError):
                pass

    coord = ctx.coordinator if args.build == "once" and not ctx.dry_run else None
    if coord is None:
        return await _build_here(ctx, args, plan, facts, venv, python, uv, tool, defines, key, inputs, dest, stamp)
    try:
        role, built = await wait_for_wheel(coord, key, ctx.host, ctx.session.host.vars.get("build_host"))
    except ClassBuildFailed as exc:
        return TaskResult(Status.FAILED, msg=f"the build of this arch class failed on its builder: {exc}",
                          data={"key": key})
    if role == "push":
        return await _push(ctx, built, dest, stamp, key)
    try:
        res = await _build_here(ctx, args, plan, facts, venv, python, uv, tool, defines, key, inputs, dest, stamp)
    except BaseException as exc:  # unreachable, interrupted: another member takes over the build
        await coord.fail(key, f"{ctx.host}: {exc}", retryable=True)
        raise
    if res.status is Status.FAILED:
        await coord.fail(key, f"{ctx.host}: {res.msg}", retryable=False)
        return res
    try:
        built = await _fetch_to_cache(ctx, res.data["wheel"], res.data["sha256"], key, res.data)
    except FleetError as exc:
        await coord.fail(key, f"{ctx.host}: cannot fetch the wheel: {exc}", retryable=True)
        return TaskResult(Status.FAILED, msg=f"built, but cannot fetch the wheel for the class: {exc}", data=res.data)
    await coord.publish(key, built)
    return res


async def _build_here(ctx: TaskContext, args: BuildWheelArgs, plan: dict[str, Any], facts: dict[str, Any],
                      venv: str | None, python: str, uv: str | None, tool: str, defines: dict[str, str], key: str,
                      inputs: dict[str, Any], dest: str, stamp: str) -> TaskResult:
    """Build on this host, check the SASS, write the stamp."""
    jobs = int(plan.get("max_jobs") or 1)
    await ctx.run(["rm", "-rf", dest])
    await ctx.run(["mkdir", "-p", "-m", "0700", dest])
    for attempt in range(2):
        plan["max_jobs"] = jobs
        env = build_environment({**facts, "build": plan}, venv=venv, overrides=args.env)
        argv = build_argv(tool, python, uv, args.src, dest, defines, args.no_build_isolation)
        ctx.record.event("build.started", host=ctx.host, tool=tool, archs=plan.get("torch_cuda_arch_list"),
                         max_jobs=jobs, attempt=attempt + 1)
        res = await ctx.run(argv, env=env, cwd=args.src)
        if res.rc == 0:
            break
        killed = res.rc == 137 or res.signal == "KILL" or bool(KILLED.search(res.stderr_text[-20000:] + res.stdout_text[-20000:]))
        if killed and jobs > 1 and attempt == 0:
            ctx.record.event("build.oom_retry", host=ctx.host, max_jobs=jobs, next_max_jobs=max(1, jobs // 2))
            jobs = max(1, jobs // 2)
            continue
        why = f"compiler killed (likely out of memory) with MAX_JOBS={jobs}" if killed else first_error_line(res)
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"build failed ({tool}): {why}",
                          data={"max_jobs": jobs, "tool": tool})
    if ctx.dry_run:
        return TaskResult(Status.CHANGED, msg="dry run", data={"wheel": posixpath.join(dest, "<wheel>"), "key": key})

    found = await ctx.run(["find", dest, "-maxdepth", "1", "-name", "*.whl"], quiet=True, mutating=False)
    wheels = sorted(found.stdout_text.split())
    if len(wheels) != 1:
        return TaskResult(Status.FAILED, msg=f"build produced {len(wheels)} wheels in {dest}, expected 1")
    wheel = wheels[0]
    digest = (await ctx.run(["sha256sum", wheel], quiet=True, mutating=False)).stdout_text.split()[0]
    data: dict[str, Any] = {"wheel": wheel, "sha256": digest, "key": key, "tool": tool, "max_jobs": jobs,
                            "archs": plan.get("torch_cuda_arch_list"), "reused": False, "inputs": inputs}
    if args.check_sass and (facts.get("cuda") or {}).get("nvcc"):
        targets = sass_targets(plan)
        found_archs, where, err = await _sass_archs(ctx, wheel, digest)
        data["sass"] = found_archs
        if err:
            return TaskResult(Status.FAILED, msg=f"SASS check: {err}", data=data)
        missing = [t for t in targets if t not in found_archs]
        if missing:
            return TaskResult(Status.FAILED, msg=f"SASS check ({where}): {posixpath.basename(wheel)} lacks "
                              f"{', '.join(missing)} (holds {', '.join(found_archs) or 'no SASS'})", data=data)
    await ctx.put_json(stamp, data)
    return TaskResult(Status.CHANGED, msg=f"built {posixpath.basename(wheel)} for {data['archs']}", data=data)




async def _offer_to_class(ctx: TaskContext, args: BuildWheelArgs, key: str, data: dict[str, Any]) -> None:
    """A member that already holds this class's wheel serves it to the others (no build at all)."""
    coord = ctx.coordinator if args.build == "once" and not ctx.dry_run else None
    if coord is None:
        return
    role, _, _ = await coord.claim(key, ctx.host)
    if role != "build":
        return
    try:
        built = await _fetch_to_cache(ctx, data["wheel"], data["sha256"], key, data)
    except (FleetError, KeyError) as exc:
        await coord.fail(key, f"{ctx.host}: {exc}", retryable=True)
        return
    await coord.publish(key, built)


async def _fetch_to_cache(ctx: TaskContext, wheel: str, digest: str, key: str, data: dict[str, Any]) -> BuiltWheel:
    """Fetch the built wheel into ``~/.cache/fleetctl/wheels/<key>/`` (checked by sha256)."""
    name = posixpath.basename(wheel)
    if not _WHEEL_NAME.match(name):
        raise FleetError(f"refusing to fetch {wheel!r}: not a wheel file name")
    local = cache_root() / key[:16] / name
    if not (local.exists() and sha256_of(local) == digest):
        local.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        await ctx.session.conn.get(wheel, str(local))
        if sha256_of(local) != digest:
            local.unlink(missing_ok=True)
            raise FleetError(f"fetched {name} does not match its sha256 {digest[:12]}")
    return BuiltWheel(local=local, name=name, sha256=digest, builder=ctx.host,
                      data={k: v for k, v in data.items() if k in ("archs", "sass", "key", "inputs", "max_jobs")})


async def _push(ctx: TaskContext, built: BuiltWheel, dest: str, stamp: str, key: str) -> TaskResult:
    """Upload the class's wheel from the controller cache instead of building it here."""
    wheel = posixpath.join(dest, built.name)
    try:
        await ctx.put(str(built.local), wheel, mode=0o644)
    except FleetError as exc:
        return TaskResult(Status.FAILED, msg=f"cannot push {built.name}: {exc}")
    data = {**built.data, "wheel": wheel, "sha256": built.sha256, "key": key, "reused": False,
            "pushed_from": built.builder}
    await ctx.put_json(stamp, data)
    return TaskResult(Status.CHANGED, msg=f"pushed {built.name} (built once for this arch class on {built.builder})",
                      data=data)


async def _sass_archs(ctx: TaskContext, wheel: str, digest: str) -> tuple[list[str], str, str | None]:
    """(archs, where checked, error). On the host with its cuobjdump, else on the controller."""
    local_script = script_path("wheel_sass.py")
    cuobjdump = (ctx.facts.get("cuda") or {}).get("cuobjdump")
    if cuobjdump:
        remote_script = posixpath.join(ctx.session.run_dir, "scripts", "wheel_sass.py")
        await ctx.put(str(local_script), remote_script, mode=0o600)
        res = await ctx.run([ctx.session.python, remote_script, wheel, cuobjdump], quiet=True, mutating=False)
        try:
            out = json.loads(res.stdout_text.strip().splitlines()[-1])
            if not out.get("error"):
                return out["archs"], "on the host", None
        except (ValueError, IndexError):
            pass
    # No usable cuobjdump on the host: fetch the wheel into the controller's content-addressed
    # cache and check it here (the controller can carry PyPI's nvidia-cuda-cuobjdump).
    name = posixpath.basename(wheel)
    if not _WHEEL_NAME.match(name):
        return [], "controller", f"refusing to fetch {wheel!r}: not a wheel file name"
    local = cache_root() / "sass-check" / digest[:16] / name
    if not local.exists():
        try:
            await ctx.session.conn.get(wheel, str(local))
        except FleetError as exc:
            return [], "controller", f"cannot fetch the wheel to check it: {exc}"
    proc = subprocess.run([sys.executable, str(local_script), str(local)], capture_output=True, text=True, timeout=300)
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [], "controller", f"wheel_sass.py failed: {proc.stderr.strip()[-300:]}"
    if out.get("error"):
        return [], "controller", f"no cuobjdump on the host or the controller ({out['error']}); " \
                                 "install nvidia-cuda-cuobjdump from PyPI on the controller"
    return out["archs"], "on the controller", None


def local_tree_hash(files: list[tuple[Path, str]]) -> str:
    """The hash :data:`_TREE_HASH` computes on the host, computed on the controller over the files
    a ``copy`` task uploads (``(local path, relative path)`` pairs): sha256 of ``sha256sum``'s
    output for the paths sorted bytewise (``LC_ALL=C sort``)."""
    lines = []
    for path, rel in sorted(files, key=lambda item: ("./" + item[1]).encode()):
        lines.append(f"{sha256_file(path)}  ./{rel}\n")  # cached: every host hashes the same files
    return hashlib.sha256("".join(lines).encode()).hexdigest()
