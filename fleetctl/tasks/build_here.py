"""``build_wheel`` on the member that builds: run the build, read what it used, check the wheel.

1. A fresh folder for the build key (the wheel and build stamp a folder of the key held are set
   aside, :func:`previous_dir`, and put back when this build fails: they describe the wheel that is
   installed, so a failed ``--force`` build leaves the next plan reusing it, not "its build stamp is
   gone"; removed once this build's stamp is written), a private TMPDIR in the workdir (``<workdir>/tmp/<key16>``:
   nvcc's intermediates, scikit-build-core's build tree and pip's isolated environments live
   there, never in a login TMPDIR that may be noexec, full or small), and fleetctl's build hooks
   (:mod:`~fleetctl.tasks.build_record`) on the build's PYTHONPATH and ``CMAKE_PROJECT_INCLUDE``.
2. Build leftovers in the source tree (``build/``, ``*.egg-info``, ``_skbuild/``, ``.eggs/``,
   ``dist/``) are removed before (a tree a ``copy`` of this run manages never holds any, so they
   are stale) and after the build, whatever its outcome.
3. ``uv build --wheel --python VENV_PYTHON`` (uv on the host) or ``VENV_PYTHON -m pip wheel
   --no-deps``; a compiler killed for memory (exit 137, "Killed") is retried once with half the
   jobs. A failed build's summary is the compiler's own first error, then where the full log is;
   nvcc refusing its host compiler and a write error (quota, full disk, read-only, I/O) are named
   first (:mod:`~fleetctl.tasks.causes`, the same rules as an install's); the build runs under
   :data:`~fleetctl.tasks.build_room.ROOM_SCRIPT`, which measures the workdir's, the TMPDIR's and
   the venv's file systems when it fails, so a full one is named though the compiler said nothing.
4. What the build used (the torch it compiled against, the cmake, the CUDA compiler) is checked
   against what fleetctl asked for: another torch or another compiler fails the task.
5. The wheel's SASS and PTX (``cuobjdump --list-elf`` / ``--list-ptx``) must hold every target
   arch and every ``+PTX`` virtual arch, and run on every GPU of the host; checked with the host's
   cuobjdump, else on the controller (the wheel fetched into the cache).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..build.env import build_environment
from ..connection.base import CommandResult
from ..build.cudacompat import how_covered, uncovered_gpus
from ..build.hostcompiler import chosen_defines, chosen_env, chosen_record
from ..facts.scripts import script_path
from ..status import Status
from .base import HostView, Plan, TaskResult
from .build_keys import STAMP_NAME, build_argv, is_killed, parse_stat, ptx_targets, sass_targets, wheel_sass_local
from .build_meta import BuildMeta
from .build_preflight import CLEAN_PYTHON_ENV, missing_tools
from .causes import cause_line
from .venv_probe import PIP_INSTALL_ENV
from .venv_modes import in_venv_modes
from .build_room import wrap as room_wrap
from .build_record import HOOK_FILES, RECORD_NAME, compiler_mismatch, parse_record, torch_drift
from .pytool import index_tool, pick_tool
from .steps import Emit, Fail, Get, Local, Note, Publish, Put, PutFiles, Run, probe

#: Prints the build leftovers present in the tree ``$1`` (one name a line).
LIST_LEFTOVERS = ('cd "$1" 2>/dev/null || exit 0; for p in build _skbuild .eggs dist *.egg-info; do '
                  '[ -e "$p" ] && echo "$p"; done; true')
#: Removes the build leftovers in ``$1`` except those named in ``$2...`` (present before the build).
CLEAN_LEFTOVERS = ('cd "$1" 2>/dev/null || exit 0; shift; for p in build _skbuild .eggs dist *.egg-info; do '
                   '[ -e "$p" ] || continue; keep=; for k in "$@"; do [ "$k" = "$p" ] && keep=1; done; '
                   '[ -n "$keep" ] || { rm -rf -- "$p" && echo "fleetctl: removed $p from the source tree"; }; done; true')

#: Per wheel in ``$1``: ``<size> <mtime> <sha256>  <path>`` (bytes, whole seconds; ``- -`` when
#: ``stat`` cannot say), the first three of what its build stamp records.
LIST_WHEELS = ('for f in "$1"/*.whl; do [ -f "$f" ] || continue; s=$(stat -L -c "%s %Y" "$f" 2>/dev/null) || s="- -"; '
               'h=$(sha256sum "$f") && echo "$s $h"; done; true')


#: Written into a build's folder when what the build wrote failed its checks (its rc, what it used,
#: its SASS): that wheel is never kept as an interrupted build's (:func:`left_wheel`).
REFUSED_NAME = ".fleetctl-refused"

#: ``sh -c SET_ASIDE _ DEST PREVIOUS``: a build key's folder that holds a build stamp is moved to
#: PREVIOUS (outside ``out_dir``: no stamp probe sees it), any other is removed (a PREVIOUS an
#: interrupted build left is kept: it is still the installed wheel's).
SET_ASIDE = (f'if [ -f "$1/{STAMP_NAME}" ] && [ ! -e "$1/{REFUSED_NAME}" ]; then rm -rf "$2" && mkdir -p "${{2%/*}}" '
             '&& mv "$1" "$2"; else rm -rf "$1"; fi')
#: ``sh -c PUT_BACK _ DEST PREVIOUS``: the folder set aside back in place of a failed build's.
PUT_BACK = 'if [ -d "$2" ]; then rm -rf "$1" && mv "$2" "$1"; fi'


def previous_dir(tmp: str) -> str:
    """Where the wheel and stamp of a build key's folder wait while it is built again, beside the
    build's TMPDIR ``tmp`` (``<workdir>/tmp/<key16>``): ``<workdir>/tmp/<key16>.previous``."""
    return f"{tmp.rstrip('/')}.previous"

