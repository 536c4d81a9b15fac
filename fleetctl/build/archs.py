"""Facts -> build environment: arch lists, job counts, CUDA environment, CMake defines.

Pure functions, no I/O: each takes the facts dict the host's facts script printed
(``playbooks/scripts/facts.py``) and returns data, so ``--dry-run`` and data-file tests need no
host.

Arch spellings used here:

* compute capability, as nvidia-smi prints it: ``"9.0"``, ``"12.0"``
* torch arch (``TORCH_CUDA_ARCH_LIST`` entry): ``"9.0a"``, ``"8.9"``
* CUDA arch (``CMAKE_CUDA_ARCHITECTURES`` / ``CUDAARCHS`` entry): ``"90a"``, ``"89"``
* nvcc virtual arch / real arch: ``"compute_90a"`` / ``"sm_90a"`` (what ``cuobjdump --list-elf``
  shows in the built .so)

Majors >= 9 are built for the arch-specific variant (``a`` suffix): the FP4/FP8 tensor-core
instructions (wgmma, tcgen05, block-scaled MMA) exist only there, and SASS for ``sm_90a`` runs
only on 9.0 GPUs, which is exactly the per-host build fleetctl does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .gpustack import stack_of

#: PATH entries after the CUDA and venv bin folders: the usual system folders.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: Arch list used when a host reports no GPU (a build host, or a broken driver).
DEFAULT_FALLBACK_ARCHS = "9.0a;12.0a"

#: MiB of memory one parallel CUDA compile job may take; nvcc on CUTLASS-heavy FP4 kernels
#: peaks at 4-8 GiB per translation unit.
DEFAULT_MEM_PER_JOB_MIB = 6144

#: Memory kept free when deriving MAX_JOBS: the larger of this many MiB and
#: :data:`MEM_HEADROOM_FRACTION` of what is available (the linker, pip and the backend, the shell,
#: some page cache), so that the last job does not meet the OOM killer or the cgroup limit.
MEM_HEADROOM_MIB = 1024
MEM_HEADROOM_FRACTION = 0.05

#: Variables of the login environment that point tools at another Python environment: every
#: step runs with those the host's login environment sets unset (CMake's FindPython and uv follow
#: ``VIRTUAL_ENV``/``CONDA_PREFIX``; ``PYTHONHOME`` breaks every interpreter but the one it names).
STRAY_ENV = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONHOME")

#: Variables of the login environment that put other folders ahead of the venv's site-packages
#: on its python's sys.path (PYTHONPATH first of all; PYTHONUSERBASE where the venv sees the user
#: site-packages). fleetctl's own python steps run without them (a build must not import a source
#: tree), a ``command`` as given keeps them, and so do the host's users' jobs: the note says so,
#: and verify imports the package with them too (:mod:`fleetctl.tasks.verify`).
SHADOW_ENV = ("PYTHONPATH", "PYTHONUSERBASE")

#: Minimum nvcc release for the arch-specific (``a``) variant of each compute capability
#: (CUDA release notes: 9.0a in 12.0; 10.0a/10.1a/12.0a in 12.8; 10.3a/12.1a in 12.9;
#: 11.0a in 13.0, where 10.1 was renamed 11.0).
ARCH_SPECIFIC_MIN_CUDA: dict[str, tuple[int, int]] = {
    "9.0": (12, 0),
    "10.0": (12, 8),
    "10.1": (12, 8),
    "10.3": (12, 9),
    "11.0": (13, 0),
    "12.0": (12, 8),
    "12.1": (12, 9),
}

_CAP_RE = re.compile(r"^(\d+)\.(\d+)$")
_ARCH_RE = re.compile(r"^(\d+)\.(\d+)([af]?)$")


def _parse_cap(compute_cap: str) -> tuple[int, int]:
    m = _CAP_RE.match(str(compute_cap).strip())
    if not m:
        raise ValueError(f"not a compute capability (want MAJOR.MINOR such as '9.0'): {compute_cap!r}")
    return int(m.group(1)), int(m.group(2))


def _parse_arch(arch: str) -> tuple[int, int, str]:
    m = _ARCH_RE.match(str(arch).strip())
    if not m:
        # nvcc's / CMake's spelling (sm_90a, compute_120a, 90a) of an arch torch writes 9.0a
        other = re.fullmatch(r"(?:sm_|compute_)?(\d+)(\d)([af]?)", str(arch).strip())
        hint = f"; did you mean '{other.group(1)}.{other.group(2)}{other.group(3)}'?" if other else ""
        raise ValueError(f"not a torch arch (want MAJOR.MINOR[a|f] such as '9.0a'): {arch!r}{hint}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def arch_for_compute_cap(compute_cap: str) -> str:
    """The torch arch to build for a GPU of this compute capability.

    Args:
        compute_cap: ``"MAJOR.MINOR"`` as ``nvidia-smi --query-gpu=compute_cap`` prints it.

    Returns:
        ``"9.0a"``, ``"10.0a"``, ``"10.3a"``, ``"12.0a"``, ``"12.1a"`` for majors >= 9 (the
        arch-specific variant); the capability itself below (``"8.9"``, ``"8.0"``).

    Raises:
        ValueError: ``compute_cap`` is not ``MAJOR.MINOR``.
    """
    major, minor = _parse_cap(compute_cap)
    return f"{major}.{minor}a" if major >= 9 else f"{major}.{minor}"


def cuda_arch(arch: str) -> str:
    """The CMake/nvcc spelling of a torch arch: ``"9.0a"`` -> ``"90a"``, ``"12.0a"`` -> ``"120a"``,
    ``"8.9"`` -> ``"89"``.

    Raises:
        ValueError: ``arch`` is not ``MAJOR.MINOR`` with an optional ``a``/``f`` suffix.
    """
    major, minor, suffix = _parse_arch(arch)
    return f"{major}{minor}{suffix}"


def _arch_key(arch: str) -> tuple[int, int, str]:
    return _parse_arch(arch)


def parse_arch_list(text: str | Sequence[str]) -> list[str]:
    """Split an arch list (``"9.0a;12.0a"``, ``"9.0a 12.0a"``, ``"9.0a,12.0a"`` or a sequence)
    into torch archs, deduplicated and sorted numerically. A bare compute capability ``"9.0"``
    is kept as written (the caller asked for it).

    Raises:
        ValueError: an entry is not ``MAJOR.MINOR[a|f]``.
    """
    items = re.split(r"[;,\s]+", text) if isinstance(text, str) else list(text)
    archs = {str(a).strip() for a in items if str(a).strip()}
    for a in archs:
        _parse_arch(a)
    return sorted(archs, key=_arch_key)


def _version_tuple(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    m = re.match(r"^(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def unsupported_archs(archs: Iterable[str], nvcc_archs: Sequence[str] | None,
                      nvcc_version: str | None = None) -> list[str]:
    """The target archs this nvcc cannot compile, as nvcc virtual archs (``"compute_120a"``).

    nvcc 13.0's ``--list-gpu-arch`` prints only the base archs (``compute_90``, ``compute_120``...),
    never the ``a`` variants, so an ``a`` target counts as known when its base arch is listed and
    the nvcc release is at least :data:`ARCH_SPECIFIC_MIN_CUDA` for it (when the release is known).

    Args:
        archs: torch archs (``"9.0a"``).
        nvcc_archs: ``facts["cuda"]["archs"]``; ``None`` (nvcc missing or not asked) -> ``[]``:
            nothing can be checked, and :func:`build_plan` says so in its notes.
        nvcc_version: ``facts["cuda"]["version"]`` (``"13.0"``), or None.
    """
    if nvcc_archs is None:
        return []
    listed = set(nvcc_archs)
    release = _version_tuple(nvcc_version)
    missing = []
    for arch in archs:
        major, minor, suffix = _parse_arch(arch)
        virtual = f"compute_{major}{minor}{suffix}"
        if virtual in listed:
            continue
        ok = f"compute_{major}{minor}" in listed
        if ok and suffix:
            need = ARCH_SPECIFIC_MIN_CUDA.get(f"{major}.{minor}") if suffix == "a" else (12, 9)
            ok = need is None or release is None or release >= need
        if not ok:
            missing.append(virtual)
    return missing


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def stray_env(facts: Mapping[str, Any]) -> dict[str, str]:
    """The :data:`STRAY_ENV` variables the host's login environment sets (``facts["login_env"]``)."""
    login = facts.get("login_env") or {}
    return {k: login[k] for k in STRAY_ENV if login.get(k)}


