"""``build_wheel``: build a source tree on the host into a wheel for exactly the host's SM.

The environment is derived from facts and set explicitly (CUDA_HOME, CUDACXX, PATH, VIRTUAL_ENV,
TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES, MAX_JOBS, CMAKE_POLICY_VERSION_MINIMUM, TMPDIR...;
:func:`fleetctl.build.env.build_environment`) so nothing depends on what the login shell happens to
set. The planner:

1. picks the toolkit (the newest of the host's toolkits that compiles the arch list, unless the
   ``cuda_home`` host var pins one) and the host compiler that toolkit's nvcc accepts
   (:mod:`~fleetctl.tasks.build_toolchain`), and runs the preflight (:mod:`~fleetctl.tasks.build_preflight`)
   from facts (driver vs toolkit, GPUs the archs would not cover: every host; archs nvcc rejects,
   memory, the workdir's file system, the host compiler: only a host that compiles, so one that
   reuses or receives its class's wheel is not refused for them) and from the tree, read once
   (:func:`~fleetctl.tasks.build_preflight.source_checks`: its own ``pyproject.toml``/``setup.py``,
   :mod:`~fleetctl.tasks.build_meta`, and what its CMake files fetch, :mod:`~fleetctl.tasks.build_deps`);
2. the build key (:func:`fleetctl.tasks.build_keys.build_key`: source tree, archs, defines,
   toolchain, torch, Python tag) and the host's stamps: a wheel for exactly these inputs is reused
   while it is the wheel its stamp describes (its size and mtime, else its sha256:
   :func:`~fleetctl.tasks.build_keys.stale_stamp`; one that is not is built or received again);
   a host without one is checked further by one probe of the venv's python (its build
   requirements, what torch's ``cpp_extension`` makes of each arch token) and an allocation of the
   space the build needs; every problem fails the task before anything is uploaded or compiled,
   in ``--plan`` too (a host that reuses its wheel builds nothing, so it is not asked: issue 27);
3. the arch class's role (:class:`~fleetctl.tasks.steps.ClassRole`): build here, receive the
   class's wheel (push), or hand the wheel this host already holds to the others (serve);
4. builds here (:mod:`~fleetctl.tasks.build_here`): records what the build used, read inside it
   (torch, cmake, the CUDA compiler), and checks the wheel's SASS and PTX.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

import re
from ..facts.workdir import BUILD_MIN_FREE_DISK_MIB
from ..build.env import cmake_defines
from ..build.cudacompat import parse_tokens, torch_arch_of, with_toolkit_for
from ..errors import ClassWheelUnstored, TransferError
from ..status import Status
from ..build.wheeltags import PlatformMismatch, platform_label
from .argtypes import ActionArgs, ARCH_TOKEN, CMAKE_NAME, VERSION_RE, env_mapping, is_template, non_empty, scalar_to_str
from .base import Action, HostView, Plan, TaskResult, first_error_line
from .build_deps import reach_deps, ship_deps, tree_with
from .build_here import build_here, left_wheel, stamp_bytes, stamp_of
from .build_keys import (STAMP_NAME, STAT_ARGV, build_inputs, build_key, changed_inputs, parse_stamps, parse_stat,
                         plan_tokens, stale_stamp, stamps_probe, target_plan, venv_install_mark, sass_targets)
from .build_preflight import compile_problems, facts_problems, failed, receiver_space, refuse, source_checks, venv_checks
from .build_toolchain import host_compiler_preflight
from .copy import REMOTE_TREE_HASH
from .install_target import shared_message, target_ids, unreadable_target
from .pytool import pick_tool
from .steps import ClassRole, Emit, Fail, Fetch, Note, Publish, Put, Run, TargetClaim, Unreached, probe

#: The tree hash's exit status when its folder is not there (sysexits.h EX_NOINPUT), told apart
#: from a hash that failed: checked in the same command, so nothing is printed into the log.
MISSING_TREE_RC = 66
_MISSING_TREE = f'[ -d "$1" ] || exit {MISSING_TREE_RC}; '


class BuildWheelArgs(ActionArgs):
    """``build_wheel``: build a wheel from a remote source tree for the host's own SM.

    Attributes:
        src: remote source folder (holds ``pyproject.toml``).
        out_dir: remote folder the wheel is written to (one sub-folder per build key).
        no_build_isolation: build in the venv itself, against its torch (the default). ``False``
            lets the front end make an isolated environment from the package's ``[build-system]
            requires``; a torch there is pinned to the venv's version (build constraints), and a
            torch extension whose requires lack torch is refused (it could not import torch).
        cmake_defines: extra ``-D`` defines, NAME -> value; YAML booleans become ``ON``/``OFF``.
        env: environment overrides for the build (over the computed CUDA/venv environment).
        max_jobs: parallel compile jobs; ``None`` derives it from the host's cores and memory.
        archs: arch list override in ``TORCH_CUDA_ARCH_LIST`` form (``"9.0a;12.0a"``); ``None``
            means the host's own GPUs.
        required_build_packages: extra import names that must be importable in the venv; the
            package's own ``[build-system] requires`` (from its ``pyproject.toml``) are always
            checked, and for a torch extension setuptools, wheel, ninja and packaging too.
        install_build_requirements: install missing build requirements (never torch) into the venv
            before building, instead of failing the preflight.
        min_cmake: lowest CMake version accepted (a string: ``"3.28"``) when it is newer than the
            tree's own floor (its ``CMakeLists.txt`` ``cmake_minimum_required``, its
            ``[tool.scikit-build] cmake.version``); not set: the tree's floor alone. Checked only on a
            host that compiles.
        min_free_disk_mib: free disk space (MiB) required in the workdir's file system (the build's
            TMPDIR is there too): checked against ``statvfs`` and then really allocated (a probe
            file, removed at once) where the build writes, so a quota ``statvfs`` does not show
            fails the preflight too (:mod:`~fleetctl.tasks.build_space`); ``0`` checks nothing.
            A host short of it may still receive its arch class's wheel from the member that builds.
        receiver_min_free_disk_mib: free disk space (MiB) a host that only receives its arch
            class's wheel (``push``) needs where the wheel lands and pip unpacks it, checked the same
            way; not set: the smaller of 512 (about three times a 170 MiB wheel) and
            ``min_free_disk_mib``.
        min_free_mem_mib: memory (MiB) the build must have, after the cgroup's limit and usage;
            checked only on a host that compiles (one that reuses or receives a wheel is not refused).
        check_sass: after the build, require every target arch in the built extension's SASS, every
            ``+PTX`` arch's PTX, and code that runs on every GPU of the host.
        tool: ``"uv"``, ``"pip"``, or ``"auto"``: uv when the host has it, except that the missing
            build requirements (read from the index) are installed by the venv's pip when it has pip,
            which honours the site's pip.conf (:func:`fleetctl.tasks.pytool.index_tool`).
        build: ``"once"`` builds one wheel per arch class (hosts that would build the same
            wheel) on one member and pushes it to the others; ``"each"`` builds on every host.
        fetch_mirror: a folder of git repositories or a git URL prefix the controller reaches:
            every ``FetchContent`` dependency and git submodule of the tree comes from there at its
            pinned commit and the build runs disconnected (:mod:`~fleetctl.tasks.build_deps`);
            ``""``: CMake downloads them itself.
    """

    src: str
    out_dir: str
    no_build_isolation: bool = True
    cmake_defines: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    max_jobs: int | None = Field(default=None, ge=1)
    archs: str | None = None
    required_build_packages: list[str] = Field(default_factory=list)
    install_build_requirements: bool = False
    min_cmake: str | None = None
    min_free_disk_mib: int = Field(default=BUILD_MIN_FREE_DISK_MIB, ge=0)
    receiver_min_free_disk_mib: int | None = Field(default=None, ge=0)
    min_free_mem_mib: int = Field(default=1024, ge=0)
    check_sass: bool = True
    tool: Literal["auto", "uv", "pip"] = "auto"
    build: Literal["once", "each"] = "once"
    fetch_mirror: str = ""

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
                fixed = [p if ARCH_TOKEN.match(p) else torch_arch_of(p) for p in parts]
                hint = f"; did you mean '{';'.join(fixed)}'?" if parts and all(fixed) else ""
                raise ValueError(f"archs must look like '9.0a;12.0a' (compute capabilities with an optional a/f "
                                 f"suffix, ';'-separated), got {v!r}{hint}")
            parse_tokens(v)  # ValueError: a suffix that SM lacks ('8.0a')
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


def plan(args: BuildWheelArgs, host: HostView) -> Plan:
    """Preflight, decide (reuse / build / push / serve), then build or receive the class's wheel."""
    target = target_plan(host.facts, args)
    tokens = plan_tokens(target)
    facts, switched = with_toolkit_for(host.facts, tokens, pinned=bool(host.cuda_home))
    decision: dict[str, Any] = {"archs": target.get("torch_cuda_arch_list"), "platform": platform_label(host.facts)}
    if switched:  # the task's archs need another of the host's toolkits than facts chose
        decision["toolkit"] = switched
    unreadable = unreadable_target(host.facts)  # who shares the venv or workdir cannot be told
    if unreadable:
        return refuse([unreadable], decision, facts_only=True)
    ids = target_ids(host.facts)
    # the build writes the workdir (and the venv when it installs build requirements); a later
    # pip_install of any host writes the venv: known when the batch's claims are settled
    writes = ("workdir", "venv") if args.install_build_requirements else ("workdir",)
    shared = (yield TargetClaim(ids=ids, archs=target.get("torch_cuda_arch_list"), writes=writes,
                                reason="does another host build or install in these folders?")) if ids else ()
    if shared:
        return refuse([shared_message(host.name, shared)], decision, facts_only=True, shared=[list(s) for s in shared])
    facts, cxx_problems, cxx_note = host_compiler_preflight(facts, args)
    if cxx_note:  # nvcc refuses its default host compiler: another one the host has is used
        decision["host_compiler"] = cxx_note
    problems = facts_problems(facts, tokens, args, host.venv, host.cuda_home, host.cuda_home_origin)
    # what only a compile needs: a host that reuses or receives its class's wheel is not refused for it
    no_compile = compile_problems(facts, tokens, args) + cxx_problems
    tool_problem = pick_tool(args.tool, facts, host.venv, host.python)[2] if host.venv else None
    problems += [tool_problem] if tool_problem else []
    if problems:
        return refuse(problems, decision, facts_only=True)
    src = args.src.rstrip("/") or "/"
    meta, deps, refused = yield from source_checks(args, host, src, decision)
    if refused is not None:
        return refused
    defines = cmake_defines({**facts, "build": target}, {**args.cmake_defines, **deps.defines})
    tree = host.trees.get(src)
    if tree is None:
        res = yield probe(["/bin/sh", "-c", _MISSING_TREE + REMOTE_TREE_HASH, "fleetctl-tree-hash", src],
                          f"hash the sources in {src}", timeout_s=300)
        if res.rc == MISSING_TREE_RC:
            return failed(f"source tree {src} is not a folder on the host (build_wheel src): nothing to build", decision)
        if res.rc != 0 or not res.stdout_text.split():
            return failed(f"source tree {src}: {first_error_line(res)}", decision)
        tree = res.stdout_text.split()[0]
    inputs = build_inputs(tree_with(tree, deps.tree_extra), target, defines, facts, host.name)
    key = build_key(inputs)
    dest = posixpath.join(args.out_dir, key[:16])
    stamp_path = posixpath.join(dest, STAMP_NAME)
    listing = yield stamps_probe(args.out_dir, posixpath.join(host.workdir, "installed"), host.venv)
    stamps, installed, seen = parse_stamps(listing.stdout_text)
    mine = next((s for s in stamps if s.get("key") == key), None)
    if mine is not None and not host.force:  # a stamp is trusted for the wheel it describes only
        stale = yield from stale_stamp(mine, seen.get(str(mine.get("wheel"))), stamp_path)
        if stale:
            decision["stale_wheel"] = stale
            yield Note(message=f"{stale}: not reused (built again, or its arch class's wheel received)")
            mine = None
    if not installed:  # no record in this host's workdir: the venv's own mark says what it holds
        installed = [m for m in [venv_install_mark(host.facts)] if m is not None]
    installed_shas = {i.get("sha256") for i in installed}
    # the changed inputs, after what makes the wheel this host holds unusable (--plan's cause column)
    decision.update(key=key[:16], installed=bool(mine and mine.get("sha256") in installed_shas),
                    changed=([decision["stale_wheel"]] if decision.get("stale_wheel") else [])
                    + changed_inputs(inputs, stamps, installed_shas, installed))
    # --force: no wheel built before this run is reused, neither this host's (its stamp) nor the
    # controller's cache: the class's builder builds, the new wheel replaces the cached one
    holds = bool(mine) and not host.force
    info = cannot_build = None
    if not holds and no_compile:  # it cannot compile (facts say so): its venv is not asked what a build needs
        cannot_build = refuse(no_compile, decision, facts_only=True)
    elif not holds:  # a host holding the wheel of these inputs reuses or serves it (ClassRole): no build to check
        info, cannot_build = yield from venv_checks(args, host, facts, tokens, meta, decision)
        if cannot_build is not None and info is None:  # its venv does not run: broken whatever its role
            return cannot_build
    once = args.build == "once" and not host.build_each
    if host.force:
        decision["forced"] = True
    if cannot_build is not None and once:  # a member that can build builds; this host may receive the wheel
        decision["cannot_build"] = cannot_build.msg
    role = yield ClassRole(key=key, holds=holds, once=once, force=host.force, can_build=cannot_build is None,
                           origin=(mine.get("pushed_from") or host.name) if holds else None,
                           reason="who builds this arch class")
    if role in ("reuse", "serve"):
        # the stamp's pushed_from says where the wheel came from in the run that pushed it; in this
        # run nothing is pushed: every report says "reused", over SSH or Slurm alike
        data = {**{k: v for k, v in mine.items() if k != "pushed_from"}, "reused": True,
                "decision": {**decision, "action": role}}
        if mine.get("pushed_from"):
            data["wheel_from"] = mine["pushed_from"]
        if role == "serve":
            err = yield Publish(key=key, wheel=mine["wheel"], sha256=mine["sha256"], data=mine,
                                reason="hand this host's wheel to the rest of its arch class")
            if err is not None:
                yield Emit(name="class.serve_failed", data={"key": key[:16], "error": str(err)})
        return TaskResult(Status.OK, msg=f"unchanged inputs: reusing {posixpath.basename(mine['wheel'])}", data=data,
                          files={mine["wheel"]: mine["sha256"]}, stamps={mine["wheel"]: dict(mine)})
    took_over = False  # this host builds because the class's builder was lost
    asked = False
    if role == "build" and cannot_build is None and once:  # only the builder downloads (no fetch_mirror)
        asked, lost = True, (yield from reach_deps(deps, host, key))
        if lost:  # another member may build: this host receives its wheel ("push"), else it fails ("build")
            role = yield Unreached(key=key, message=lost, reason="the builder cannot reach what CMake downloads")
            cannot_build = refuse([lost], decision) if role == "build" else None
    if role == "push":
        # a host that could build had room for the build; one that cannot (short of that room, or
        # of build requirements) is checked for what receiving takes (new-user trial: a receiver
        # was refused for lacking the build's 2048 MiB)
        problems = yield from receiver_space(args, host, facts, build_checked=cannot_build is None)
        if problems:
            return with_class(refuse(problems, decision, role="push"), key, inputs, target)
        got = yield Fetch(key=key, dest=dest, platform=(facts.get("python") or {}).get("platform"),
                          reason="one member of the arch class builds; this host receives it")
        if got == "build":  # the builder became unreachable: this host builds instead
            role, took_over = "build", True
        elif isinstance(got, PlatformMismatch):
            return failed(str(got), decision, role="push")
        elif isinstance(got, BaseException):
            # TransferError: the class's wheel exists, sending it HERE failed (this host's disk, quota,
            # connection), not the builder's fault (new-user trial: a full disk here read "failed on its
            # builder"); ClassWheelUnstored: built, but the controller's disk could not pass it on
            why = (f"receiving this arch class's wheel failed: {got}" if isinstance(got, TransferError)
                   else str(got) if isinstance(got, ClassWheelUnstored)
                   else f"the build of this arch class failed on its builder: {got}")
            return with_class(failed(why, decision, role="push"), key, inputs, target)
        else:
            # the stamp records the wheel as written here (its size and mtime: the next run's check)
            st = yield Run(argv=(*STAT_ARGV, got.remote), mutating=False, after_change=True, quiet=True,
                           reason="the received wheel's size and mtime, for its build stamp")
            size, mtime = parse_stat(st.stdout_text) if st.rc == 0 else (None, None)
            # the class's inputs and archs are this host's (one key): known before the wheel is
            # (a dry run's push), so a later install's checks never wait for it
            data = {"inputs": inputs, "archs": target.get("torch_cuda_arch_list"), **dict(got.data),
                    "wheel": got.remote, "sha256": got.sha256, "size_bytes": size, "mtime_s": mtime, "key": key,
                    "reused": False, "pushed_from": got.builder, "decision": {**decision, "action": "push"}}
            if got.unpacked_bytes is not None:  # the install's room check, before the wheel is here
                data["unpacked_bytes"] = got.unpacked_bytes
            err = yield Put(data=stamp_bytes(data), remote=stamp_path, mode=0o600, reason="the build stamp")
            if err is not None:
                return failed(f"cannot write the build stamp: {err}", decision)
            return TaskResult(Status.CHANGED, data=data, files={got.remote: got.sha256 or None},
                              stamps={got.remote: stamp_of(data)},
                              msg=f"pushed {got.name} (built once for this arch class on {got.builder})"
                                  + (f"; replaces the wheel here: {decision['stale_wheel']}" if decision.get("stale_wheel")
                                     else ""))
    decision["action"] = "build"
    if cannot_build is None and not asked:  # build: each, or a member that took the build over
        lost = yield from reach_deps(deps, host, key if once else "")
        cannot_build = refuse([lost], decision) if lost else None
    if cannot_build is not None and took_over:  # say why it had to build at all (new-user trial: every
        # member said "preflight: build requirements missing", not a word of the builder that was lost)
        cannot_build = dataclasses.replace(cannot_build, msg=f"the arch class's builder was lost during the run and "
                                                             f"this host was next to build, but {cannot_build.msg}")
    if cannot_build is not None:  # no member of its class can build it either (or none is left)
        if once:  # the next member waiting builds instead, or fails with its own preflight's line
            yield Fail(key=key, message=f"{host.name}: {cannot_build.msg}", retryable=True)
        said = {**cannot_build.data.get("decision", {}), "cannot_build": cannot_build.msg}  # may yet receive
        return with_class(dataclasses.replace(cannot_build, data={**cannot_build.data, "decision": said}),
                          key, inputs, target)
    if info is None:  # not reached today (a holder never builds); a build is never unchecked
        info, refused = yield from venv_checks(args, host, facts, tokens, meta, decision)
        if refused is not None:
            return refused
    left = None if host.force else (yield from left_wheel(host, dest))  # a drop after the build, before its stamp
    if left is not None:
        decision["changed"] = [*decision.get("changed", []), f"{posixpath.basename(left)}, built by an interrupted "
                               "run, is checked and kept: not built again"]
    err, sent = (None, []) if left is not None else (yield from ship_deps(deps))
    if deps.ship and left is None:
        decision["deps_sent"] = sent
    if err:
        if once:  # the class's members wait for this builder's wheel: tell them it failed
            yield Fail(key=key, message=f"{host.name}: {err}")
        return with_class(failed(err, decision), key, inputs, target)
    result = yield from build_here(args, host, facts, target, inputs, key, dest, defines, decision, once, meta, info,
                                   left=left)
    return with_class(result, key, inputs, target)