#: Prints the one wheel in the build folder ``argv[1]`` that a build left with neither its stamp
#: ``argv[2]`` nor the refusal ``argv[3]``, when it is a whole zip (every CRC) holding a RECORD.
LEFT_WHEEL = """import glob, os, sys, zipfile
d = sys.argv[1]
found = glob.glob(os.path.join(glob.escape(d), "*.whl"))
if not any(os.path.lexists(os.path.join(d, n)) for n in sys.argv[2:4]) and len(found) == 1:
    try:
        with zipfile.ZipFile(found[0]) as z:
            if z.testzip() is None and any(n.endswith(".dist-info/RECORD") for n in z.namelist()):
                print(found[0])
    except (OSError, zipfile.BadZipFile, EOFError):
        pass
"""


def left_wheel(host: HostView, dest: str) -> Plan:
    """The wheel a build of these very inputs left in its folder ``dest`` without its stamp, whole
    (every member's CRC, a RECORD): the connection dropped after the build and before its checks
    and stamp (a fresh operator's trial: the next deploy built it all again). ``dest`` is named by
    the build key and made afresh before each build, and pip and uv write the wheel there only once
    the build succeeded; a wheel that failed its checks is marked :data:`REFUSED_NAME`. ``None``
    when there is none; the builder then checks it as a fresh build's wheel is checked (:func:`build_here`
    with ``left``: the build's record, the SASS; what only the build's output told is gone) instead of
    building."""
    res = yield probe([host.python, "-c", LEFT_WHEEL, dest, STAMP_NAME, REFUSED_NAME],
                      "a wheel an interrupted build left, without its stamp")
    lines = res.stdout_text.strip().splitlines() if res.rc == 0 else []
    return lines[-1] if lines and lines[-1].startswith(dest.rstrip("/") + "/") else None


def stamp_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """The build stamp a build's result data is written as (everything but ``--plan``'s ``decision``)."""
    return {k: v for k, v in data.items() if k != "decision"}


def stamp_bytes(data: Mapping[str, Any]) -> bytes:
    return json.dumps(stamp_of(data), sort_keys=True).encode()


