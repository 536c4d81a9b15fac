"""The pure parts of ``build_wheel``: the target plan, preflight checks, the build key, stamps.

Hosts whose build inputs (:func:`build_inputs`) are equal form one arch class and build one wheel.
A build leaves a stamp (:data:`STAMP_NAME`, JSON: the wheel path, its sha256, its size in bytes and
mtime in whole seconds as written there, the key, the inputs, archs and SASS found) beside its
wheel in ``<out_dir>/<key[:16]>/``.

A stamp is trusted only for the wheel it describes (:func:`stale_by_stat`, :func:`stale_by_hash`):
each run stats the wheel (in the stamps probe, no extra command) and compares size and mtime with
the stamp's; a size that differs means the wheel changed (truncated, replaced): rebuilt, never
reused or installed. Only when the size agrees but the mtime does not (touched, copied, or a stamp
written before they were recorded) is the wheel hashed, and its sha256 decides; a wheel that
hashes to its stamp's sha256 has its stamp rewritten with the size and mtime it has now, so it is
hashed once, not on every run (:func:`upgraded_stamp`). Hashing every run
would cost a read of the whole wheel per host on every no-change deploy; size and mtime cost a
``stat``, and a writer that keeps both (same size, same second) is the one case left to ``--force``.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..build.env import config_settings_args, keyed_defines, toolkit_identity
from ..connection.base import CommandResult
from ..build.cudacompat import ArchToken, parse_tokens, target_arch_list
from ..build.hostcompiler import key_material as host_compiler_key
from ..build.wheeltags import platform_inputs
from .base import first_error_line
from .steps import Put, Run, probe

#: The stamp a build leaves next to its wheel (``<out_dir>/<key16>/``).
STAMP_NAME = ".fleetctl-build.json"

KILLED = re.compile(r"\bKilled\b|out of memory|Cannot allocate memory|signal 9|std::bad_alloc", re.I)

#: Per stamp whose wheel exists, ``STAMP <size> <mtime> <stamp JSON>``: the wheel's size (bytes)
#: and mtime (whole seconds) now (``stat -L -c '%s %Y'``, GNU and busybox; ``- -`` when stat
#: cannot say); then ``VENV <real path>`` of the venv (``$3``, ``pwd -P``: what ``os.path.realpath``
#: of its ``sys.prefix`` gives) and ``INSTALLED <record JSON>`` per install record of any venv
#: (``$2/<key>/<dist>.json``, :data:`.venv_state.RECORD_LAYOUT`; :func:`parse_stamps` keeps this venv's).
_STAMPS = (f'for f in "$1"/*/{STAMP_NAME}; do [ -f "$f" ] || continue; w=$(sed -n \'s/.*"wheel": "\\([^"]*\\)".*/\\1/p\' "$f"); '
           '[ -n "$w" ] && [ -f "$w" ] || continue; s=$(stat -L -c "%s %Y" "$w" 2>/dev/null) || s="- -"; '
           'printf "STAMP %s " "$s"; cat "$f"; echo; done; '
           'v=$(cd "$3" 2>/dev/null && pwd -P) || v=""; printf "VENV %s\n" "$v"; '
           'for f in "$2"/*/*.json; do [ -f "$f" ] && { printf "INSTALLED "; cat "$f"; echo; }; done; true')

#: Prints ``<size> <mtime>`` of the file ``$1`` (bytes, whole seconds), as :data:`_STAMPS` reads them.
STAT_ARGV = ("stat", "-L", "-c", "%s %Y")


def target_plan(facts: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """The build plan from facts (:func:`fleetctl.build.archs.build_plan`), with the task's ``archs`` and
    ``max_jobs`` overrides applied. ``+PTX`` is kept: ``"8.0+PTX;9.0a"`` stays in
    ``torch_cuda_arch_list`` (torch embeds ``compute_80`` PTX beside the SASS) and becomes
    ``"80;90a"`` in ``cuda_architectures`` (CMake's plain number means SASS and PTX); ``archs`` and
    ``sass`` (the SASS asked for: ``["sm_90a"]``) follow the override too.

    Raises:
        ValueError: ``archs`` holds an entry that is not an arch.
    """
    plan = dict(facts.get("build") or {})
    if args.archs:
        plan["torch_cuda_arch_list"] = target_arch_list(facts, args.archs)  # what a task title names too
        tokens = parse_tokens(plan["torch_cuda_arch_list"])
        plan["cuda_architectures"] = ";".join(f"{t.major}{t.minor}{t.suffix}" for t in tokens)
        # the plan's lists follow the override (fresh operator's trial: -e archs=9.0a built sm_90a
        # while run.json, the summary and the report named the facts' sm_90a sm_120a)
        plan["archs"] = [a for a in plan["torch_cuda_arch_list"].split(";") if a]
        plan["sass"] = sass_targets(plan)
    if args.max_jobs:
        plan["max_jobs"] = args.max_jobs
    return plan


def plan_tokens(plan: Mapping[str, Any]) -> list[ArchToken]:
    """The arch tokens of a plan's ``torch_cuda_arch_list``."""
    return parse_tokens(str(plan.get("torch_cuda_arch_list") or ""))


def sass_targets(plan: Mapping[str, Any]) -> list[str]:
    """``["sm_90a", "sm_120a"]`` for ``cuda_architectures`` ``"90a;120a"`` (``-virtual`` entries skipped)."""
    return [f"sm_{a.split('-')[0]}" for a in str(plan.get("cuda_architectures", "")).split(";")
            if a and not a.endswith("-virtual")]


def ptx_targets(plan: Mapping[str, Any]) -> list[str]:
    """The PTX a plan's ``+PTX`` tokens require in the wheel (``["compute_80"]``)."""
    return [t.virtual for t in plan_tokens(plan) if t.ptx]


def build_argv(tool: str, python: str, uv: str | None, src: str, dest: str, defines: Mapping[str, str],
               no_build_isolation: bool) -> list[str]:
    """The build command for ``uv`` or ``pip`` (config settings carry the CMake defines; ``{}``
    passes none, for a backend that is not CMake's)."""
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

    A host whose GPUs mix SMs is its own class (``host`` is part of its inputs). The platform
    (``platform``: ``"linux_aarch64"``, ``libc``: ``"glibc 2.39"``, :func:`fleetctl.build.wheeltags.platform_inputs`)
    is part of them: an x86_64 wheel never goes to an aarch64 host of the same SM, CUDA and torch.

    The CUDA toolkit counts by what it is, not by the path that reached it: its real folder and
    real nvcc (:func:`fleetctl.build.env.keyed_defines`: ``/usr/local/cuda`` and the
    ``/usr/local/cuda-13.0`` it links to are one class), its release and its nvcc build
    (:func:`fleetctl.build.env.toolkit_identity`: V13.0.48 and V13.0.88 are two). Two toolkits of
    one release in two real folders stay two classes: a wheel may hold its toolkit's paths, and
    another folder may hold another patch level or an edited ``bin/nvcc.profile``.
    """
    py = facts.get("python") or {}
    material = {
        "tree": tree_hash, "archs": plan.get("torch_cuda_arch_list"), "defines": keyed_defines(defines, facts),
        **toolkit_identity(facts), "torch": py.get("torch"), "torch_cuda": py.get("torch_cuda"),
        "python": py.get("tag") or py.get("version"),
    }
    material.update(host_compiler_key(facts))
    # the wheel's platform tag and the libc it needs (left out when the host did not say)
    material.update({k: v for k, v in platform_inputs(facts).items() if v is not None})
    if plan.get("mixed_sm") and host:
        material["mixed_sm_host"] = host
    return material


def build_key(material: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of :func:`build_inputs`; its first 16 digits name folders and cache entries."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def changed_inputs(inputs: Mapping[str, Any], stamps: Sequence[Mapping[str, Any]], installed_shas: set,
                   installed: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Which inputs differ from those of the wheel installed now (``["tree", "torch"]``), or
    ``["nothing installed"]`` / ``["inputs not recorded"]``; ``[]`` when they are equal.

    ``installed`` are the venv's install records (``<workdir>/installed/<key>/<dist>.json``: the
    wheel kept, its sha256), else the venv's own mark (:func:`venv_install_mark`, whose ``inputs``
    stand in for a stamp this host's workdir lacks). When one exists but no wheel's stamp on the host has its sha256 (a failed
    ``--force`` build removed the folder it was built in), the installed wheel is named:
    ``["installed fp4_kernels-0.1.0-...whl (its build stamp is gone: inputs not known)"]``."""
    current = next((s for s in stamps if s.get("sha256") in installed_shas), None)
    if current is None:  # the venv's own mark (a second name's workdir holds no stamp of it) may say
        current = next((i for i in installed if i.get("sha256") in installed_shas and i.get("inputs")), None)
    if current is None:
        held = [posixpath.basename(str(i.get("kept") or i.get("dist") or "a wheel")) for i in installed
                if i.get("sha256")]
        if held:
            return [f"installed {', '.join(held)} (its build stamp is gone: inputs not known)"]
        return ["nothing installed"]
    old = current.get("inputs")
    if not old:
        return ["inputs not recorded"]
    return sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))