def with_class(result: TaskResult, key: str, inputs: dict[str, Any], target: Mapping[str, Any]) -> TaskResult:
    """A failed build still names its arch class (key, archs, the SASS asked for, inputs: CUDA,
    torch, Python), known before it started, so that the class lines of ``--plan``, the summary and
    the report print the class's real arch, CUDA and torch, not ``arch None cuNone torch?``. The
    SASS asked for is ``sass_asked``: ``sass`` is only ever what a built wheel holds (its SASS
    check), so that no record names SASS no wheel has (fresh operator's trial)."""
    if not result.status.is_failure:
        return result
    known = {"key": key, "archs": target.get("torch_cuda_arch_list"), "sass_asked": sass_targets(target),
             "inputs": inputs}
    return dataclasses.replace(result, data={**known, **result.data})


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "One row per host: `build` (this host builds its arch class's wheel; `build (forced)` with "
    "`--force`), `push` (another member of the class builds, this host receives the wheel), `reinstall` "
    "(the host holds the wheel but another is installed), `skip` (the wheel for exactly these inputs is "
    "installed) or `fail` with the preflight's cause; with the arch list, the class key and the inputs "
    "that changed since the installed wheel."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Build the wheel for {{ facts.build.torch_cuda_arch_list }}
  build_wheel:
    src: "{{ workdir }}/src/kernel_src"
    out_dir: "{{ workdir }}/wheels"
    cmake_defines: {FP4_REQUIRE_CUDA: true}
  register: build
  tags: [build]
"""

ACTION = Action(name="build_wheel", args=BuildWheelArgs, phase="build", timeout_s=7200.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