def _build_env(args: Any, host: HostView, facts: Mapping[str, Any], target: Mapping[str, Any], jobs: int, tmp: str,
               hook_dir: str, record: str, constraint: str | None) -> dict[str, str | None]:
    env: dict[str, str | None] = {**CLEAN_PYTHON_ENV}
    env.update(build_environment({**facts, "build": {**target, "max_jobs": jobs}}, venv=host.venv))
    env.update({"TMPDIR": tmp, "PYTHONPATH": hook_dir, "FLEETCTL_BUILD_RECORD": record})
    env.update(chosen_env(facts))  # the host compiler nvcc accepts, when fleetctl chose one
    if constraint:
        env.update({"PIP_BUILD_CONSTRAINT": constraint, "PIP_CONSTRAINT": constraint, "UV_BUILD_CONSTRAINT": constraint})
    env.update({k: v for k, v in (args.env or {}).items()})
    return env


def build_here(args: Any, host: HostView, facts: Mapping[str, Any], target: Mapping[str, Any], inputs: dict[str, Any],
               key: str, dest: str, defines: dict[str, str], decision: dict[str, Any], once: bool, meta: BuildMeta,
               info: Mapping[str, Any], left: str | None = None) -> Plan:
    """Build on this host, check what it used and the wheel, write the stamp, publish to the class.
    ``left``: the wheel an interrupted build of these inputs left (:func:`left_wheel`): not built
    again, checked from its build's record on as a fresh build's wheel is."""
    tool = pick_tool(args.tool, facts, host.venv, host.python)[0]  # a missing tool failed the preflight
    jobs = int(target.get("max_jobs") or 1)
    logs = f"full log: fleetctl logs {posixpath.basename(host.run_dir)} {host.name}"
    src = args.src.rstrip("/") or "/"
    tmp = posixpath.join(host.workdir, "tmp", key[:16])
    record_path = posixpath.join(dest, RECORD_NAME)
    cuda = facts.get("cuda") or {}
    py = facts.get("python") or {}

    def fail(msg: str, data: dict[str, Any] | None = None, rc: int | None = None, refused: bool = False) -> Plan:
        if refused:  # what the build wrote failed its checks: never kept as an interrupted build's wheel
            yield Run(argv=("touch", posixpath.join(dest, REFUSED_NAME)), quiet=True, reason="the wheel is refused")
        yield Run(argv=("/bin/sh", "-c", PUT_BACK, "fleetctl-put-back", dest, previous_dir(tmp)),
                  quiet=True, reason="the wheel and build stamp this build was to replace, back in place")
        if once:
            yield Fail(key=key, message=f"{host.name}: {msg}")
        return TaskResult(Status.FAILED, rc=rc, msg=msg, data={**(data or {}), "decision": decision})

    res = CommandResult(argv=[], rc=0)  # an interrupted build's wheel (left): its build's rc was 0
    if left is None:
        built = yield from _build(args, host, facts, target, dest, tmp, defines, meta, info, jobs, fail)
        if isinstance(built, TaskResult):
            return built
        res, jobs, keep = built
    else:
        keep = yield from _kept_leftovers(host, src)
    yield Run(argv=("/bin/sh", "-c", CLEAN_LEFTOVERS, "fleetctl-clean", src, *keep), quiet=True,
              reason="leave no build leftovers in the source tree")
    yield Run(argv=("rm", "-rf", tmp), quiet=True, reason="the build's TMPDIR")
    rec = yield Run(argv=("/bin/sh", "-c", 'cat "$1" 2>/dev/null; true', "fleetctl-record", record_path),
                    mutating=False, after_change=True, quiet=True, reason="what the build used (its record)")
    record = parse_record(rec.stdout_text, res.stdout_text + "\n" + res.stderr_text)
    data: dict[str, Any] = {"max_jobs": jobs, "tool": tool, "key": key, "build_record": record,
                            "tmpdir": tmp, "build_meta": meta.as_dict(), "host_compiler": chosen_record(facts)}
    mismatch = compiler_mismatch(record, cuda)
    if res.rc != 0:
        room = {"workdir": host.workdir, "TMPDIR": tmp, "venv": host.venv or ""}
        why = mismatch or cause_line(res, tmp, facts=facts, max_jobs=jobs, room=room)  # the compiler's line, or a cause
        return (yield from fail(f"build failed ({tool}): {why} ({logs})", data, rc=res.rc, refused=True))
    drift = torch_drift(record, py)
    if mismatch or drift:
        return (yield from fail("; ".join(m for m in (mismatch, drift) if m) + f" ({logs})", data, refused=True))

    wheel_name = "<built wheel>"
    found = yield Run(argv=("/bin/sh", "-c", LIST_WHEELS, "fleetctl-wheels", dest), mutating=False, after_change=True,
                      quiet=True, assume=CommandResult(argv=[], rc=0,
                                                       stdout=f"- - -  {posixpath.join(dest, wheel_name)}\n".encode()),
                      reason="the wheel the build wrote")
    wheels = [ln.split("  ", 1) for ln in found.stdout_text.splitlines() if "  " in ln]
    if len(wheels) != 1:
        return (yield from fail(f"build produced {len(wheels)} wheels in {dest}, expected 1", data))
    head, wheel = wheels[0][0].split(), wheels[0][1]
    digest = None if not head or head[-1] == "-" else head[-1]
    size, mtime = parse_stat(" ".join(head[:-1]))
    # the stamp's size and mtime are the wheel's as written: the next run stats it against them
    data.update({"wheel": wheel, "sha256": digest, "size_bytes": size, "mtime_s": mtime,
                 "archs": target.get("torch_cuda_arch_list"), "reused": False, "inputs": inputs})
    checked = ""  # said on the task's line: a package's own "cuobjdump not found: SASS check SKIPPED" is not the last word
    if args.check_sass and cuda.get("nvcc"):
        targets, ptx_wanted = sass_targets(target), ptx_targets(target)
        archs, ptx, where, err = yield from _sass_archs(host, wheel, digest, targets, ptx_wanted)
        data.update(sass=archs, ptx=ptx)
        missing = [t for t in targets if t not in archs]
        missing_ptx = [p for p in ptx_wanted if p not in ptx]
        uncovered = uncovered_gpus(facts.get("gpus") or [], archs, ptx)
        name = posixpath.basename(wheel)
        msg = (f"SASS check: {err}" if err else
               f"SASS check ({where}): {name} lacks {', '.join(missing)} (holds {', '.join(archs) or 'no SASS'})"
               if missing else
               f"PTX check ({where}): {name} lacks the {', '.join(missing_ptx)} PTX that +PTX asked for (holds "
               f"{', '.join(ptx) or 'no PTX'}): the build dropped it" if missing_ptx else
               f"SASS check ({where}): {name} runs on none of {', '.join(uncovered)} (holds {', '.join(archs)}"
               f"{'; PTX ' + ', '.join(ptx) if ptx else ''})" if uncovered else "")
        if msg:
            return (yield from fail(msg, data, refused=True))
        checked = f"; SASS {', '.join(archs) or 'none'} checked {where}"
        data["coverage"] = {f"GPU {g.get('index', i)} ({g.get('name')}, {g.get('compute_cap')})":
                            how_covered(str(g.get("compute_cap")), archs, ptx)
                            for i, g in enumerate(facts.get("gpus") or []) if g.get("compute_cap")}
    err = yield Put(data=stamp_bytes(data), remote=posixpath.join(dest, STAMP_NAME), mode=0o600, reason="the build stamp")
    if err is not None:
        return TaskResult(Status.FAILED, msg=f"cannot write the build stamp: {err}", data={**data, "decision": decision})
    yield Run(argv=("rm", "-rf", previous_dir(tmp)), quiet=True, reason="the replaced wheel and stamp")
    if once:
        err = yield Publish(key=key, wheel=wheel, sha256=digest or "", data=data,
                            reason="fetch the wheel into the controller's cache for the rest of the class")
        if err is not None:
            return TaskResult(Status.FAILED, msg=f"built, but cannot fetch the wheel for the class: {err}",
                              data={**data, "decision": decision})
    forced = " (forced: --force, no earlier wheel reused)" if decision.get("forced") else ""
    stale = f" (rebuilt: {decision['stale_wheel']})" if decision.get("stale_wheel") else ""
    if left is not None:
        return TaskResult(Status.CHANGED, msg=f"kept {posixpath.basename(wheel)} for {data['archs']}: an interrupted "
                                              f"run built it (its connection dropped before the wheel was checked); "
                                              f"checked and stamped now, not built again{checked}",
                          data={**data, "kept_after_interrupt": True, "decision": decision}, files={wheel: digest},
                          stamps={wheel: stamp_of(data)})
    return TaskResult(Status.CHANGED, msg=f"built {posixpath.basename(wheel)} for {data['archs']}{forced}{stale}{checked}",
                      data={**data, "decision": decision}, files={wheel: digest}, stamps={wheel: stamp_of(data)})