def venv_install_mark(facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """The venv's own install record (``<venv>/.fleetctl-install.json``, facts'
    ``targets.venv.installed``: ``{host, dist, wheel, sha256, inputs?}``) when it names a sha256,
    else None. The per-venv records (``<workdir>/installed/``) are per inventory host, so a second
    name of a deployed venv (its own workdir) finds none there: without this mark its ``--plan``
    said ``nothing installed`` while the install's own planner (which reads it,
    :func:`fleetctl.tasks.install_target.venv_mark`) said ``already installed (same sha256)``."""
    targets = facts.get("targets")
    rec = ((targets.get("venv") or {}) if isinstance(targets, Mapping) else {}).get("installed")
    if not isinstance(rec, Mapping) or not isinstance(rec.get("sha256"), str):
        return None
    return {"sha256": rec["sha256"], "kept": rec.get("wheel"), "dist": rec.get("dist"),
            "inputs": rec.get("inputs") if isinstance(rec.get("inputs"), Mapping) else None}


def is_killed(res: CommandResult) -> bool:
    """The compiler died of memory: exit 137, SIGKILL, or "Killed"/"out of memory" in the output."""
    return (res.rc == 137 or res.signal == "KILL"
            or bool(KILLED.search(res.stderr_text[-20000:] + res.stdout_text[-20000:])))


def stamps_probe(out_dir: str, installed_dir: str, venv: str | None) -> Run:
    """Every stamp under ``out_dir`` whose wheel still exists, and the install records (those of
    ``venv`` are kept by :func:`parse_stamps`)."""
    return probe(["/bin/sh", "-c", _STAMPS, "fleetctl-stamps", out_dir, installed_dir, venv or ""],
                 "the wheels this host holds and the one installed")


Seen = tuple[int | None, int | None]


def parse_stat(text: str) -> Seen:
    """``(size in bytes, mtime in whole seconds)`` from ``stat -c '%s %Y'`` (``None`` for what it
    did not print): its last line of two numbers, so a line printed before it (a login shell's
    banner over a transport that does not skip it) is not read as the size."""
    for line in reversed(text.splitlines()):
        pair = line.split()
        if len(pair) == 2 and all(p.isdigit() for p in pair):
            return int(pair[0]), int(pair[1])
    parts = text.split()
    return (_int(parts[0]) if parts else None), (_int(parts[1]) if len(parts) > 1 else None)


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_stamps(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Seen]]:
    """``(stamps, install records, wheel path -> (size, mtime) it has now)`` from
    :func:`stamps_probe`'s output; unreadable lines skipped. Only the records of the venv it names
    (``VENV``) are returned: another venv's install, or a record naming no venv (an older
    fleetctl's), says nothing of what this venv holds (:data:`.venv_state.RECORD_LAYOUT`)."""
    stamps, installed, seen = [], [], {}
    venv = None
    for line in text.splitlines():
        try:
            if line.startswith("VENV "):
                venv = line[len("VENV "):].strip() or None
            elif line.startswith("INSTALLED "):
                installed.append(json.loads(line[len("INSTALLED "):]))
            elif line.startswith("STAMP "):
                _, size, mtime, body = line.split(" ", 3)
                stamp = json.loads(body)
                stamps.append(stamp)
                seen[str(stamp.get("wheel"))] = parse_stat(f"{size} {mtime}")
        except ValueError:
            continue
    installed = [i for i in installed if isinstance(i, dict) and venv and i.get("venv") == venv]
    return stamps, installed, seen