def available_memory_mib(facts: Mapping[str, Any]) -> tuple[float | None, str]:
    """``(MiB a build may use, where that number comes from)``: the host's ``mem_available_mib``
    (else ``mem_total_mib``), lowered to what the cgroup still allows (``mem_limit_mib`` minus the
    cgroup's usage without page cache, cgroup v1 or v2) when that is less."""
    mem = _num(facts.get("mem_available_mib"))
    source = "available"
    if mem is None:
        mem, source = _num(facts.get("mem_total_mib")), "total"
    limit = _num(facts.get("mem_limit_mib"))
    if limit and limit > 0:
        cg = facts.get("cgroup") or {}
        used = _num(cg.get("memory_used_mib")) or 0.0
        free = max(0.0, limit - used)
        if mem is None or free < mem:
            mem = free
            source = (f"cgroup v{cg.get('version') or '?'} limit {int(limit)} MiB, {int(used)} MiB used"
                      + (f" ({facts['mem_limit_source']})" if facts.get("mem_limit_source") else ""))
    return mem, source


def derive_max_jobs(facts: Mapping[str, Any], mem_per_job_mib: int = DEFAULT_MEM_PER_JOB_MIB) -> tuple[int, str]:
    """Parallel compile jobs the host can take: ``min(cpus, (memory - headroom) // mem_per_job_mib)``, >= 1.

    CPUs: ``cpu_count`` lowered to the cgroup quota ``cpu_quota`` (rounded up) when set.
    Memory (MiB): :func:`available_memory_mib` (the cgroup v1/v2 limit counts), minus the headroom
    ``max(MEM_HEADROOM_MIB, MEM_HEADROOM_FRACTION * memory)``.

    Returns:
        ``(jobs, reason)``: the count and one line saying how it was derived.
    """
    if mem_per_job_mib <= 0:
        raise ValueError(f"mem_per_job_mib must be > 0, got {mem_per_job_mib}")
    cpus = _num(facts.get("cpu_count"))
    quota = _num(facts.get("cpu_quota"))
    if quota and quota > 0:
        q = int(-(-quota // 1))
        cpus = min(cpus, q) if cpus else q
    mem, source = available_memory_mib(facts)
    usable = None
    if mem is not None:
        usable = max(0.0, mem - max(MEM_HEADROOM_MIB, MEM_HEADROOM_FRACTION * mem))
    by_mem = int(usable // mem_per_job_mib) if usable is not None else None
    candidates = [int(c) for c in (cpus, by_mem) if c is not None]
    jobs = max(1, min(candidates)) if candidates else 1
    mem_text = f"{int(usable)} MiB usable of {int(mem)} MiB {source}" if mem is not None else "memory ?"
    reason = (f"max_jobs {jobs} = min(cpus {int(cpus) if cpus is not None else '?'}, "
              f"{mem_text} // {mem_per_job_mib} MiB per job), at least 1")
    return jobs, reason


def build_plan(
    raw_facts: Mapping[str, Any],
    *,
    fallback_archs: str | Sequence[str] = DEFAULT_FALLBACK_ARCHS,
    mem_per_job_mib: int = DEFAULT_MEM_PER_JOB_MIB,
    max_jobs: int | None = None,
) -> dict[str, Any]:
    """What to build for one host, from its facts.

    Every GPU counts: a host with GPUs of different SMs gets the union of their archs
    (``mixed_sm`` true), never just GPU 0's.

    Args:
        raw_facts: the facts script's JSON object (``gpus``, ``cuda``, ``cpu_count``,
            ``mem_available_mib``...). Missing keys are tolerated.
        fallback_archs: torch archs built when no GPU reports a compute capability
            (``"9.0a;12.0a"``; ``;``, ``,`` or spaces separate) on a host without an NVIDIA
            driver (``gpu_stack`` ``none``, :mod:`fleetctl.build.gpustack`).
        mem_per_job_mib: MiB one CUDA compile job may take (4-8 GiB is common).
        max_jobs: a fixed job count (the ``max_jobs`` host var); derived when ``None``.

    Returns:
        ``{"torch_cuda_arch_list": "9.0a;12.0a", "cuda_architectures": "90a;120a",
        "archs": ["9.0a", "12.0a"], "sass": ["sm_90a", "sm_120a"], "compute_caps": ["9.0", "12.0"],
        "targets": [{"compute_cap", "arch", "cuda_arch", "sass", "gpus": [index...], "names": [...]}],
        "max_jobs": int, "nvcc_threads": 1, "mem_per_job_mib": int, "mixed_sm": bool,
        "source": "gpus" | "fallback", "unsupported": ["compute_120a"], "archs_checked": bool,
        "notes": [str], "env_notes": [str]}`` (``env_notes``: those of ``notes`` about every step,
        not only the build); archs sorted numerically and deduplicated.

    Raises:
        ValueError: ``fallback_archs`` holds an entry that is not an arch, ``max_jobs`` < 1, or
            no GPU answered on a host whose GPU stack is broken (never the fallback there).
    """
    notes: list[str] = []
    arch_choice: dict[str, str] | None = None  # the note saying which archs are built and why
    gpus = [g for g in (raw_facts.get("gpus") or []) if isinstance(g, Mapping)]
    by_cap: dict[str, dict[str, Any]] = {}
    for pos, gpu in enumerate(gpus):
        index = gpu.get("index", pos)
        cap = gpu.get("compute_cap")
        try:
            arch = arch_for_compute_cap(cap) if cap is not None else None
        except ValueError:
            arch = None
        if arch is None:
            notes.append(f"GPU {index} ({gpu.get('name') or 'unnamed'}): compute capability unknown ({cap!r}); not a target")
            continue
        cap = "%d.%d" % _parse_cap(cap)
        target = by_cap.setdefault(cap, {"compute_cap": cap, "arch": arch, "cuda_arch": cuda_arch(arch),
                                         "sass": "sm_" + cuda_arch(arch), "gpus": [], "names": []})
        target["gpus"].append(index)
        if gpu.get("name") and gpu["name"] not in target["names"]:
            target["names"].append(gpu["name"])

    if by_cap:
        source = "gpus"
        targets = sorted(by_cap.values(), key=lambda t: _parse_cap(t["compute_cap"]))
        archs = parse_arch_list([t["arch"] for t in targets])
    else:
        stack = stack_of(raw_facts)
        if stack["status"] == "broken":  # a GPU host whose driver does not answer is not a build host
            raise ValueError(f"the GPU stack is broken ({stack.get('reason')}): fallback_archs is only for "
                             "hosts without an NVIDIA driver")
        source = "fallback"
        targets = []
        archs = parse_arch_list(fallback_archs)
        if not archs:
            raise ValueError("fallback_archs is empty")
        why = "no GPU found" if not gpus else "no GPU reported a compute capability"
        if not gpus and (raw_facts.get("gpu_stack") or {}).get("status") == "none":
            why += " (no NVIDIA driver: a build host)"
        elif raw_facts.get("gpu_error"):
            why += f" ({raw_facts['gpu_error']})"
        arch_choice = {"why": why, "note": f"{why}: building for fallback_archs {';'.join(archs)}",
                       "instead": f"fallback_archs {';'.join(archs)}"}
        notes.append(arch_choice["note"])

    mixed = len(by_cap) > 1
    if mixed:
        detail = ", ".join(f"{t['compute_cap']} on GPU {','.join(str(i) for i in t['gpus'])}" for t in targets)
        arch_choice = {"why": f"GPUs of different SMs ({detail})",
                       "note": f"GPUs of different SMs ({detail}): building for all of {';'.join(archs)}",
                       "instead": f"all of {';'.join(archs)}"}
        notes.append(arch_choice["note"])

    cuda = raw_facts.get("cuda") or {}
    nvcc_archs = cuda.get("archs")
    unsupported = unsupported_archs(archs, nvcc_archs, cuda.get("version"))
    archs_checked = nvcc_archs is not None
    if not archs_checked:
        notes.append("nvcc did not list its archs (missing or failed): target archs not checked")
    if unsupported:
        notes.append(f"nvcc {cuda.get('version') or '?'} at {cuda.get('nvcc') or '?'} lacks {', '.join(unsupported)}")

    if cuda.get("source") == "interactive login PATH":
        notes.append(f"nvcc is only on the interactive login PATH (~/.profile or ~/.bashrc after its "
                     f"non-interactive guard): using {cuda.get('home')} explicitly; set the host var cuda_home "
                     f"to {cuda.get('home')} to say so")
    stray = stray_env(raw_facts)
    env_notes = []  # about every step on the host, not only a build: told by every play
    if stray:
        env_notes.append("the login environment sets " + ", ".join(f"{k}={v}" for k, v in stray.items())
                         + ": every step runs with them unset")
    login = raw_facts.get("login_env") or {}
    shadow = {k: login[k] for k in SHADOW_ENV if login.get(k)}
    if shadow:
        env_notes.append("the login environment sets " + ", ".join(f"{k}={v}" for k, v in shadow.items())
                         + ": fleetctl's python steps run without it, the host's users' python puts it ahead of "
                           "the venv (verify checks the package imports from the venv with it too)")
    notes += env_notes
    tmp = raw_facts.get("tmp") or {}
    if tmp.get("noexec") or not tmp.get("writable", True):
        notes.append(f"TMPDIR {tmp.get('path')} is {'noexec' if tmp.get('noexec') else 'not writable'}: "
                     "builds use a folder in the workdir instead")

    if max_jobs is not None:
        if int(max_jobs) < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
        jobs = int(max_jobs)
        notes.append(f"max_jobs {jobs} as configured")
    else:
        jobs, reason = derive_max_jobs(raw_facts, mem_per_job_mib)
        notes.append(reason)

    return {
        "torch_cuda_arch_list": ";".join(archs),
        "cuda_architectures": ";".join(cuda_arch(a) for a in archs),
        "archs": archs,
        "sass": ["sm_" + cuda_arch(a) for a in archs],
        "compute_caps": [t["compute_cap"] for t in targets],
        "targets": targets,
        "max_jobs": jobs,
        "nvcc_threads": 1,
        "mem_per_job_mib": mem_per_job_mib,
        "mixed_sm": mixed,
        "source": source,
        "unsupported": unsupported,
        "archs_checked": archs_checked,
        "notes": notes,
        "env_notes": env_notes,
        "arch_choice": arch_choice,
    }