def _build(args: Any, host: HostView, facts: Mapping[str, Any], target: Mapping[str, Any], dest: str, tmp: str,
           defines: dict[str, str], meta: BuildMeta, info: Mapping[str, Any], jobs: int, fail: Any) -> Plan:
    """The build itself (steps 1 to 3 of the module docstring): ``(its result, the jobs it ran
    with, the leftovers to keep)``, or the failed task's result when it could not start."""
    tool, uv, _ = pick_tool(args.tool, facts, host.venv, host.python)
    src = args.src.rstrip("/") or "/"
    record_path = posixpath.join(dest, RECORD_NAME)
    hook_dir = posixpath.join(host.run_dir, "scripts", "build_hook")
    cuda = facts.get("cuda") or {}
    isolated = not args.no_build_isolation
    py = facts.get("python") or {}
    yield Run(argv=("/bin/sh", "-c", SET_ASIDE, "fleetctl-set-aside", dest, previous_dir(tmp)), quiet=True,
              reason="the wheel and build stamp of this key set aside until this build succeeds")
    yield Run(argv=("rm", "-rf", dest, tmp), quiet=True, reason="a fresh folder and TMPDIR for this build key")
    yield Run(argv=("mkdir", "-p", "-m", "0700", dest, tmp), quiet=True)
    hooks = tuple((str(script_path(local)), posixpath.join(hook_dir, name), 0o644) for local, name in HOOK_FILES.items())
    errors = yield PutFiles(files=hooks, reason="fleetctl's build hooks (what the build used, read inside it)")
    if any(e is not None for e in errors or []):
        return (yield from fail(f"cannot upload the build hooks: {next(e for e in errors if e is not None)}"))
    keep = yield from _kept_leftovers(host, src)
    yield Run(argv=("/bin/sh", "-c", CLEAN_LEFTOVERS, "fleetctl-clean", src, *keep), quiet=True,
              reason="no stale build leftovers in the source tree")
    tools = missing_tools(info, facts, host.venv)
    if tools and args.install_build_requirements:
        installer = index_tool(args.tool, tool, facts)  # from the index: the venv's pip reads pip.conf
        install = ((uv, "pip", "install", "--python", host.python) if installer == "uv" and uv
                   else (host.python, "-m", "pip", "install", "--no-input"))
        res = yield Run(argv=tuple(in_venv_modes(host.python, (*install, *tools))), env=PIP_INSTALL_ENV, cwd="/",
                        reason=f"install the missing build requirements {', '.join(tools)} ({installer})")
        if res.rc != 0:
            return (yield from fail(f"installing the build requirements {' '.join(tools)} failed ({installer}): "
                                    f"{cause_line(res, host.venv)}"))
    constraint = None
    if isolated and py.get("torch"):
        constraint = posixpath.join(dest, "build-constraints.txt")
        err = yield Put(data=f"torch=={py['torch']}\n".encode(), remote=constraint, mode=0o600,
                        reason="an isolated build gets the venv's torch or fails to resolve, never another")
        if err is not None:
            return (yield from fail(f"cannot write the build constraints: {err}"))
    hook_defines = {}
    if (meta.cmake or not meta.found) and "CMAKE_PROJECT_INCLUDE" not in defines:
        hook_defines = {"CMAKE_PROJECT_INCLUDE": posixpath.join(hook_dir, "fleetctl_record.cmake")}
        if cuda.get("nvcc"):
            hook_defines["FLEETCTL_EXPECT_CUDA_COMPILER"] = cuda["nvcc"]
    argv_defines = {**defines, **chosen_defines(facts), **hook_defines} if (meta.cmake or not meta.found) else {}
    res = CommandResult(argv=[], rc=None)
    for attempt in range(2):
        env = _build_env(args, host, facts, target, jobs, tmp, hook_dir, record_path, constraint)
        argv = room_wrap(build_argv(tool, host.python, uv, src, dest, argv_defines, args.no_build_isolation),
                         host.workdir, tmp, host.venv)  # a failed build says how full its file systems are
        yield Emit(name="build.started", data={"tool": tool, "archs": target.get("torch_cuda_arch_list"),
                                               "max_jobs": jobs, "attempt": attempt + 1})
        res = yield Run(argv=tuple(argv), env=env, cwd=src,
                        reason=f"build for {target.get('torch_cuda_arch_list')} with MAX_JOBS={jobs}")
        if res.rc == 0 or not (is_killed(res) and jobs > 1 and attempt == 0):
            break
        yield Emit(name="build.oom_retry", data={"max_jobs": jobs, "next_max_jobs": max(1, jobs // 2)})
        jobs = max(1, jobs // 2)
    return res, jobs, keep


def _kept_leftovers(host: HostView, src: str) -> Plan:
    """The build leftovers already in ``src`` that are not ours to remove: none in a tree a
    ``copy`` of this run manages, else those there before the build."""
    if src in host.trees:
        return []
    res = yield probe(["/bin/sh", "-c", LIST_LEFTOVERS, "fleetctl-leftovers", src], "build leftovers already there")
    return res.stdout_text.split()


def _sass_archs(host: HostView, wheel: str, digest: str | None, targets: list[str], ptx: list[str]):
    """``(sass, ptx, where, error)``: on the host with its cuobjdump, else on the controller."""
    local_script = script_path("wheel_sass.py")
    assume = {"archs": targets, "ptx": ptx, "error": None}
    cuobjdump = (host.facts.get("cuda") or {}).get("cuobjdump")
    if cuobjdump:
        remote_script = host.remote_script("wheel_sass.py")
        yield Put(local=str(local_script), remote=remote_script, mode=0o600, reason="the SASS check script")
        res = yield Run(argv=(host.python, remote_script, wheel, cuobjdump), mutating=False, after_change=True,
                        quiet=True, assume=CommandResult(argv=[], rc=0, stdout=json.dumps(assume).encode()),
                        reason="list the SASS and PTX in the wheel (cuobjdump --list-elf, --list-ptx)")
        try:
            out = json.loads(res.stdout_text.strip().splitlines()[-1])
            if not out.get("error"):
                return out["archs"], out.get("ptx") or [], "on the host", None
        except (ValueError, IndexError):
            pass
    import tempfile

    from ..errors import ControllerWriteError
    from ..util.paths import cache_dir, safe_name

    name = posixpath.basename(wheel)
    local = cache_dir() / "sass-check" / (digest or "unknown")[:16] / name
    err = yield Get(remote=wheel, local=str(local), after_change=True, reason="check the SASS on the controller")
    scratch = isinstance(err, ControllerWriteError)
    if scratch:  # the cache is an optimisation: a finished build is never lost to it
        yield Note(message=f"warning: {err}; the wheel is checked from a temporary copy, removed after the check")
        local = (Path(tempfile.gettempdir()) / f"fleetctl-sass-{safe_name(host.name)}-{(digest or 'unknown')[:16]}"
                 / name)
        err = yield Get(remote=wheel, local=str(local), after_change=True, reason="check the SASS on the controller")
    if err is not None:
        return [], [], "on the controller", f"cannot fetch the wheel to check it: {err}"
    out = yield Local(fn=wheel_sass_local, args=(str(local_script), str(local), scratch), after_change=True,
                      assume=assume, reason="cuobjdump on the controller")
    if isinstance(out, BaseException):
        return [], [], "on the controller", str(out)
    if out.get("error"):
        return [], [], "on the controller", (f"no cuobjdump on the host or the controller ({out['error']}); "
                                             "install nvidia-cuda-cuobjdump from PyPI on the controller")
    return out["archs"], out.get("ptx") or [], "on the controller", None