def stale_by_stat(stamp: Mapping[str, Any], seen: Seen | None) -> str | None:
    """Why the stamp's wheel is not the wheel it describes, from its size (one line), or ``None``
    when the size agrees or either is unknown (then :func:`needs_hash` says whether to hash)."""
    size = (seen or (None, None))[0]
    want = stamp.get("size_bytes")
    if size is None or not isinstance(want, int) or size == want:
        return None
    return (f"{posixpath.basename(str(stamp.get('wheel')))} is {size} bytes, its build stamp says {want} "
            "(truncated or replaced since it was built)")


def needs_hash(stamp: Mapping[str, Any], seen: Seen | None) -> bool:
    """The wheel's size and mtime are not both known and equal to the stamp's: only its sha256 can
    say whether it is still the wheel built (a stamp from before they were recorded, a copy, a touch)."""
    size, mtime = seen or (None, None)
    return (size is None or mtime is None or stamp.get("size_bytes") != size or stamp.get("mtime_s") != mtime)


_SHA256_LINE = re.compile(r"^\\?([0-9a-f]{64})(?:\s|$)", re.M)


def stale_stamp(stamp: Mapping[str, Any], seen: Seen | None, stamp_path: str | None = None):
    """A sub-plan (``yield from``): why ``stamp``'s wheel must be rebuilt rather than reused (one
    line), or ``None``. The size decides alone; the wheel is hashed (one probe) only when the size
    agrees and the mtime does not, or either is unknown (:func:`needs_hash`).

    A wheel whose sha256 is the stamp's after all (a stamp written before fleetctl recorded size
    and mtime, a wheel touched or copied with ``cp`` without ``-p``) has its stamp rewritten at
    ``stamp_path`` with the size (bytes) and mtime (whole seconds) it has now
    (:func:`upgraded_stamp`), so the next run's ``stat`` settles it and the wheel is hashed once,
    not on every run until it is rebuilt (new-user trial: a stamp of an older fleetctl had its
    wheel read on every no-change deploy). The rewrite is a mutating step: ``--plan`` and
    ``--dry-run`` show it, only a deploy writes it."""
    why = stale_by_stat(stamp, seen)
    if why is None and needs_hash(stamp, seen):
        wheel = str(stamp.get("wheel"))
        res = yield probe(["sha256sum", wheel], f"the sha256 of {posixpath.basename(wheel)} (its size or mtime is "
                                                "not what its build stamp recorded)", answer_ahead=False)
        # sha256sum prints `HEX  PATH`: the line of that form, not the first word (a banner's)
        found = _SHA256_LINE.search(res.stdout_text) if res.rc == 0 else None
        why = stale_by_hash(stamp, found.group(1) if found else None, first_error_line(res))
        upgraded = upgraded_stamp(stamp, seen) if why is None and stamp_path else None
        if upgraded is not None:
            yield Put(data=upgraded, remote=stamp_path, mode=0o600,
                      reason=f"record {posixpath.basename(wheel)}'s size and mtime in its build stamp (its sha256 "
                             "matched): the next run stats it instead of hashing it")
    return why


def upgraded_stamp(stamp: Mapping[str, Any], seen: Seen | None) -> bytes | None:
    """The stamp's bytes with ``size_bytes`` and ``mtime_s`` as the wheel has them now (``seen``),
    written as a build writes a stamp (JSON, sorted keys); ``None`` when either is unknown."""
    size, mtime = seen or (None, None)
    if size is None or mtime is None:
        return None
    return json.dumps({**stamp, "size_bytes": size, "mtime_s": mtime}, sort_keys=True).encode()


def stale_by_hash(stamp: Mapping[str, Any], digest: str | None, error: str = "") -> str | None:
    """Why the stamp's wheel is not the wheel it describes, from its sha256 (``None``: it is)."""
    name = posixpath.basename(str(stamp.get("wheel")))
    if not digest:
        return f"{name} could not be hashed ({error or 'no answer'}), so its build stamp cannot be trusted"
    if digest == stamp.get("sha256"):
        return None
    return (f"{name}'s sha256 is {digest[:12]}..., its build stamp says {str(stamp.get('sha256'))[:12]}... "
            "(changed since it was built)")


def wheel_sass_local(script: str, wheel: str, remove: bool = False) -> dict[str, Any]:
    """Run the SASS listing script on the controller (in a worker thread, see
    :class:`~fleetctl.tasks.steps.Local`); ``{"archs": [...], "error": str|None}``. ``remove``: the
    wheel is a temporary copy: it and its folder are removed afterwards."""
    try:
        proc = subprocess.run([sys.executable, script, wheel], capture_output=True, text=True, timeout=300)
    finally:
        if remove:
            import shutil

            shutil.rmtree(os.path.dirname(wheel), ignore_errors=True)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"archs": [], "error": f"wheel_sass.py failed: {proc.stderr.strip()[-300:]}"}
