#!/usr/bin/env python3
"""Gather one host's build facts in one round trip and print them as one JSON object.

fleetctl uploads this file and runs it ON the host (``python3 facts.py --workdir DIR [--venv DIR]
[--cuda-home DIR]``). It needs only the standard library of any Python >= 3.8, prints exactly one
JSON object on stdout (diagnostics go to stderr) and exits 0 whatever it finds: every probe is
wrapped, and a missing tool yields ``null`` plus an error string instead of a crash.

``--read-only 1`` (``fleetctl facts``, which like Ansible's setup module must not change a host):
nothing is written: no id file is made (an existing one is read, none is reported as null), the
kept answers of ``--cache`` are read but the file is never written, and no bytecode cache is
written (``sys.dont_write_bytecode``, ``PYTHONDONTWRITEBYTECODE=1`` for every probe it starts,
so a venv's ``.pth`` imports leave no ``__pycache__`` there). A deploy (and its ``--plan`` and
``--dry-run``, which must find the hosts sharing a folder as the deploy does) writes them.

Output keys (sizes in MiB = 2**20 bytes, durations in seconds):

``script_version``  str, bumped when the shape changes.
``gpus``            list of ``{index: int, name: str, compute_cap: "9.0" | null, memory_mib: int | null,
                    uuid, pci_bus_id, mig_mode: str | null}``, every GPU of the host, from
                    ``nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,uuid,
                    pci.bus_id,mig.mode.current --format=csv,noheader,nounits`` (field meanings:
                    ``nvidia-smi --help-query-gpu``), or from NVML through ctypes when nvidia-smi is
                    missing or fails. Each GPU command is bounded by ``--gpu-timeout-s`` seconds.
                    A GPU in an error state also has ``fault: {field: marker}``, the fields nvidia-smi
                    printed an error marker for (``{"compute_cap": "[Unknown Error]"}``,
                    :func:`smi_field_fault`); such a GPU makes ``gpu_stack`` ``broken``.
``gpu_stack``       ``{status: "ok" | "none" | "broken", reason, fix, traces}``: ``none`` only when the
                    host has no NVIDIA driver at all (a build host); ``broken`` when one is installed
                    but does not answer (version mismatch, module not loaded, no GPU seen, a hung or
                    still-stuck nvidia-smi, an nvidia-smi this user may not execute: "found at PATH but
                    not executable (permission denied)", a listed GPU in an error state: ``fault``),
                    with what failed and the fix. ``gpu_stuck_probes``:
                    ``[{pid, age_s, state}]`` of an earlier stuck nvidia-smi (then none is started).
``gpu_source``      ``"nvidia-smi"`` | ``"nvml"`` | null (no source answered).
``gpu_error``       str | null: why no source listed a GPU (null when one did).
``gpu_probe_errors`` list of str: every failed source, including one a later source made up for.
``driver_version``  str | null, e.g. ``"580.82.07"``: the GPU source's, else (none said it: a version
                    mismatch...) the loaded kernel module's, ``driver_module_version``.
``driver_module_version`` str | null: the loaded kernel module's version, from
                    ``/proc/driver/nvidia/version`` (null when the file is not there or unread).
``cuda``            ``{home, home_realpath, nvcc, nvcc_realpath, version: "13.0", build: "V13.0.88
                    cuda_13.0.r13.0/compiler.36424714_0" (``nvcc --version``'s V number and Build line:
                    two nvcc of one release but another build differ), archs: ["compute_75", ...],
                    codes: ["sm_75", ...], cuobjdump, cuobjdump_source, cccl_include, source,
                    requested_home, toolkits, skipped, error}``; ``source`` is ``"cuda_home var"`` |
                    ``"CUDA_HOME env"`` | ``"/usr/local/cuda"`` | ``"PATH"`` | ``"/usr/local/cuda-*"`` |
                    ``"interactive login PATH"`` | null. ``toolkits``: every distinct toolkit found,
                    in search order, as ``{home, home_realpath, nvcc, nvcc_realpath, version, build, archs, source}``
                    (``*_realpath``: ``os.path.realpath``, so ``/usr/local/cuda`` and the
                    ``/usr/local/cuda-13.0`` it links to are seen as one toolkit);
                    ``skipped``: ``[{home, source, why}]`` of the login environment's ``CUDA_HOME``
                    (or ``CUDA_PATH``) that was passed over (no executable ``bin/nvcc``).
``python``          ``{executable, venv, exists, version: "3.12.3", tag: "cp312", implementation,
                    site_packages, prefix, in_venv, conda_env, externally_managed (the path of
                    the stdlib's EXTERNALLY-MANAGED file, PEP 668, outside a venv; else null),
                    packages: {dist: version | null}, torch,
                    torch_cuda, torch_cxx11_abi, torch_arch_list, torch_file, torch_error,
                    torch_probe_error, torch_import, error}``, and ``dangling`` (the missing path it resolves to)
                    when the venv's python is a symlink to an interpreter that is gone, or
                    ``denied`` (the folder the login user may not enter, or the file it may
                    not run) when that interpreter is there but not for this user;
                    ``torch_error`` is what is wrong with the host's torch,
                    ``torch_probe_error`` what went wrong in fleetctl's own reader (never the host's).
                    from a subprocess of that interpreter: torch's version, CUDA build, C++ ABI
                    flag and arch list are read from its files (:data:`TORCH_READER`), so a broken
                    torch is reported, never fatal; when they read fine, the same child then
                    imports torch (seconds of CPU; under the probe's timeout, twice
                    ``--probe-timeout-s``), as verify and a build will, with this login's limits
                    (``ulimit -v`` of ``~/.bashrc``): ``torch_import`` ``{ok: true | false | null,
                    error, seconds}`` (``ok`` null: the import did not finish in time, a note, not a
                    fault). With ``torch`` set, ``torch_error`` says torch is there but does not
                    import: a library of its own that ``torch._C`` needs is missing from
                    ``torch/lib``, or the import's own error line (``ImportError: libtorch_cpu.so:
                    failed to map segment from shared object``). Kept in ``--cache`` only with the
                    loader's variables and these resource limits (:data:`IMPORT_RLIMITS`) unchanged.
                    ``site_packages_fs``: ``{path, free_mib, noexec, readonly, writable, owner,
                    user, owned, mode}`` of ``site_packages`` (``writable`` by this login ``user``;
                    ``owner`` of the folder, ``owned`` by the login, its ``mode``), where installs write. ``installed_locks``: ``{dist, locked, n_locked,
                    locked_tops, login_user, unreadable, n_unreadable, site_mode}`` of the installed
                    ``fp4_kernels`` (the shipped deploy's package) in ``site_packages``, or null when
                    not there (:func:`installed_locks`).
``cmake``           ``{path, version: "3.28.3", error}``; ``ninja`` ``{path, version}``; ``uv`` ``{path}``.
``cpu_count``       int: CPUs this process may run on (``os.sched_getaffinity``).
``cpu_quota``       float | null: the cgroup's CPU quota in CPUs (v2 ``cpu.max``, v1
                    ``cpu.cfs_quota_us / cpu.cfs_period_us``), null when unlimited.
``mem_total_mib``, ``mem_available_mib``  int | null from ``/proc/meminfo``.
``rlimit_as_mib``   int | null: this login's address-space limit (``ulimit -v``, ``RLIMIT_AS``) in MiB,
                    null when unlimited. Per process, so it is not a budget shared by a build's jobs
                    (``mem_limit_mib`` is): each nvcc must fit it on its own.
``mem_limit_mib``   int | null: the lowest cgroup memory limit on the way to the root (v2
                    ``memory.max``, v1 ``memory.limit_in_bytes``), null when unlimited.
``cgroup``          ``{version: 1 | 2 | null, memory_dir, memory_limit_mib, memory_used_mib,
                    cpu_quota}``: where the limits were read (``memory_used_mib``: usage minus the
                    reclaimable page cache); ``mem_limit_source`` names the file, e.g.
                    ``"cgroup v1 /sys/fs/cgroup/memory/x/memory.limit_in_bytes"``.
``disk_free_mib``   int | null: free space for this user at ``--workdir`` (its nearest existing parent).
``workdir_fs``, ``tmp`` ``{path, free_mib, noexec, readonly, writable}`` of the workdir's file system
                    and of the login environment's temporary folder (``$TMPDIR``, else ``/tmp``),
                    where nvcc writes its intermediates; ``noexec`` from ``statvfs`` ``ST_NOEXEC``.
``host_compilers``  ``{default, default_cxx, candidates, search_path}``: ``default`` is the compiler nvcc runs
                    without ``-ccbin`` (``gcc`` on the build's PATH), ``default_cxx`` the ``g++`` there, ``candidates`` the other C++ compilers found
                    (``g++-N``, ``clang++[-N]``, gcc-toolset), each ``{path, realpath, name, kind: "gnu" |
                    "clang", major, minor, version, banner, error}`` from its predefined macros (``-dM -E``).
                    Each toolkit (``cuda``, ``cuda.toolkits[]``) has ``host_compiler_max`` ``{gnu, clang,
                    source}``: the newest majors its ``crt/host_config.h`` accepts (absent when unread).
``login_env``       ``{NAME: value}`` for the variables of :data:`LOGIN_ENV_NAMES` the login
                    environment sets (a stray ``VIRTUAL_ENV``, ``CONDA_PREFIX``, ``PYTHONPATH``,
                    ``PYTHONUSERBASE``, ``TMPDIR``...). The probes of this script run without the stray ones.
``environments``    null, or, when ``--venv`` is a symlink into a versions folder fleetctl manages
                    (docs/staged.md): ``{versions_dir, live_version, versions: {N: {state, created,
                    live_since, torch, torch_cuda, missing}}, disk: {total_mib, versions: {N: {size_mib,
                    own_mib}}, measured}, live_missing}``, read from the folder's ``envs.json`` (no walk);
                    ``missing`` true: the version's folder is gone (``live_missing``: the live one's).
``workdir``, ``hostname``, ``os`` (PRETTY_NAME of /etc/os-release), ``kernel``, ``machine``.
``targets``         ``{venv: {path, id, local, error, unreadable, installed, copied, installed_copied}, workdir: {...}}``:
                    the real path of each folder this host builds or installs in and its id (:func:`target_id`): equal ids
                    on two hosts mean one shared folder; ``unreadable`` true: the id file is there but
                    this user cannot read it (``error`` says so, planners refuse the host); ``installed`` is fleetctl's last install
                    there (``{host, archs, wheel, dist, sha256, record_sha256, inputs, id, local}``, :data:`TARGET_INSTALL_NAME`), or null;
                    ``copied``: one line when the id file was copied from another folder (it gets a fresh id), and
                    ``installed_copied`` when the install record was written for another folder, else null.
``python.platform`` ``{machine, sysconfig: "linux-aarch64", libc: "glibc" | "musl" | null,
                    libc_version: "2.39", interp, host_platform_env, bits: 64}`` of the venv's
                    interpreter (:data:`PLATFORM_READER`): what pip there accepts is decided by it.
``probe_cache``     with ``--cache FILE`` only: ``{path, hits, misses, error}``: answers of unchanged
                    programs taken from FILE and asked anew (:class:`AnswerCache`).
``errors``          list of str: probe failures not reported elsewhere.
``duration_s``      float: the script's own run time.
"""

from __future__ import annotations

import errno  # built in, already loaded by subprocess: no cost
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time

# ctypes (NVML, in its own child), platform and socket are not imported at the top: on every host
# of every run they cost more than what this script uses of them (os.uname() is what
# platform.machine(), platform.release() and socket.gethostname() read on Linux).

SCRIPT_VERSION = "3"

#: Fields asked of nvidia-smi, in this order (see ``nvidia-smi --help-query-gpu``).
GPU_QUERY_FIELDS = ("index", "name", "compute_cap", "memory.total", "driver_version")
#: Per-GPU detail fields asked with them (``nvidia-smi --help-query-gpu``); a driver that lacks one
#: is asked :data:`GPU_QUERY_FIELDS` alone.
GPU_DETAIL_FIELDS = ("uuid", "pci.bus_id", "mig.mode.current")
#: What nvidia-smi prints in a field the GPU or driver has no value for (``nvidia-smi --help-query-gpu``):
#: normal in some fields (:data:`GPU_FIELDS_ALWAYS_ANSWERED`), never an error by itself.
SMI_UNAVAILABLE = ("[N/A]", "[NOT SUPPORTED]", "N/A")
#: Fields NVIDIA's driver answers for every GPU it manages (NVML API reference: nvmlDeviceGetName,
#: nvmlDeviceGetUUID, nvmlDeviceGetPciInfo are "for all products"; ``index`` is nvidia-smi's own
#: count): an :data:`SMI_UNAVAILABLE` placeholder there means the GPU did not answer. In the other
#: fields it is normal on healthy GPUs, so it is no fault there: ``compute_cap`` (recorded ``[N/A]``
#: on a board the driver does not name, "NVIDIA Graphics Device"), ``memory.total`` (GPUs that share
#: the system's memory, such as GB10, have no framebuffer size), ``driver_version`` (recorded
#: ``[N/A]`` beside a GPU's row), ``mig.mode.current`` (``[N/A]`` on every GPU without MIG).
GPU_FIELDS_ALWAYS_ANSWERED = ("index", "name", "uuid", "pci.bus_id")
#: Seconds nvidia-smi (and the NVML child) may take: a GPU off the bus blocks it in the kernel
#: forever (``--gpu-timeout-s``; the host var ``gpu_probe_timeout_s``).
GPU_PROBE_TIMEOUT_S = 30.0
#: Seconds a child killed at its deadline gets to go before it is left behind (unkillable).
KILL_GRACE_S = 1.0
#: What an installed NVIDIA driver leaves (NVIDIA driver README): the loaded module's version, device files.
NVIDIA_PROC_VERSION = "/proc/driver/nvidia/version"
NVIDIA_DEV_GLOB = "/dev/nvidia*"

#: Default per-command timeout in seconds.
TIMEOUT_S = 30.0
#: Timeout for the interpreter probe, which imports torch (a cold import can take many seconds).
PYTHON_PROBE_TIMEOUT_S = 60.0

#: Distributions whose versions the interpreter probe reports (importlib.metadata, no import).
PROBED_PACKAGES = (
    "pip", "setuptools", "wheel", "scikit-build-core", "nanobind", "cmake", "ninja", "numpy",
    "nvidia-cuda-cuobjdump", "triton",
)

MIB = 1024 * 1024
_MARK = "@@FLEETCTL_FACTS@@ "

#: Login-environment variables reported in ``login_env``.
LOGIN_ENV_NAMES = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME", "TMPDIR",
                   "PYTHONUSERBASE", "PYTHONNOUSERSITE")
#: Of those, the ones that would make a probe see another Python environment: removed for probes.
STRAY_ENV_NAMES = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME")
#: Versioned toolkits searched after PATH (the newest first), as NVIDIA's installers lay them out.
CUDA_VERSIONED_GLOB = "/usr/local/cuda-*"
#: A cgroup v1 memory limit at or above this many bytes means "no limit" (the kernel's PAGE_COUNTER_MAX).
_V1_UNLIMITED = 1 << 62


def log(message: str) -> None:
    """Write one diagnostic line to stderr (stdout carries only the JSON)."""
    try:
        sys.stderr.write("facts: " + message + "\n")
        sys.stderr.flush()
    except Exception:
        pass


# --------------------------------------------------------------------------------------------
# Pure parsers (tests import this file by path and call these directly)
# --------------------------------------------------------------------------------------------


def _na(value: str):
    """``None`` for nvidia-smi's placeholders (``[N/A]``, ``[Not Supported]``, ``N/A``, empty)."""
    value = value.strip()
    if not value or value.upper() == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def smi_field_fault(field, value):
    """The marker that says a GPU's ``field`` is in error (pure), or None: nvidia-smi prints an NVML
    call's failure in brackets in the field's place (``[Unknown Error]`` for NVML_ERROR_UNKNOWN, as after
    an Xid 79 "fallen off the bus" or an uncorrectable ECC error, ``[GPU requires reset]`` for
    NVML_ERROR_RESET_REQUIRED, ``[GPU is lost]``; NVIDIA's nvidia-smi documentation and ``nvidia-smi
    -q``), in any field, with exit 0. Every bracketed value but :data:`SMI_UNAVAILABLE` is such a
    marker; those are markers only in :data:`GPU_FIELDS_ALWAYS_ANSWERED`."""
    value = value.strip()
    if value.upper() in SMI_UNAVAILABLE:
        return value if field in GPU_FIELDS_ALWAYS_ANSWERED else None
    return value if value.startswith("[") and value.endswith("]") else None


def _to_int(value):
    if value is None:
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def parse_nvidia_smi_csv(text: str, fields=GPU_QUERY_FIELDS):
    """Parse ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` output.

    Args:
        text: nvidia-smi's stdout; one line per GPU, fields separated by ``", "``.
        fields: the ``--query-gpu`` field names, in the order asked. Must include ``name``;
            ``index``, ``compute_cap``, ``memory.total`` (MiB with ``nounits``) and
            ``driver_version`` are used when present.

    Returns:
        ``(gpus, driver_version)``: ``gpus`` a list of ``{"index": int, "name": str,
        "compute_cap": "9.0" | None, "memory_mib": int | None, "uuid": "GPU-..." | None,
        "pci_bus_id": "00000000:17:00.0" | None, "mig_mode": "Enabled" | "Disabled" | None}``
        in output order (the last three from ``uuid``, ``pci.bus_id``, ``mig.mode.current``
        when asked);
        ``driver_version`` the first non-placeholder driver version, or ``None``.
        Placeholders such as ``[N/A]`` become ``None``; a GPU name that itself holds commas is
        rejoined; blank lines are skipped. A GPU with a field in error (:func:`smi_field_fault`)
        also has ``"fault": {field: marker}``, in the order asked.

    Raises:
        ValueError: a line has fewer fields than asked (not CSV of that query).
    """
    fields = list(fields)
    gpus = []
    driver = None
    name_at = fields.index("name") if "name" in fields else None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(fields):
            raise ValueError("line %d: expected %d fields, got %d: %r" % (lineno, len(fields), len(parts), line))
        if len(parts) > len(fields):
            if name_at is None:
                raise ValueError("line %d: expected %d fields, got %d: %r" % (lineno, len(fields), len(parts), line))
            extra = len(parts) - len(fields)
            parts = parts[:name_at] + [", ".join(parts[name_at:name_at + extra + 1])] + parts[name_at + extra + 1:]
        row = dict(zip(fields, parts))
        fault = {f: smi_field_fault(f, v) for f, v in row.items() if smi_field_fault(f, v)}
        index = _to_int(_na(row.get("index", "")))
        cap = _na(row.get("compute_cap", ""))
        if cap is not None and not re.match(r"^\d+\.\d+$", cap):
            cap = None
        gpus.append({
            "index": index if index is not None else len(gpus),
            "name": _na(row.get("name", "")) or "",
            "compute_cap": cap,
            "memory_mib": _to_int(_na(row.get("memory.total", ""))),
            "uuid": _na(row.get("uuid", "")),
            "pci_bus_id": _na(row.get("pci.bus_id", "")),
            "mig_mode": _na(row.get("mig.mode.current", "")),
        })
        if fault:
            gpus[-1]["fault"] = fault
        if driver is None:
            driver = _na(row.get("driver_version", ""))
    return gpus, driver


def parse_nvcc_version(text: str):
    """``"13.0"`` from ``nvcc --version`` ("Cuda compilation tools, release 13.0, V13.0.88"), else None."""
    m = re.search(r"release\s+(\d+\.\d+)", text)
    if m:
        return m.group(1)
    m = re.search(r"\bV(\d+\.\d+)", text)
    return m.group(1) if m else None


def parse_nvcc_build(text: str):
    """``"V13.0.88 cuda_13.0.r13.0/compiler.36424714_0"`` from ``nvcc --version`` (its ``V`` number and
    its ``Build`` line: what tells two builds of one release apart), the parts it printed, else None."""
    parts = [m.group(1) for m in (re.search(r"\b(V\d+(?:\.\d+)+)", text), re.search(r"^Build\s+(\S+)", text, re.M))
             if m]
    return " ".join(parts) or None


def parse_word_list(text: str):
    """Whitespace-separated words (``nvcc --list-gpu-arch`` / ``--list-gpu-code`` output), deduplicated in order."""
    seen = []
    for word in text.split():
        if word not in seen:
            seen.append(word)
    return seen


def parse_cmake_version(text: str):
    """``"3.28.3"`` from ``cmake --version`` ("cmake version 3.28.3"), else None."""
    m = re.search(r"version\s+(\d+(?:\.\d+)+\S*)", text)
    return m.group(1) if m else None


def parse_meminfo(text: str):
    """``{"mem_total_mib", "mem_available_mib"}`` (int MiB or None) from ``/proc/meminfo`` (kB values)."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            values[key.strip()] = int(words[0])
    total = values.get("MemTotal")
    avail = values.get("MemAvailable")
    if avail is None and "MemFree" in values:
        avail = values.get("MemFree", 0) + values.get("Buffers", 0) + values.get("Cached", 0)
    return {
        "mem_total_mib": total // 1024 if total is not None else None,
        "mem_available_mib": avail // 1024 if avail is not None else None,
    }


def parse_os_release(text: str):
    """PRETTY_NAME (quotes removed) from ``/etc/os-release``, else NAME VERSION, else None."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            values[key.strip()] = value
    if values.get("PRETTY_NAME"):
        return values["PRETTY_NAME"]
    joined = " ".join(v for v in (values.get("NAME"), values.get("VERSION")) if v)
    return joined or None


def parse_cpu_max(text: str):
    """CPUs allowed by a cgroup v2 ``cpu.max`` ("200000 100000" -> 2.0); None for "max" or junk."""
    words = text.split()
    if len(words) >= 1 and words[0] != "max":
        try:
            period = float(words[1]) if len(words) > 1 else 100000.0
            return round(float(words[0]) / period, 2) if period > 0 else None
        except ValueError:
            return None
    return None


def parse_memory_max(text: str):
    """MiB allowed by a cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes`` (bytes); None for
    "max", v1's "unlimited" (>= 2**62 bytes) or junk."""
    word = text.strip()
    if word.isdigit() and int(word) < _V1_UNLIMITED:
        return int(word) // MIB
    return None


def parse_cfs_quota(quota_text: str, period_text: str):
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` ("200000", "100000"
    -> 2.0); None for -1 (unlimited) or junk."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return round(quota / float(period), 2) if quota > 0 and period > 0 else None


def parse_proc_cgroup(text: str):
    """``{"v2": "/path" | None, "v1": {controller: "/path"}}`` from ``/proc/self/cgroup``
    ("0::/user.slice/x" for v2; "4:memory:/docker/abc" or "3:cpu,cpuacct:/x" for v1)."""
    out = {"v2": None, "v1": {}}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            out["v2"] = path
        else:
            for name in controllers.split(","):
                if name:
                    out["v1"][name] = path
    return out


def parse_mountinfo_cgroups(text: str):
    """Cgroup mounts from ``/proc/self/mountinfo`` (proc(5)): ``{"v2": (root, mount point) | None,
    "v1": {controller: (root, mount point)}}``; ``root`` is the cgroup path mounted there."""
    out = {"v2": None, "v1": {}}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, mount = fields[3].replace("\\040", " "), fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2" and out["v2"] is None:
            out["v2"] = (root, mount)
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                if opt in ("memory", "cpu") and opt not in out["v1"]:
                    out["v1"][opt] = (root, mount)
    return out


def cgroup_dir(mount, cgroup_path):
    """The folder of ``cgroup_path`` under a cgroup file system mounted as ``(root, mount point)``:
    the path is taken relative to the mounted root (a container sees its own cgroup as ``/``)."""
    root, point = mount
    rel = cgroup_path
    if root not in ("/", "") and (cgroup_path == root or cgroup_path.startswith(root.rstrip("/") + "/")):
        rel = cgroup_path[len(root.rstrip("/")):]
    return os.path.normpath(point + "/" + rel.lstrip("/"))


def parse_memory_stat_inactive_file(text: str, version: int):
    """Bytes of reclaimable page cache from ``memory.stat`` (v2 ``inactive_file``, v1
    ``total_inactive_file``), 0 when absent."""
    key = "inactive_file" if version == 2 else "total_inactive_file"
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == key and words[1].isdigit():
            return int(words[1])
    return 0


# --------------------------------------------------------------------------------------------
# Probes (each returns data; none raises)
# --------------------------------------------------------------------------------------------


def run_command(argv, timeout_s=None, env=None, cwd=None):
    """Run argv without a shell (in ``cwd``, default this process's); return ``(rc, stdout, stderr, error)``; never raises.

    ``rc`` is None and ``error`` a one-line message when the program is missing, cannot run or
    passes ``timeout_s`` seconds (default :data:`TIMEOUT_S`; then it is killed and any partial
    output is returned).
    """
    if timeout_s is None:
        timeout_s = TIMEOUT_S
    try:
        proc = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            timeout=timeout_s, env=env, cwd=cwd,
        )
        return proc.returncode, _decode(proc.stdout), _decode(proc.stderr), None
    except subprocess.TimeoutExpired as exc:
        return None, _decode(exc.output), _decode(exc.stderr), "%s: timed out after %g s" % (argv[0], timeout_s)
    except OSError as exc:
        return None, "", "", "%s: %s" % (argv[0], exc.strerror or exc)
    except Exception as exc:  # pragma: no cover - defensive
        return None, "", "", "%s: %s: %s" % (argv[0], type(exc).__name__, exc)


def _decode(data):
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


#: A Python exception's own line, as a traceback ends (``ImportError: libcudart.so.12: ...``).
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
#: Words that mark a line saying why a tool failed (NVML's ``Failed to initialize NVML: ...``,
#: ``Unable to determine the device handle ...``, ``No devices were found``, ``nvcc fatal : ...``).
_CAUSE_WORDS = re.compile(r"error|fatal|fail|unable|cannot|can't|couldn't|could not|not found|no such|denied|"
                          r"mismatch|invalid|not a valid|lost|no devices|not supported|segmentation", re.I)


def cause_line(out, err, context=None):
    """The one line that says why a failed tool failed, from its ``out`` (stdout) and ``err`` (stderr).

    A tool may print what it did manage before the error (nvidia-smi's ``GPU 0: NVIDIA H100 ...``
    on stdout, then NVML's ``Failed to initialize NVML: ...`` on stderr), and Python prints
    ``Traceback (most recent call last):`` before the exception: the first line of the output is
    then context, not the cause. In order: a Python exception line (the last on stderr, as the
    traceback ends with it), else the first line on stderr then stdout that says it failed
    (:data:`_CAUSE_WORDS`), else the first line on stderr, else on stdout. ``context(line)`` true
    marks a stdout line as never the cause while another line is there (nvidia-smi's CSV rows).
    Returns "" when both are empty.
    """
    err_lines = [ln.strip() for ln in (err or "").splitlines() if ln.strip()]
    out_lines = [ln.strip() for ln in (out or "").splitlines() if ln.strip()]
    if context is not None:
        out_lines = [ln for ln in out_lines if not context(ln)] or ([] if err_lines else out_lines)
    exceptions = [ln for ln in err_lines if _EXCEPTION_LINE.match(ln)]
    if exceptions:
        return exceptions[-1]
    for line in err_lines + out_lines:
        if _CAUSE_WORDS.search(line):
            return line
    return (err_lines + out_lines + [""])[0]


def _is_exe(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_program(name):
    """``shutil.which(name)`` for a bare program name: the first executable file of that name on
    PATH, else None (shutil, with the bz2 and lzma modules it loads, costs a host ~3 ms a run)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if _is_exe(path):
            return path
    return None


# --------------------------------------------------------------------------------------------
# Answers kept between runs (``--cache FILE``): the version commands of an unchanged host
# --------------------------------------------------------------------------------------------

# What a dependency of a kept answer is compared by; the interpreter probe runs the same source.
FILE_STAT = r"""
def file_stat(path):
    # [size, mtime_ns, ctime_ns, inode, device, mode] of path (symlinks followed), None when absent:
    # a file replaced or rewritten changes its ctime at least (stat(2): no call sets it back)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode]
"""
exec(FILE_STAT)

#: Bumped when a kept answer's shape changes (the script's own digest is checked too).
CACHE_VERSION = 1
#: Seconds a dependency must be older than its answer for the answer to be kept: within the file
#: system's timestamp granularity a file can change again without its stat changing (git's
#: "racy git" problem, Documentation/technical/racy-git.txt); such an answer is asked again next run.
RACY_S = 2.0
#: The same, for a dependency whose mtime or ctime has a sub-second part: its file system keeps
#: times finer than a second, and Linux stamps them from the coarse clock (current_time(): one
#: tick, 10 ms at CONFIG_HZ=100, the lowest), so a change one tick after the stat gets a later
#: stamp. Whole-second times (FAT's 2 s, ext3, NFS servers that send seconds) keep :data:`RACY_S`.
FINE_RACY_S = 0.05


def machine_id():
    """``/etc/machine-id`` (machine-id(5); the D-Bus one where it is missing), else None."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            return _read(path).strip() or None
        except OSError:
            pass
    return None


class AnswerCache:
    """Answers of the commands that only tell what an installed program is (``nvcc --version``,
    ``--list-gpu-arch``, ``--list-gpu-code``, a compiler's macros and banner, ``cmake --version``,
    ``ninja --version``, the build interpreter's probe), kept in a JSON file on the host between runs.

    Each answer is kept with the files it depends on and their :func:`file_stat` (size, mtime and
    ctime in ns, inode, device, mode), taken BEFORE the command ran, and is used again only while
    every one of them stats exactly the same: a program replaced, upgraded, relinked or touched is
    asked again. Kept only: answers of commands that succeeded, whose dependencies were older than
    :data:`RACY_S` seconds. Never kept: anything that can change while those files stay as they
    are (the GPUs and the driver: nvidia-smi and NVML run every time; CPUs, memory, disk, cgroups,
    the environment). The file belongs to one host and one version of this script: another
    hostname, ``/etc/machine-id`` or script digest (a shared workdir, a copied one, a new
    fleetctl) starts it afresh. A file that cannot be read starts it afresh too; one that cannot
    be written is reported (``probe_cache.error``), never fatal.
    """

    def __init__(self, path, digest, min_age_s=None):
        self.path, self.used, self.hits, self.misses, self.error = path, {}, 0, 0, None
        self.min_age_s = RACY_S if min_age_s is None else float(min_age_s)
        self.fixed_age = min_age_s is not None  # given: one window for every file (tests, slow file systems)
        self.header = {"version": CACHE_VERSION, "script": digest, "hostname": os.uname().nodename,
                       "machine_id": machine_id()}
        self.entries, self.dirty, self.lock = {}, False, threading.Lock()
        try:
            with open(path) as fh:
                doc = json.load(fh)
            if isinstance(doc, dict) and all(doc.get(k) == v for k, v in self.header.items()):
                self.entries = doc.get("entries") or {}
        except (OSError, ValueError):
            pass

    def get(self, key):
        """The answer kept for ``key`` (a string) when its dependencies stat as they did, else None."""
        entry = self.entries.get(key)
        try:
            fresh = entry is not None and all(file_stat(p) == st for p, st in entry["deps"])
        except (TypeError, ValueError, KeyError):
            fresh = False
        with self.lock:  # the interpreter probe asks from its own thread
            if not fresh:
                self.misses += 1
                return None
            self.hits += 1
            self.used[key] = entry
        return entry["answer"]

    def put(self, key, deps, answer):
        """Keep ``answer`` with ``deps`` (``[[path, file_stat(path)]]``, statted before it was
        asked) unless one of them changed within its window: ``min_age_s`` seconds when given,
        else :data:`RACY_S`, or :data:`FINE_RACY_S` for a file with sub-second times."""
        now_ns = time.time_ns() if hasattr(time, "time_ns") else int(time.time() * 1e9)
        for _, st in deps:
            if st is None:
                continue
            fine = not self.fixed_age and (st[1] % 10**9 or st[2] % 10**9)
            if now_ns - max(st[1], st[2]) < (FINE_RACY_S if fine else self.min_age_s) * 1e9:
                return
        with self.lock:
            self.used[key] = {"deps": deps, "answer": answer}
            self.dirty = True

    def save(self):
        """Write the answers used or made in this run (atomically), when any is new or dropped."""
        if not self.dirty and set(self.used) == set(self.entries):
            return
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            tmp = "%s.%d.part" % (self.path, os.getpid())
            with open(tmp, "w") as fh:
                json.dump(dict(self.header, entries=self.used), fh)
            os.replace(tmp, self.path)
        except OSError as exc:
            self.error = "%s: %s" % (self.path, exc.strerror or exc)

    def report(self):
        return {"path": self.path, "hits": self.hits, "misses": self.misses, "error": self.error}


def remembered(cache, key, deps, ask, keep):
    """``ask()``'s answer, or the one ``cache`` kept for ``key`` while ``deps`` (paths) are
    unchanged; a new answer is kept when ``keep(answer)``. Without a cache: ``ask()``."""
    if cache is None:
        return ask()
    key = json.dumps(key)
    got = cache.get(key)
    if got is None:
        stats = [[p, file_stat(p)] for p in deps]
        got = ask()
        if keep(got):
            cache.put(key, stats, got)
    return json.loads(json.dumps(got))  # a copy: the caller's edits never reach the file


#: Sessions :func:`run_bounded` started whose child has not ended (stopped by :func:`stop_on_signal`).
LIVE_SESSIONS = set()


def stop_on_signal(signum, _frame=None):
    """SIGTERM, SIGHUP, SIGINT of this script run on its own (``python3 facts.py``, under
    fleetctl's supervisor, which stops the script's process group when the run is interrupted):
    kill the sessions of :data:`LIVE_SESSIONS` too (each GPU command runs in its own, out of that
    group's reach: operator trial, a hung nvidia-smi left running after Ctrl-C), then exit
    128 + the signal's number."""
    for pid in list(LIVE_SESSIONS):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(128 + signum)


def run_bounded(argv, timeout_s, env=None):
    """Run argv without a shell, never waiting on it past ``timeout_s`` seconds (+ a short grace).

    Unlike :func:`run_command` (``subprocess.run`` waits for the killed child, forever when the
    child sleeps uninterruptibly in a driver), a child still running at the deadline gets SIGKILL
    and :data:`KILL_GRACE_S` seconds to go; one that does not (a process blocked in the kernel
    cannot die: a GPU off the bus, NVIDIA Xid 79) is left behind, unwaited.

    Returns:
        ``{"rc": int | None, "out": str, "err": str, "timed_out": bool, "stuck": bool,
        "pid": int | None, "error": str | None, "errno": int | None}``; ``stuck`` true when the
        killed child was still there after the grace; ``error`` a one-line message when it could not
        start (or did not answer), ``errno`` then the exec's errno (``errno.EACCES``: permission denied).
    """
    res = {"rc": None, "out": "", "err": "", "timed_out": False, "stuck": False, "pid": None, "error": None,
           "errno": None}
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        res["error"] = "%s: %s" % (argv[0], exc.strerror or exc)
        res["errno"] = exc.errno
        return res
    res["pid"] = proc.pid
    LIVE_SESSIONS.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        res.update(rc=proc.returncode, out=_decode(out), err=_decode(err))
        LIVE_SESSIONS.discard(proc.pid)
        return res
    except subprocess.TimeoutExpired:
        res["timed_out"] = True
    try:  # its whole session (start_new_session): a wrapper's children go with it
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
    deadline = time.time() + KILL_GRACE_S
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    res["stuck"] = proc.poll() is None
    res["error"] = "%s: did not answer in %g s" % (os.path.basename(argv[0]), timeout_s)
    return res


def parse_proc_stat(text):
    """``(state, start_ticks)`` from ``/proc/PID/stat`` (proc(5): field 3 the state letter, field 22
    the start time in clock ticks after boot); ``(None, None)`` for junk. The command name in
    parentheses may hold spaces and parentheses: fields are counted after the LAST ``)``."""
    tail = text.rpartition(")")[2].split()
    if len(tail) < 20:
        return None, None
    try:
        return tail[0], int(tail[19])
    except ValueError:
        return tail[0], None


def stuck_gpu_probes(min_age_s, proc_root="/proc"):
    """nvidia-smi processes stuck in the kernel: ``[{"pid", "age_s", "state"}]``.

    Stuck means command name ``nvidia-smi``, state ``D`` (uninterruptible: waiting in the driver,
    proc(5)) and running for at least ``min_age_s`` seconds. A monitoring loop (``nvidia-smi -l``,
    ``dmon``) sleeps in state ``S`` and is not counted; any user's stuck one counts (the GPU is
    gone for every user).
    """
    found = []
    try:
        uptime = float(_read(os.path.join(proc_root, "uptime")).split()[0])
        ticks = float(os.sysconf("SC_CLK_TCK"))
        names = os.listdir(proc_root)
    except (OSError, ValueError, IndexError):
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:  # one raw read a process (a GPU node runs hundreds): the name is in stat, "(nvidia-smi)"
            fd = os.open(os.path.join(proc_root, name, "stat"), os.O_RDONLY)
            try:
                text = os.read(fd, 4096).decode("utf-8", "replace")
            finally:
                os.close(fd)
        except OSError:
            continue
        if text[text.find("(") + 1:text.rfind(")")] != "nvidia-smi":
            continue
        state, start = parse_proc_stat(text)
        if state != "D" or start is None:
            continue
        age = uptime - start / ticks
        if age >= min_age_s:
            found.append({"pid": int(name), "age_s": round(age, 1), "state": state})
    return sorted(found, key=lambda p: p["pid"])


def driver_traces(proc_version=NVIDIA_PROC_VERSION, dev_glob=NVIDIA_DEV_GLOB):
    """The files an installed NVIDIA driver leaves (NVIDIA driver README: ``/proc/driver/nvidia``,
    the ``/dev/nvidia*`` device files), as paths; empty on a host without the driver."""
    import glob

    out = [proc_version] if os.path.exists(proc_version) else []
    return out + sorted(glob.glob(dev_glob))


def loaded_driver_version(proc_version=NVIDIA_PROC_VERSION):
    """The loaded kernel module's version from ``/proc/driver/nvidia/version`` ("NVRM version:
    NVIDIA UNIX x86_64 Kernel Module  580.82.07 ..."), else None."""
    try:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", _read(proc_version))
    except OSError:
        return None
    return m.group(1) if m else None


_SMI_ROW = re.compile(r"^\d+, ")


def smi_row(line):
    """Whether ``line`` is a GPU's ``--query-gpu`` CSV row (rows start with the GPU's ``index``
    field: ``"0, NVIDIA H200, 9.0, ..."``), never the cause of a failure while a message is there."""
    return bool(_SMI_ROW.match(line))


#: The first driver whose nvidia-smi knows ``--query-gpu=compute_cap`` (NVIDIA's nvidia-smi
#: documentation, ``nvidia-smi --help-query-gpu``; older drivers answer ``Field "compute_cap" is
#: not a valid field to query.``, exit 2).
COMPUTE_CAP_MIN_DRIVER = "R510"


def smi_too_old(driver):
    """The reason for an nvidia-smi that does not know ``compute_cap`` (driver older than R510)."""
    return ("driver too old (compute_cap needs %s+; NVIDIA nvidia-smi docs): nvidia-smi%s answers "
            "'Field \"compute_cap\" is not a valid field to query.'"
            % (COMPUTE_CAP_MIN_DRIVER, " of driver %s" % driver if driver else ""))


SMI_TOO_OLD_FIX = ("update the NVIDIA driver to %s or newer (and at least what the host's CUDA toolkit needs: NVIDIA's "
                   "CUDA release notes, minimum driver versions)" % COMPUTE_CAP_MIN_DRIVER)


#: nvidia-smi's line for a GPU whose infoROM is corrupted, printed before its other output; the
#: command then exits 14 (``nvidia-smi -h``, RETURN VALUE: "infoROM is corrupted") though the GPU
#: answers and its rows follow.
INFOROM_LINE = re.compile(r"^\s*WARNING: infoROM is corrupted at gpu (\S+)\s*$", re.M)

INFOROM_FIX = ("the GPU still answers and runs work, but its infoROM (the board's stored configuration and its ECC "
               "and retired-page records) is damaged, so ECC error counts and page retirement may be unreliable: "
               "contact NVIDIA support (an infoROM update or an RMA of the board)")


def smi_ended(rc):
    """How nvidia-smi ended, in words: ``exit 6``, or ``killed by SIGSEGV`` for a negative ``rc``
    (Python's subprocess: ``-N`` is death by signal N); ``None`` (no answer) is ``no answer``."""
    if rc is None:
        return "no answer"
    if rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit %d" % rc


def smi_failure(rc, text, timeout_s=None, loaded=None, err=""):
    """What a failing nvidia-smi means and how to fix it: ``(reason, fix)``.

    Args:
        rc: its exit status (None: it did not answer in ``timeout_s`` seconds).
        text: its stdout (or its stdout and stderr together, where they were not kept apart).
        loaded: the loaded kernel module's version, if known.
        err: its stderr.

    The exit statuses are nvidia-smi's own (``nvidia-smi -h``, RETURN VALUE): 6 no GPU found,
    9 the driver is not loaded, 15 a GPU has fallen off the bus or is otherwise inaccessible
    ("GPU is lost"), 18 driver/library version mismatch. The line quoted is the cause
    (:func:`cause_line`), never a GPU's CSV row (:func:`smi_row`) nor a line it printed before the
    error: with one GPU lost, nvidia-smi still prints the healthy GPUs' rows before the lost one's
    "Unable to determine the device handle ..." line; a wrapper may print ``GPU 0: NVIDIA H100 ...``
    on stdout before NVML's ``Failed to initialize NVML: ...`` on stderr.
    """
    first = cause_line(text, err, context=smi_row) or "no output"
    text = "%s\n%s" % (text or "", err or "")
    ended = smi_ended(rc)
    if rc == 0:  # it succeeded and listed no GPU: not a status nvidia-smi gives for "no GPU" (that is 6)
        return ("nvidia-smi: exit 0 but it listed no GPU (%s)" % first,
                "run nvidia-smi on the host: NVIDIA's nvidia-smi prints a row per GPU or exits 6 'No devices were "
                "found'; one that prints nothing is not NVIDIA's (a stub or wrapper on PATH?) or a broken driver "
                "install (check lspci -d 10de: and dmesg)")
    if rc is not None and rc < 0:
        return ("nvidia-smi: %s: %s" % (ended, first),
                "nvidia-smi crashed: the driver's user-space libraries (libnvidia-ml) may not match the kernel "
                "module or be damaged: reinstall the NVIDIA driver; see dmesg")
    if rc is None:
        return ("nvidia-smi did not answer in %g s: a GPU may have fallen off the bus; see dmesg for Xid"
                % timeout_s, "a GPU that has fallen off the bus (Xid 79) needs a GPU reset or a reboot of the host")
    if rc == 18 or "version mismatch" in text:
        lib = re.search(r"NVML library version:\s*(\S+)", text)
        known = [w for w in ("loaded kernel module %s" % loaded if loaded else None,
                             "NVML library %s" % lib.group(1) if lib else None) if w]
        versions = " (%s)" % ", ".join(known) if known else ""
        return ("nvidia-smi: %s: %s%s" % (ended, first, versions),
                "the driver was updated without a reboot: reboot the host, or reload the nvidia kernel modules "
                "(rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia)")
    if rc == 9 or "couldn't communicate with the NVIDIA driver" in text:
        return ("nvidia-smi: %s: %s" % (ended, first),
                "load the NVIDIA kernel module (modprobe nvidia; dmesg shows why it failed) or, after a kernel "
                "update, rebuild it for the running kernel (dkms autoinstall) and reboot")
    if rc == 15 or "GPU is lost" in text:
        return ("nvidia-smi: %s: %s" % (ended, first),
                "a GPU that is lost (fallen off the bus, Xid 79) needs a GPU reset (nvidia-smi -r -i GPU) or a reboot "
                "of the host; see dmesg for Xid")
    if rc == 14 or "infoROM is corrupted" in text:
        return ("nvidia-smi: %s: %s" % (ended, first), INFOROM_FIX)
    if rc == 6 or "No devices were found" in text:
        return ("nvidia-smi: %s: %s: the NVIDIA driver is installed but sees no GPU" % (ended, first),
                "check lspci -d 10de: and dmesg for Xid errors (79: fallen off the bus); reset the GPU or reboot")
    return ("nvidia-smi: %s: %s" % (ended, first), "check the NVIDIA driver installation (nvidia-smi, dmesg)")


#: Where the driver's installers put nvidia-smi, looked at beside PATH for one that cannot run:
#: /usr/bin (NVIDIA's .run installer, the distributions' driver packages, the NVIDIA Container
#: Toolkit's mounts), /usr/local/nvidia/bin (nvidia-docker 1, driver containers), /usr/lib/wsl/lib (WSL 2).
SMI_PLACES = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi", "/usr/lib/wsl/lib/nvidia-smi")


def find_nvidia_smi(places=None):
    """The nvidia-smi to run: the first on PATH, else the first executable one at ``places`` (a
    login PATH without /usr/local/nvidia/bin, as in driver containers and some sudo/cron PATHs:
    the driver is there, and "not found" would call the host driverless), else None."""
    return find_program("nvidia-smi") or next((p for p in (SMI_PLACES if places is None else places)
                                               if _is_exe(p)), None)


def unrunnable_nvidia_smi(path=None, places=SMI_PLACES):
    """The first file named nvidia-smi on ``path`` (default ``$PATH``), then at ``places``, that this
    user may not execute (``access(2)`` X_OK fails: no x bit for it, so :func:`find_program`, as
    ``shutil.which``, skips it), or None. Its ``(path, "mode 0644")``."""
    dirs = (os.environ.get("PATH", "") if path is None else path).split(os.pathsep)
    for cand in [os.path.join(d or os.curdir, "nvidia-smi") for d in dirs] + list(places):
        try:
            if os.path.isfile(cand) and not os.access(cand, os.X_OK):
                return cand, "mode %04o" % (os.stat(cand).st_mode & 0o7777)
        except OSError:
            continue
    return None


def smi_not_runnable(where, detail):
    """The message for an nvidia-smi that is there but cannot run (permission denied): what is true,
    never "not found"."""
    return "nvidia-smi: found at %s but not executable (permission denied%s)" % (where, ": " + detail if detail else "")


def smi_not_runnable_fix(where):
    """The fix for :func:`smi_not_runnable` at ``where``."""
    return ("make %s executable for the deploying user (chmod 755 %s; a noexec mount or an LSM policy denies it "
            "too), or reinstall the NVIDIA driver's utilities" % (where, where))


def probe_nvidia_smi(timeout_s=None, loaded=None):
    """GPUs through nvidia-smi, bounded by ``timeout_s`` seconds (default :data:`GPU_PROBE_TIMEOUT_S`);
    ``loaded``: the loaded kernel module's version (:func:`loaded_driver_version`), named in a
    version mismatch's ``error`` (:func:`smi_failure`).

    Returns:
        ``{"gpus": list | None, "driver": str | None, "error": str | None, "missing": bool,
        "rc": int | None, "text": str, "hung": bool, "stuck": bool, "inforom": [bus id]}``: ``gpus`` None when it
        failed; ``missing`` when nvidia-smi is not on PATH (and no file of that name is there
        or at :data:`SMI_PLACES`: one that this user may not execute is ``denied``, its ``error``
        :func:`smi_not_runnable`, as is one whose exec fails with EACCES). It asks :data:`GPU_QUERY_FIELDS` +
        :data:`GPU_DETAIL_FIELDS` first and, when the driver does not know a detail field
        ("is not a valid field to query", exit 2), the base fields alone. A driver before R510
        whose nvidia-smi does not know ``compute_cap`` itself is ``too_old`` (its ``error``
        :func:`smi_too_old`, with the driver version asked alone), never a broken stack's
        "exit 2". A GPU whose infoROM is corrupted (:data:`INFOROM_LINE` before the rows, exit 14):
        the rows are read, and ``inforom`` lists those GPUs' bus ids (a :func:`gpu_stack`
        warning: the host is not broken); exit 14 without rows is a failure (:func:`smi_failure`).
    """
    timeout_s = GPU_PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    out = {"gpus": None, "driver": None, "error": None, "missing": False, "denied": False, "path": None, "rc": None,
           "text": "", "hung": False, "stuck": False, "too_old": False, "inforom": []}
    exe = find_nvidia_smi()
    out["path"] = exe
    if not exe:
        denied = unrunnable_nvidia_smi()
        if denied:
            out.update(denied=True, path=denied[0], error=smi_not_runnable(*denied))
        else:
            out.update(missing=True, error="nvidia-smi: not found on PATH")
        return out
    for fields in (GPU_QUERY_FIELDS + GPU_DETAIL_FIELDS, GPU_QUERY_FIELDS):
        res = run_bounded([exe, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"], timeout_s)
        text = res["out"] + "\n" + res["err"]
        out.update(rc=res["rc"], text=text.strip())
        if res["timed_out"]:
            out.update(hung=True, stuck=res["stuck"], error=smi_failure(None, res["out"], timeout_s, err=res["err"])[0])
            return out
        if res["errno"] == errno.EACCES:  # x bit, but a noexec mount, an LSM, an interpreter it may not run
            out.update(denied=True, path=exe, error=smi_not_runnable(exe, None))
            return out
        if res["error"]:
            out["error"] = "nvidia-smi: " + res["error"]
            return out
        if res["rc"] == 2 and "is not a valid field" in text and fields != GPU_QUERY_FIELDS:
            continue
        if res["rc"] == 2 and 'Field "compute_cap" is not a valid field' in text:  # a driver before R510
            ver = run_bounded([exe, "--query-gpu=driver_version", "--format=csv,noheader"], timeout_s)
            driver = _na(_first_line(ver["out"])) if ver["rc"] == 0 else None
            out.update(too_old=True, driver=driver, error=smi_too_old(driver))
            return out
        inforom = INFOROM_LINE.findall(res["out"] + "\n" + res["err"])
        rows = INFOROM_LINE.sub("", res["out"])
        out["inforom"] = inforom
        if res["rc"] != 0 and not (res["rc"] == 14 and inforom and rows.strip()):
            out["error"] = smi_failure(res["rc"], res["out"], loaded=loaded, err=res["err"])[0]
            return out
        try:
            gpus, driver = parse_nvidia_smi_csv(rows, fields)
        except ValueError as exc:
            out["error"] = "nvidia-smi: unexpected output: %s" % exc
            return out
        if not gpus:  # exit 0 and no row: said as it is (the real "no GPU" is exit 6, handled above)
            out["error"] = smi_failure(res["rc"], res["out"], err=res["err"])[0]
            return out
        out.update(gpus=gpus, driver=driver)
        return out
    return out


def nvml_query():
    """Query NVML through ctypes in THIS process; returns ``{"gpus", "driver_version"}``.

    Calls (NVML API reference): nvmlInit_v2, nvmlSystemGetDriverVersion,
    nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName,
    nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetMemoryInfo (bytes), nvmlShutdown; and,
    where the library has them, nvmlDeviceGetUUID and nvmlDeviceGetPciInfo_v3 (``busId``).

    Raises:
        OSError: libnvidia-ml.so.1 cannot be loaded.
        RuntimeError: an NVML call returned an error (message from nvmlErrorString).
    """
    import ctypes

    lib = ctypes.CDLL("libnvidia-ml.so.1")
    c_uint, c_int, c_char_p, c_void_p = ctypes.c_uint, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    class Pci(ctypes.Structure):  # nvmlPciInfo_t of nvml.h
        _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                    ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint), ("busId", ctypes.c_char * 32)]

    lib.nvmlErrorString.restype = c_char_p
    lib.nvmlErrorString.argtypes = [c_int]

    def check(name, ret):
        if ret != 0:
            msg = lib.nvmlErrorString(ret)
            raise RuntimeError("%s: %s (%d)" % (name, msg.decode() if msg else "error", ret))

    for name, args in (
        ("nvmlInit_v2", []),
        ("nvmlShutdown", []),
        ("nvmlSystemGetDriverVersion", [c_char_p, c_uint]),
        ("nvmlDeviceGetCount_v2", [ctypes.POINTER(c_uint)]),
        ("nvmlDeviceGetHandleByIndex_v2", [c_uint, ctypes.POINTER(c_void_p)]),
        ("nvmlDeviceGetName", [c_void_p, c_char_p, c_uint]),
        ("nvmlDeviceGetCudaComputeCapability", [c_void_p, ctypes.POINTER(c_int), ctypes.POINTER(c_int)]),
        ("nvmlDeviceGetMemoryInfo", [c_void_p, ctypes.POINTER(Memory)]),
    ):
        fn = getattr(lib, name)
        fn.restype = c_int
        fn.argtypes = args
    uuid_fn = getattr(lib, "nvmlDeviceGetUUID", None)
    pci_fn = getattr(lib, "nvmlDeviceGetPciInfo_v3", None)

    check("nvmlInit_v2", lib.nvmlInit_v2())
    try:
        buf = ctypes.create_string_buffer(96)
        check("nvmlSystemGetDriverVersion", lib.nvmlSystemGetDriverVersion(buf, 96))
        driver = buf.value.decode("utf-8", "replace") or None
        count = c_uint(0)
        check("nvmlDeviceGetCount_v2", lib.nvmlDeviceGetCount_v2(ctypes.byref(count)))
        gpus = []
        for i in range(count.value):
            handle = c_void_p()
            check("nvmlDeviceGetHandleByIndex_v2", lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)))
            name = ctypes.create_string_buffer(96)
            check("nvmlDeviceGetName", lib.nvmlDeviceGetName(handle, name, 96))
            major, minor = c_int(0), c_int(0)
            ret = lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))
            cap = "%d.%d" % (major.value, minor.value) if ret == 0 else None
            mem = Memory()
            ret = lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem))
            gpu = {
                "index": i,
                "name": name.value.decode("utf-8", "replace"),
                "compute_cap": cap,
                "memory_mib": int(mem.total // MIB) if ret == 0 else None,
                "uuid": None, "pci_bus_id": None, "mig_mode": None,
            }
            if uuid_fn is not None:
                ubuf = ctypes.create_string_buffer(96)
                if uuid_fn(handle, ubuf, c_uint(96)) == 0:
                    gpu["uuid"] = ubuf.value.decode("utf-8", "replace") or None
            if pci_fn is not None:
                pci = Pci()
                if pci_fn(handle, ctypes.byref(pci)) == 0:
                    gpu["pci_bus_id"] = pci.busId.decode("utf-8", "replace") or None
            gpus.append(gpu)
        return {"gpus": gpus, "driver_version": driver}
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:
            pass


#: The file name the dynamic loader is asked for (``ctypes.CDLL``), and what dlopen(3) says when
#: no folder it searches holds it.
NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_MISSING = "%s: cannot open shared object file: No such file or directory" % NVML_LIBRARY
#: Where glibc's ld.so keeps the libraries ldconfig(8) found (ld.so(8): searched after LD_LIBRARY_PATH).
LD_SO_CACHE = "/etc/ld.so.cache"


def nvml_library_dirs():
    """The folders dlopen(3) may find :data:`NVML_LIBRARY` in without the cache (ld.so(8)):
    ``LD_LIBRARY_PATH``, the trusted default folders (``/lib``, ``/usr/lib``, their ``lib64`` and
    multiarch twins), and where NVIDIA's container runtime and WSL put it."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").replace(";", ":").split(":") if d]
    multiarch = getattr(sys.implementation, "_multiarch", None) or "%s-linux-gnu" % os.uname().machine
    for base in ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"):
        dirs += [base, base + "/" + multiarch]
    dirs += ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib",
             os.path.join(sys.base_prefix, "lib")]
    return dirs


def nvml_library_absent(cache=LD_SO_CACHE, dirs=None):
    """True only when the dynamic loader certainly cannot load :data:`NVML_LIBRARY`: glibc's
    ``ld.so.cache`` is readable and does not name it, and no folder of :func:`nvml_library_dirs`
    holds it. Then the NVML child would fail with :data:`NVML_MISSING`, so it is not started (an
    interpreter start saved on every host without the driver); any doubt (no cache: musl, an
    unreadable one) answers False and the child runs."""
    try:
        with open(cache, "rb") as fh:
            if NVML_LIBRARY.encode("ascii") + b"\0" in fh.read():
                return False
    except OSError:
        return False
    return not any(os.path.exists(os.path.join(d, NVML_LIBRARY)) for d in (nvml_library_dirs() if dirs is None else dirs))


#: What the NVML child runs: this file imported as a module from its path (so Python's bytecode
#: cache spares the child the compile a script run pays), then :func:`nvml_child`.
_NVML_BOOT = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('fleetctl_facts_nvml', "
              "sys.argv[1]); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.nvml_child()")


def probe_nvml(timeout_s=None):
    """GPUs through NVML, queried in a child process bounded by ``timeout_s`` seconds (a wedged
    driver or a ctypes fault cannot hang or kill the facts script): ``(gpus, driver, error)``;
    ``gpus`` is None when it failed. No child starts when the library is certainly absent
    (:func:`nvml_library_absent`): the error is then dlopen's own, :data:`NVML_MISSING`."""
    timeout_s = GPU_PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    if nvml_library_absent():
        return None, None, "nvml: " + NVML_MISSING
    me = os.path.abspath(__file__)
    argv = [sys.executable, "-c", _NVML_BOOT, me] if me.endswith(".py") else [sys.executable, me, "--nvml-child"]
    res = run_bounded(argv, timeout_s)
    if res["error"]:
        return None, None, "nvml: " + res["error"]
    for line in res["out"].splitlines():
        if line.startswith(_MARK):
            try:
                data = json.loads(line[len(_MARK):])
            except ValueError:
                break
            if data.get("error"):
                return None, None, "nvml: " + data["error"]
            return data.get("gpus") or [], data.get("driver_version"), None
    return None, None, "nvml: probe exited %s: %s" % (res["rc"], cause_line(res["out"], res["err"]) or "no output")


def nvml_child():
    """Entry point of ``--nvml-child``: print one marked JSON line with the NVML answer."""
    try:
        data = nvml_query()
    except Exception as exc:
        data = {"error": "%s" % exc}
    sys.stdout.write(_MARK + json.dumps(data) + "\n")
    sys.stdout.flush()


def gpu_fault(gpus):
    """What GPUs in an error state (a ``fault`` of :func:`parse_nvidia_smi_csv`) mean: ``(reason,
    fix)``, or None when no GPU of ``gpus`` has one (pure). The reason names each such GPU (index,
    name, bus id) and the fields' markers; the fix is NVIDIA's for a GPU that needs a reset
    (``nvidia-smi -r``, with no process on the GPU, or a reboot; the Xid in dmesg says why)."""
    faulty = [g for g in gpus or [] if g.get("fault")]
    if not faulty:
        return None
    said = ["GPU %s (%s, bus %s): %s" % (g.get("index"), g.get("name") or "unnamed", g.get("pci_bus_id") or "unknown",
                                         ", ".join("%s %s" % kv for kv in g["fault"].items())) for g in faulty]
    resets = "; ".join("nvidia-smi -r -i %s" % (g.get("pci_bus_id") or g.get("index")) for g in faulty)
    return ("nvidia-smi: %s in an error state: %s" % ("a GPU is" if len(faulty) == 1 else "%d GPUs are" % len(faulty),
                                                      "; ".join(said)),
            "reset the GPU (%s, with no process using it) or reboot the node; see dmesg for Xid errors (79: fallen "
            "off the bus; 48, 94, 95: uncorrectable ECC)" % resets)


def gpu_stack(smi, nvml_gpus, nvml_error, traces, stuck, loaded=None, timeout_s=None):
    """Which case a host is (pure): ``{"status", "reason", "fix", "traces"}``.

    ``warnings``: e.g. more ``/dev/nvidiaN`` files than GPUs listed (a GPU may be missing).
    ``status``: ``"ok"`` (a source listed the GPUs, none in an error state: :func:`gpu_fault`), ``"none"`` (no NVIDIA driver at all: no
    nvidia-smi, no ``/proc/driver/nvidia``, no ``/dev/nvidia*``, NVML not answering: a build
    host, the only case ``fallback_archs`` is for), ``"broken"`` (an NVIDIA stack is installed
    but does not answer: ``reason`` says what failed, ``fix`` what to do; ``too_old`` true when
    the driver predates ``compute_cap`` (R510): the host fails as "driver too old", not as broken).

    Args:
        smi: :func:`probe_nvidia_smi`'s dict, or None when it was not started (``stuck``).
        nvml_gpus, nvml_error: :func:`probe_nvml`'s answer (None, None when not asked).
        traces: :func:`driver_traces`.
        stuck: :func:`stuck_gpu_probes`.
        loaded: the loaded kernel module's version (for the mismatch's message).
    """
    out = {"status": "ok", "reason": None, "fix": None, "traces": list(traces), "warnings": []}
    listed = (smi or {}).get("gpus") or nvml_gpus or []
    files = [t for t in traces if re.match(r"^/dev/nvidia\d+$", t)]
    for bus in (smi or {}).get("inforom") or []:  # the GPU answers: a warning, not a broken stack
        out["warnings"].append("nvidia-smi (exit 14): infoROM is corrupted at gpu %s: %s" % (bus, INFOROM_FIX))
    if listed and len(files) > len(listed):
        out["warnings"].append("%d GPU device files (%s) but %d GPU(s) listed: a GPU may be missing; see dmesg for Xid"
                               % (len(files), ", ".join(files), len(listed)))
    if stuck:
        p = stuck[0]
        out.update(status="broken",
                   reason="an earlier nvidia-smi (pid %d) has been stuck in the kernel for %g s: a GPU may have "
                          "fallen off the bus; see dmesg for Xid; not starting another" % (p["pid"], p["age_s"]),
                   fix="a GPU that has fallen off the bus (Xid 79) needs a GPU reset or a reboot of the host")
        return out
    fault = gpu_fault((smi or {}).get("gpus"))
    if fault:  # listed with exit 0, yet in an error state: as broken as a lost GPU's exit 15
        out.update(status="broken", reason=fault[0], fix=fault[1])
        return out
    if smi and smi.get("gpus"):
        return out
    if nvml_gpus:
        return out
    if smi and smi.get("hung"):
        out.update(status="broken", reason=smi["error"], fix=smi_failure(None, "", timeout_s)[1])
        return out
    if smi and smi.get("too_old"):
        out.update(status="broken", too_old=True, reason=smi["error"], fix=SMI_TOO_OLD_FIX)
        return out
    if smi and smi.get("denied"):
        out.update(status="broken", reason=smi["error"], fix=smi_not_runnable_fix(smi.get("path") or "nvidia-smi"))
        return out
    if smi and not smi.get("missing"):
        if smi.get("rc") is None:
            out.update(status="broken", reason=smi.get("error"), fix="check the NVIDIA driver installation")
        else:
            out.update(status="broken", reason=smi.get("error"),
                       fix=smi_failure(smi["rc"], smi.get("text") or "", loaded=loaded)[1])
        return out
    if traces or nvml_gpus == []:
        where = ", ".join(traces) or "libnvidia-ml.so.1"
        out.update(status="broken",
                   reason="the NVIDIA driver is present (%s) but nvidia-smi is not on PATH and NVML did not list "
                          "a GPU (%s)" % (where, nvml_error or "no GPU"),
                   fix="install the driver's utilities (nvidia-smi, libnvidia-ml.so.1) matching the loaded module"
                       "%s, or put them on PATH" % (" " + loaded if loaded else ""))
        return out
    out["status"] = "none"
    out["reason"] = "no NVIDIA driver on this host (no nvidia-smi, /proc/driver/nvidia or /dev/nvidia*)"
    return out


def gather_gpus(facts, timeout_s=None):
    """Fill ``gpus``, ``gpu_source``, ``gpu_error``, ``gpu_probe_errors``, ``driver_version``,
    ``driver_module_version`` and ``gpu_stack`` (:func:`gpu_stack`); every GPU command is bounded by ``timeout_s`` seconds
    (default :data:`GPU_PROBE_TIMEOUT_S`), and none is started while an earlier nvidia-smi is
    stuck in the kernel (:func:`stuck_gpu_probes`)."""
    timeout_s = GPU_PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    errors = []
    loaded = loaded_driver_version()
    facts.update({"gpus": [], "gpu_source": None, "gpu_error": None, "driver_version": None,
                  "driver_module_version": loaded})
    stuck = stuck_gpu_probes(timeout_s)
    traces = driver_traces()
    smi, nvml_gpus, nvml_error = None, None, None
    if not stuck:
        smi = probe_nvidia_smi(timeout_s, loaded)
        if smi["gpus"]:
            facts.update({"gpus": smi["gpus"], "gpu_source": "nvidia-smi", "driver_version": smi["driver"]})
        else:
            errors.append(smi["error"])
            log(smi["error"])
            if not smi["hung"]:  # NVML would hang on the same driver call
                nvml_gpus, nvml_driver, nvml_error = probe_nvml(timeout_s)
                if nvml_gpus:
                    facts.update({"gpus": nvml_gpus, "gpu_source": "nvml", "driver_version": nvml_driver})
                elif nvml_error:
                    errors.append(nvml_error)
                    log(nvml_error)
    facts["gpu_stack"] = gpu_stack(smi, nvml_gpus, nvml_error, traces, stuck, loaded, timeout_s)
    if facts["driver_version"] is None:  # no source said it (a version mismatch...): the loaded module's
        facts["driver_version"] = loaded
    if stuck:
        errors.append(facts["gpu_stack"]["reason"])
        facts["gpu_stuck_probes"] = stuck
    facts["gpu_probe_errors"] = errors
    if facts["gpu_source"] is None:
        facts["gpu_error"] = "; ".join(errors) or "no GPU source answered"


def versioned_toolkits(pattern=None):
    """The ``/usr/local/cuda-*`` folders (:data:`CUDA_VERSIONED_GLOB`), newest version first."""
    import glob

    def key(path):
        return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(path)))

    return sorted(glob.glob(pattern or CUDA_VERSIONED_GLOB), key=key, reverse=True)


def _home_of(nvcc):
    """The toolkit folder of an nvcc found on a PATH: ``<home>/bin/nvcc``, following a symlink
    such as ``/usr/local/bin/nvcc -> /usr/local/cuda-13.0/bin/nvcc`` to the toolkit it belongs to."""
    path = os.path.realpath(nvcc) if os.path.islink(nvcc) else os.path.abspath(nvcc)
    return os.path.dirname(os.path.dirname(path))


def _nvcc_home_candidates(cuda_home):
    if cuda_home:
        yield "cuda_home var", cuda_home
    env_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env_home:
        yield "CUDA_HOME env", env_home
    yield "/usr/local/cuda", "/usr/local/cuda"
    which = find_program("nvcc")
    if which:
        yield "PATH", _home_of(which)
    for home in versioned_toolkits():
        yield "/usr/local/cuda-*", home


_PATH_MARK = "@@FLEETCTL_PATH@@"


def parse_login_path(text):
    """The PATH an interactive login shell printed between :data:`_PATH_MARK` markers, else ''
    (whatever ~/.profile or ~/.bashrc echo around it is ignored)."""
    m = re.search(re.escape(_PATH_MARK) + r"(.*?)" + re.escape(_PATH_MARK), text)
    return m.group(1) if m else ""


def login_path_nvcc():
    """nvcc on the PATH of the user's *interactive login* shell: ``(home, detail)``.

    ``ssh host cmd`` runs a non-interactive shell, so a toolkit added to PATH in ``~/.profile``
    (login shells only) or in ``~/.bashrc`` after its "not interactive: return" guard is invisible
    to it, though a terminal session finds it. POSIX-style shells and fish are asked; ``home`` is
    None when that PATH has no nvcc either (``detail`` says why).
    """
    shell = os.environ.get("SHELL") or ""
    if not shell:
        try:
            import pwd

            shell = pwd.getpwuid(os.getuid()).pw_shell
        except (ImportError, KeyError):
            shell = ""
    name = os.path.basename(shell)
    show = 'printf "\\n%s%%s%s\\n" ' % (_PATH_MARK, _PATH_MARK)
    if name in ("bash", "zsh", "ksh", "mksh", "sh", "dash", "ash", "yash"):
        argv = [shell, "-l", "-i", "-c", show + '"$PATH"']
    elif name == "fish":
        argv = [shell, "-l", "-i", "-c", show + "(string join : $PATH)"]
    else:
        return None, "login shell %s not asked" % (shell or "unknown")
    rc, out, err, error = run_command(argv, timeout_s=min(TIMEOUT_S, 20.0), env=clean_env())
    path = parse_login_path(out)
    if not path:
        return None, "%s -l -i printed no PATH (%s)" % (name, error or "exit %s" % rc)
    for folder in path.split(":"):
        if folder and _is_exe(os.path.join(folder, "nvcc")):
            return _home_of(os.path.join(folder, "nvcc")), "found by %s -l -i" % name
    return None, "no nvcc on the interactive login PATH of %s either" % name


def find_cuobjdump(home, site_packages):
    """``(path, source)`` of cuobjdump: ``<home>/bin``, then PATH, then the venv's pip-installed
    copy (PyPI ``nvidia-cuda-cuobjdump`` puts it in ``site-packages/nvidia/*/bin``)."""
    if home and _is_exe(os.path.join(home, "bin", "cuobjdump")):
        return os.path.join(home, "bin", "cuobjdump"), "cuda home"
    which = find_program("cuobjdump")
    if which:
        return which, "PATH"
    if site_packages:
        base = os.path.join(site_packages, "nvidia")
        try:
            subdirs = sorted(os.listdir(base))
        except OSError:
            subdirs = []
        for sub in subdirs:
            path = os.path.join(base, sub, "bin", "cuobjdump")
            if _is_exe(path):
                return path, "venv"
    return None, None


def probe_toolkit(home, source, cache=None):
    """One toolkit: ``{home, home_realpath, nvcc, nvcc_realpath, version, build, archs, codes, source, errors}``
    (``nvcc --version``, ``--list-gpu-arch``, ``--list-gpu-code``; kept in ``cache`` while
    nvcc, the file it resolves to and ``bin/nvcc.profile`` are unchanged, :class:`AnswerCache`)."""
    nvcc = os.path.join(home, "bin", "nvcc")
    real = os.path.realpath(nvcc)
    answer = remembered(cache, ["nvcc", 2, nvcc, real], [nvcc, real, os.path.join(home, "bin", "nvcc.profile")],
                        lambda: ask_nvcc(nvcc), lambda a: not a["errors"])
    return dict(answer, home=home, home_realpath=os.path.realpath(home), nvcc=nvcc, nvcc_realpath=real, source=source)


def ask_nvcc(nvcc):
    """``{version, build, archs, codes, errors}`` from the three nvcc commands."""
    tk = {"version": None, "build": None, "archs": None, "codes": None, "errors": []}
    rc, out, err, error = run_command([nvcc, "--version"])
    if error or rc != 0:
        tk["errors"].append(error or "nvcc --version: exit %s: %s" % (rc, cause_line(out, err)))
    else:
        tk["version"] = parse_nvcc_version(out)
        tk["build"] = parse_nvcc_build(out)
        if tk["version"] is None:
            tk["errors"].append("nvcc --version: no release number in %r" % _first_line(out))
    for key, flag in (("archs", "--list-gpu-arch"), ("codes", "--list-gpu-code")):
        rc, out, err, error = run_command([nvcc, flag])
        if error or rc != 0:
            tk["errors"].append(error or "nvcc %s: exit %s: %s" % (flag, rc, cause_line(out, err)))
        else:
            tk[key] = parse_word_list(out)
    return tk


def probe_cuda(cuda_home, cache=None):
    """The CUDA toolkit as the ``cuda`` dict (see the module docstring).

    Search order: ``--cuda-home`` (an error is recorded when it lacks ``bin/nvcc``, and the
    search goes on), ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda``, ``nvcc`` on PATH, then
    ``/usr/local/cuda-*`` (newest first); when none has nvcc, the interactive login shell's PATH
    (:func:`login_path_nvcc`). Every distinct toolkit found (by nvcc's real path) is probed and
    listed in ``toolkits``; the first is the one described. ``cuobjdump`` is filled in later by
    :func:`find_cuobjdump` (it may live in the venv).
    """
    cuda = {
        "home": None, "home_realpath": None, "nvcc": None, "nvcc_realpath": None, "version": None, "build": None,
        "archs": None, "codes": None,
        "cuobjdump": None, "cuobjdump_source": None, "cccl_include": None,
        "source": None, "requested_home": cuda_home, "toolkits": [], "skipped": [], "error": None,
    }
    errors = []
    found, seen = [], set()
    candidates = list(_nvcc_home_candidates(cuda_home))
    for source, home in candidates:
        nvcc = os.path.join(home, "bin", "nvcc")
        if _is_exe(nvcc):
            real = os.path.realpath(nvcc)
            if found and source == "PATH" and not os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")):
                continue  # an nvcc wrapper script on PATH (/usr/local/bin/nvcc), not a toolkit folder
            if real not in seen:
                seen.add(real)
                found.append(probe_toolkit(home, source, cache))
        elif source == "cuda_home var":
            errors.append("cuda_home %s has no executable bin/nvcc" % home)
        elif source == "CUDA_HOME env":
            errors.append("CUDA_HOME %s has no executable bin/nvcc" % home)
            cuda["skipped"].append({"home": home, "source": source, "why": "no executable bin/nvcc"})
    if not found:
        home, detail = login_path_nvcc()
        if home:
            found.append(probe_toolkit(home, "interactive login PATH", cache))
            log("cuda: nvcc only on the interactive login PATH: %s" % home)
        else:
            looked = [h + "/bin" for _, h in candidates] + ["PATH", detail]
            errors.append("nvcc not found (looked in %s)" % ", ".join(looked))
    if found:
        first = found[0]
        cuda.update({k: first.get(k) for k in ("home", "home_realpath", "nvcc", "nvcc_realpath", "version", "build",
                                                "archs", "codes", "source")})
        errors.extend(first["errors"])
        cccl = os.path.join(first["home"], "include", "cccl")
        cuda["cccl_include"] = cccl if os.path.isdir(cccl) else None
    cuda["toolkits"] = [{k: v for k, v in tk.items() if k not in ("errors", "codes")} for tk in found]
    if errors:
        cuda["error"] = "; ".join(errors)
        log("cuda: " + cuda["error"])
    return cuda


# Runs in the probed interpreter (any Python >= 3.8); prints two marked JSON lines so that a torch
# import that hangs past the timeout still leaves the interpreter facts behind.
_PYTHON_PROBE = r"""
import json, os, sys, sysconfig
MARK = %(mark)r
try:
    deps = probe_deps()
except Exception:
    deps = None
info = {
    "version": "%%d.%%d.%%d" %% sys.version_info[:3],
    "implementation": sys.implementation.name,
    "tag": {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
           + "%%d%%d" %% sys.version_info[:2],
    "site_packages": sysconfig.get_paths().get("purelib"),
    "prefix": sys.prefix,
    "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    "conda_env": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
    "packages": {},
}
_managed = os.path.join(sysconfig.get_paths().get("stdlib") or "", "EXTERNALLY-MANAGED")
info["externally_managed"] = _managed if not info["in_venv"] and os.path.isfile(_managed) else None
try:
    info["platform"] = platform_facts()
except Exception as exc:
    info["platform"] = {"error": "%%s: %%s" %% (type(exc).__name__, exc)}
try:
    info["packages"] = dist_versions(%(packages)r)
except Exception as exc:
    info["packages_error"] = "%%s: %%s" %% (type(exc).__name__, exc)
info["_deps"] = deps
sys.stdout.write(MARK + json.dumps(info) + "\n")
sys.stdout.flush()
""" % {"mark": _MARK, "packages": PROBED_PACKAGES}

# Installed distributions' versions as importlib.metadata.version() gives them (the first
# ``NAME-*.dist-info`` / ``.egg-info`` along sys.path, names compared normalized as PEP 503 says, the
# ``Version`` header of its METADATA / PKG-INFO), without importing importlib.metadata: that import
# (email, zipfile, csv...) is most of the interpreter probe's time. tests/test_facts_script.py
# compares the two on a real venv.
DIST_VERSIONS = r"""
import os, re, sys


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_header(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    return None
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def dist_versions(names, path=None):
    want = {}
    for n in names:
        want.setdefault(_norm(n), []).append(n)
    found = {}
    for entry in sys.path if path is None else path:
        folder = entry or "."
        try:
            listing = os.listdir(folder)
        except OSError:
            continue
        for item in listing:
            if not item.endswith((".dist-info", ".egg-info")):
                continue
            key = _norm(item.rsplit(".", 1)[0].split("-")[0])
            if key not in want or key in found:
                continue
            full = os.path.join(folder, item)
            if os.path.isdir(full):
                full = os.path.join(full, "METADATA" if item.endswith(".dist-info") else "PKG-INFO")
            found[key] = _version_header(full)
    return {n: found.get(_norm(n)) for n in names}
"""
_PYTHON_PROBE = _PYTHON_PROBE.replace("MARK = ", DIST_VERSIONS + "\nMARK = ", 1)

# The interpreter's platform, as pip on it decides which wheels fit (PEP 425 / PEP 600 / PEP 656,
# packaging.tags): ``sysconfig.get_platform()`` (which honours CPython's ``_PYTHON_HOST_PLATFORM``,
# as pip does), ``platform.machine()``, and the C library the interpreter runs on: glibc from
# ``os.confstr("CS_GNU_LIBC_VERSION")`` (else ``platform.libc_ver()``), musl from the ELF
# interpreter (PT_INTERP) of ``sys.executable`` and its "Version" line, as packaging._musllinux
# reads it. Any Python >= 3.8, stdlib only.
PLATFORM_READER = r"""
import os, platform, struct, subprocess, sysconfig


def _elf_interp(path):
    with open(path, "rb") as f:
        ident = f.read(16)
        if ident[:4] != b"\x7fELF":
            return None
        is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        f.seek(0)
        head = f.read(64 if is64 else 52)
        fmt = end + ("QQ" if is64 else "II")
        phoff, = struct.unpack_from(end + ("Q" if is64 else "I"), head, 0x20 if is64 else 0x1C)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36 if is64 else 0x2A)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(phentsize)
            if struct.unpack_from(end + "I", ph, 0)[0] != 3:  # PT_INTERP
                continue
            off, _ = struct.unpack_from(fmt, ph, 8 if is64 else 4)
            size, = struct.unpack_from(end + ("Q" if is64 else "I"), ph, 32 if is64 else 16)
            f.seek(off)
            return f.read(size).rstrip(b"\0").decode("ascii", "replace")
    return None


def platform_facts():
    out = {"machine": platform.machine(), "sysconfig": sysconfig.get_platform(), "libc": None,
           "libc_version": None, "interp": None, "host_platform_env": os.environ.get("_PYTHON_HOST_PLATFORM"),
           "bits": struct.calcsize("P") * 8}
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        glibc = None
    if glibc and glibc.split()[0] == "glibc":
        out["libc"], out["libc_version"] = "glibc", glibc.split()[1]
    try:
        out["interp"] = _elf_interp(os.path.realpath(sys.executable))
    except (OSError, struct.error):
        pass
    if out["libc"] is None and out["interp"] and "musl" in out["interp"]:
        out["libc"] = "musl"
        try:
            p = subprocess.run([out["interp"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
            for line in p.stderr.decode("utf-8", "replace").splitlines():
                if line.startswith("Version "):
                    out["libc_version"] = line.split()[1]
        except (OSError, subprocess.SubprocessError):
            pass
    if out["libc"] is None:
        name, version = platform.libc_ver()
        if name == "glibc" and version:
            out["libc"], out["libc_version"] = "glibc", version
    return out
"""
_PYTHON_PROBE = _PYTHON_PROBE.replace("MARK = ", PLATFORM_READER + "\nMARK = ", 1)

# What the interpreter probe's answer depends on, statted (file_stat) in the probe before it reads
# anything, so that a kept answer (AnswerCache) is used again only while they are unchanged: the
# interpreter and the file it resolves to, pyvenv.cfg, every sys.path entry (a folder's mtime
# changes when an entry is added, removed or renamed in it: pip installing, upgrading or removing a
# distribution renames its .dist-info), the site folders and the user site even where they do not
# exist yet (site adds them only where they do), every .pth file of the site folders (their lines
# are sys.path entries), torch's files that read_torch reads, and the ELF interpreter (the C
# library whose version platform_facts reports).
DEPS_READER = r"""
def probe_deps():
    import site
    import importlib.util

    exe = os.path.realpath(sys.executable)
    paths = [sys.executable, exe, os.path.join(sys.prefix, "pyvenv.cfg")]
    paths += [os.path.abspath(p or ".") for p in sys.path]
    sites = []
    try:
        sites += list(site.getsitepackages())
    except Exception:
        pass
    if isinstance(getattr(site, "USER_SITE", None), str):
        sites.append(site.USER_SITE)
    paths += sites
    for folder in sites:
        try:
            paths += [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".pth")]
        except OSError:
            pass
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        root = os.path.dirname(spec.origin)
        paths += [root, spec.origin, os.path.join(root, "lib")] + [os.path.join(root, p) for p in (
            "version.py", os.path.join("lib", "libc10.so"), os.path.join("lib", "libtorch_python.so"))]
        paths += [os.path.join(root, n) for n in sorted(os.listdir(root)) if n.startswith("_C.") and n.endswith(".so")]
    try:
        interp = _elf_interp(exe)
    except (OSError, struct.error):
        interp = None
    if interp:
        paths.append(interp)
    seen, out = set(), []
    for p in paths:
        if p not in seen:
            seen.add(p)
            out.append([p, file_stat(p)])
    return out
"""
_PYTHON_PROBE = _PYTHON_PROBE.replace("MARK = ", FILE_STAT + DEPS_READER + "\nMARK = ", 1)

# torch's facts, read WITHOUT importing torch (an import costs seconds of CPU on every host):
# torch.__version__ and torch.version.cuda are the literals of torch/version.py (torch imports them
# from there); torch._C._GLIBCXX_USE_CXX11_ABI is how torch's C++ was compiled, which the C++
# mangling of libc10.so's exported names shows (std::string is std::__cxx11::basic_string only
# with the new ABI); torch.cuda.get_arch_list() on a GPU host is the CUDA_ARCH_FLAGS string
# compiled into libtorch_python.so (torch/csrc/cuda/Module.cpp), empty for a CPU build.
# tests/test_facts_script.py checks each against `import torch`. Any Python >= 3.8, stdlib only.
TORCH_READER = r"""
import ast, os, re, struct


def _elf_sections(path, wanted):
    # {name: bytes} of the ELF sections named in wanted (ELF32/64, either byte order)
    out = {}
    with open(path, "rb") as f:
        ident = f.read(16)
        if ident[:4] != b"\x7fELF":
            return out
        is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        f.seek(0)
        head = f.read(64 if is64 else 52)
        if is64:
            shoff, = struct.unpack_from(end + "Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x3A)
        else:
            shoff, = struct.unpack_from(end + "I", head, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x2E)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        hdrs = []
        for i in range(shnum):
            if is64:
                name, _, _, _, off, size = struct.unpack_from(end + "IIQQQQ", table, i * shentsize)
            else:
                name, _, _, _, off, size = struct.unpack_from(end + "IIIIII", table, i * shentsize)
            hdrs.append((name, off, size))
        _, stroff, strsize = hdrs[shstrndx]
        f.seek(stroff)
        names = f.read(strsize)
        for name, off, size in hdrs:
            label = names[name:names.index(b"\0", name)].decode("ascii", "replace")
            if label in wanted:
                f.seek(off)
                out[label] = f.read(size)
    return out


# torch's own shared objects, as DT_NEEDED names them in .dynstr: its wheels ship them in torch/lib
_OWN_LIB = re.compile(rb"(?<=\0)(lib(?:torch|c10|shm)[A-Za-z0-9_.+-]*\.so[0-9.]*)(?=\0)")


def _missing_own_libs(root):
    # the libraries of torch's own (_OWN_LIB) that torch._C or libtorch_python.so needs and torch/lib
    # lacks (one moved aside, a half-finished install): `import torch` fails in the dynamic loader
    lib = os.path.join(root, "lib")
    objs = [os.path.join(root, n) for n in sorted(os.listdir(root)) if n.startswith("_C.") and n.endswith(".so")]
    objs.append(os.path.join(lib, "libtorch_python.so"))
    missing = []
    for obj in objs:
        if not os.path.exists(obj):
            continue
        for m in _OWN_LIB.finditer(_elf_sections(obj, (".dynstr",)).get(".dynstr", b"")):
            name = m.group(1).decode("ascii")
            if not os.path.exists(os.path.join(lib, name)) and name not in missing:
                missing.append(name)
    return missing


def _version_literals(path):
    found = {}
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        name = getattr(target, "id", None)
        if name and getattr(node, "value", None) is not None:
            try:
                found[name] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


_ARCHS = re.compile(rb"(?<![\x21-\x7e])((?:sm|compute)_[0-9]+[a-z]?(?: (?:sm|compute)_[0-9]+[a-z]?)*)\0")


def read_torch():
    import importlib.util

    t = {"torch": None, "torch_cuda": None, "torch_file": None, "torch_error": None,
         "torch_cxx11_abi": None, "torch_arch_list": None}
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        t["torch_error"] = "ModuleNotFoundError: No module named 'torch'"
        return t
    root = os.path.dirname(spec.origin)
    t["torch_file"] = spec.origin
    lib = os.path.join(root, "lib")
    missing = [p for p in ("version.py", os.path.join("lib", "libc10.so"), os.path.join("lib", "libtorch_python.so"))
               if not os.path.exists(os.path.join(root, p))]
    if "version.py" in missing:  # without it `import torch` fails too
        t["torch_error"] = "torch at %s is incomplete: %s missing" % (root, ", ".join(missing))
        return t
    # version.py alone decides the version (a torch without its shared objects, such as a
    # stand-in, has no ABI or arch list to read: those stay None)
    v = _version_literals(os.path.join(root, "version.py"))
    t["torch"], t["torch_cuda"] = v.get("__version__"), v.get("cuda")
    dynstr = b""
    if os.path.join("lib", "libc10.so") not in missing:
        dynstr = _elf_sections(os.path.join(lib, "libc10.so"), (".dynstr",)).get(".dynstr", b"")
    if b"St7__cxx11" in dynstr:
        t["torch_cxx11_abi"] = True
    elif re.search(rb"(?:RKSs|NSs|Ss[A-Z0-9_E])", dynstr):
        t["torch_cxx11_abi"] = False
    gone = _missing_own_libs(root)
    if gone:  # the version is known, but torch does not import: what the import would say
        t["torch_error"] = "ImportError: %s: cannot open shared object file: No such file or directory" % gone[0]
    if not t["torch_cuda"] and not v.get("hip"):
        t["torch_arch_list"] = []
    elif os.path.join("lib", "libtorch_python.so") not in missing:
        rodata = _elf_sections(os.path.join(lib, "libtorch_python.so"), (".rodata",)).get(".rodata", b"")
        found = sorted((m.group(1) for m in _ARCHS.finditer(rodata)), key=len)
        t["torch_arch_list"] = found[-1].decode("ascii").split() if found else None
    return t
"""

_PYTHON_PROBE += TORCH_READER + r"""
try:
    t = read_torch()
except (OSError, SyntaxError) as exc:  # the host's torch: files unreadable, a version.py that does not parse
    t = {"torch_error": "cannot read torch's files: %s: %s" % (type(exc).__name__, exc)}
except BaseException as exc:  # the reader's own fault: says nothing about the host's torch
    t = {"torch_probe_error": "fleetctl's probe read_torch failed: %s: %s" % (type(exc).__name__, exc)}
sys.stdout.write(MARK + json.dumps(t) + "\n")
sys.stdout.flush()
if t.get("torch") and not t.get("torch_error") and not t.get("torch_probe_error"):
    # the files read fine: now the import itself, as verify and the build will do it (this
    # interpreter, this login's limits: `ulimit -v` makes the loader fail to map libtorch_cpu.so)
    import time
    sys.dont_write_bytecode = True  # facts never write into the venv
    started = time.time()
    try:
        import torch  # noqa: F401
        r = {"torch_import": {"ok": True, "error": None}}
    except (Exception, SystemExit) as exc:
        line = ("%s: %s" % (type(exc).__name__, exc)).strip().splitlines()[0][:400]
        r = {"torch_import": {"ok": False, "error": line}, "torch_error": line}
    r["torch_import"]["seconds"] = round(time.time() - started, 3)
    sys.stdout.write("\n" + MARK + json.dumps(r) + "\n")  # on a line of its own, whatever the import printed
    sys.stdout.flush()
"""

#: Resource limits a child inherits that decide whether ``import torch`` works (``ulimit -v``
#: makes the loader fail to map torch's libraries): part of the interpreter probe's cache key.
IMPORT_RLIMITS = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_NOFILE", "RLIMIT_MEMLOCK")
#: Environment variables the dynamic loader reads (ld.so(8)): part of that key too.
LOADER_ENV = ("LD_LIBRARY_PATH", "LD_PRELOAD")
#: ``PYTHON*`` variables left out of the interpreter probe's cache key: they change no answer.
KEY_IGNORED_ENV = ("PYTHONDONTWRITEBYTECODE",)


def import_limits():
    """``[[name, soft, hard]]`` of :data:`IMPORT_RLIMITS` for this process (``-1``: unlimited)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Linux
        return []
    out = []
    for name in IMPORT_RLIMITS:
        if hasattr(resource, name):
            soft, hard = resource.getrlimit(getattr(resource, name))
            out.append([name, soft, hard])
    return out


def denied_on_way(path):
    """The first folder on the way to ``path`` (its links followed) that this user may not enter,
    or ``path``'s target itself when it is a file this user may not run; None when neither.
    ``os.path.exists`` is False for both a missing file and one behind such a folder, so a venv
    whose python links into ``/root/.pyenv`` (made by root) read "which does not exist"."""
    real = os.path.realpath(path)
    folder = "/"
    for part in real.split("/")[1:-1]:
        folder = os.path.join(folder, part)
        if os.path.isdir(folder) and not os.access(folder, os.X_OK):
            return folder
    if os.path.isfile(real) and not os.access(real, os.X_OK):
        return real
    return None


def login_user():
    """This process's user name (``uid N`` where the passwd database has none)."""
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return "uid %d" % os.geteuid()


def denied_message(exe, blocked):
    """One line: ``exe`` (the venv's python) cannot be run by this user, ``blocked`` says where."""
    user = login_user()
    real = os.path.realpath(exe)
    what = "%s is a symlink to %s, which" % (exe, real) if real != exe else exe
    where = ("user %s may not enter %s" % (user, blocked) if blocked != real
             else "user %s may not execute it" % user)
    return ("%s the login user %s cannot run (Permission denied: %s): the base interpreter the venv was made from "
            "is not readable by that user" % (what, user, where))


def probe_python(venv, cache=None):
    """The interpreter builds will use, as the ``python`` dict (see the module docstring).

    ``<venv>/bin/python3`` when ``venv`` is given, else the interpreter running this script.
    One child process of that interpreter reports its version, tag, purelib, package versions
    and torch's facts read from its files, then imports torch when those read fine (timeout
    ``PYTHON_PROBE_TIMEOUT_S`` seconds for the whole child). Its answer is kept in ``cache`` while
    every file it depends on (:data:`DEPS_READER`), the loader's variables and this process's
    resource limits (:func:`import_limits`) are unchanged.
    """
    if venv:
        exe = os.path.join(venv, "bin", "python3")
        if not os.path.exists(exe) and os.path.exists(os.path.join(venv, "bin", "python")):
            exe = os.path.join(venv, "bin", "python")
    else:
        exe = sys.executable
    py = {
        "executable": exe, "venv": venv, "exists": _is_exe(exe), "version": None, "tag": None,
        "implementation": None, "site_packages": None, "prefix": None, "in_venv": None,
        "conda_env": None, "externally_managed": None, "packages": {}, "torch": None, "torch_cuda": None, "torch_file": None,
        "torch_error": None, "torch_cxx11_abi": None, "torch_arch_list": None, "error": None,
        "torch_probe_error": None, "torch_import": None,
    }
    if not py["exists"] and os.path.islink(exe) and not os.path.exists(exe) and not denied_on_way(exe):
        # a venv's python is a link to the interpreter it was made from: that one is gone
        py["dangling"] = os.path.realpath(exe)
        py["error"] = ("%s is a symlink to %s, which does not exist: the base interpreter the venv was made from "
                       "is gone (Python upgraded or removed)" % (exe, py["dangling"]))
    elif not py["exists"] and denied_on_way(exe):
        # there, but not for this user: a venv made by root from root's pyenv (its folder 0700)
        py["denied"] = denied_on_way(exe)
        py["error"] = denied_message(exe, py["denied"])
    elif not py["exists"]:
        py["error"] = "%s: no such interpreter" % exe
    if not py["exists"]:
        py["torch_error"] = "interpreter missing"
        log("python: " + py["error"])
        return py
    env = clean_env()
    # run in /, not the login's folder: ``-c`` puts the working folder first on sys.path, and what
    # a build's interpreter holds must not depend on where the facts ran (nor a kept answer on
    # every file added to a home folder); sys.path also depends on the PYTHON* variables
    # and so does the import of torch on the loader's variables and this login's limits (a cache
    # must not hide a `ulimit -v` added to ~/.bashrc, nor one taken away)
    # (not PYTHONDONTWRITEBYTECODE: it decides whether .pyc files are written, never what is found
    # or imported, and ``--read-only`` sets it, so ``fleetctl facts`` reuses a deploy's answer)
    key = json.dumps(["python", exe, sorted((k, v) for k, v in env.items()
                                            if k.startswith(("PYTHON", "_PYTHON")) and k not in KEY_IGNORED_ENV),
                      [[k, env.get(k)] for k in LOADER_ENV], import_limits()])
    parts = cache.get(key) if cache is not None else None
    rc, out, err, error = 0, "", "", None
    if parts is not None:
        parts = json.loads(json.dumps(parts))  # a copy: the caller's edits never reach the file
    else:
        before = [[p, file_stat(p)] for p in (exe, os.path.realpath(exe))]
        rc, out, err, error = run_command([exe, "-c", _PYTHON_PROBE], timeout_s=PYTHON_PROBE_TIMEOUT_S, env=env, cwd="/")
        parts = []
        for line in out.splitlines():
            if line.startswith(_MARK):
                try:
                    parts.append(json.loads(line[len(_MARK):]))
                except ValueError:
                    pass
        deps = parts[0].pop("_deps", None) if parts else None
        if (cache is not None and rc == 0 and len(parts) in (2, 3) and deps
                and not parts[1].get("torch_probe_error") and "packages_error" not in parts[0]
                and "error" not in (parts[0].get("platform") or {})):
            cache.put(key, before + deps, parts)
    for part in parts:
        py.update(part)
    if not parts:
        py["error"] = error or "probe exited %s: %s" % (rc, cause_line(out, err) or "no output")
        py["torch_error"] = py["torch_error"] or "interpreter probe failed"
    elif len(parts) == 1:
        py["torch_probe_error"] = "fleetctl's probe read_torch did not answer: " + (
            error or "probe exited %s: %s" % (rc, cause_line("", err) or "no output"))
    elif len(parts) == 2 and py.get("torch") and not py.get("torch_error") and not py.get("torch_probe_error"):
        if error:  # past the deadline: a slow file system is no broken torch (a note, not an error)
            py["torch_import"] = {"ok": None, "error": "import torch did not finish: %s" % error, "seconds": None}
        else:  # the interpreter died in the import (a crash in a library's constructor)
            line = "import torch ended the interpreter: exit %s: %s" % (rc, cause_line("", err) or "no output")
            py["torch_import"] = {"ok": False, "error": line, "seconds": None}
            py["torch_error"] = line
    if py.get("site_packages"):
        try:
            py["site_packages_fs"] = site_packages_fs(py["site_packages"])
        except OSError as exc:
            log("python: site-packages: %s" % exc)
        try:
            py["installed_locks"] = installed_locks(py["site_packages"])
        except (OSError, ValueError) as exc:
            log("python: installed %s: %s" % (DEPLOYED_DIST, exc))
    if py["error"]:
        log("python: " + py["error"])
    if py["torch_error"]:
        log("python: torch: " + py["torch_error"])
    if py["torch_probe_error"]:
        log("python: torch: " + py["torch_probe_error"])
    return py


def probe_tool(name, venv, version_flag="--version", parse=parse_cmake_version, cache=None):
    """``{path, version, error}`` for a build tool: ``<venv>/bin/<name>`` first (pip's cmake or
    ninja are what the build's PATH will find), then PATH. Its version is kept in ``cache`` while
    the file and the one it resolves to are unchanged (pip rewrites a console script when it
    installs; :class:`AnswerCache`)."""
    path = None
    if venv and _is_exe(os.path.join(venv, "bin", name)):
        path = os.path.join(venv, "bin", name)
    else:
        path = find_program(name)
    tool = {"path": path, "version": None, "error": None}
    if not path:
        tool["error"] = "%s: not found" % name
        return tool

    def ask():
        rc, out, err, error = run_command([path, version_flag])
        if error or rc != 0:
            return {"version": None, "error": error or "%s %s: exit %s: %s" % (name, version_flag, rc,
                                                                                 cause_line(out, err))}
        return {"version": parse(out), "error": None}

    real = os.path.realpath(path)
    tool.update(remembered(cache, ["tool", path, real, version_flag], [path, real], ask, lambda a: a["error"] is None))
    return tool


def find_uv():
    """Path of uv: PATH, then the installer's usual places (~/.local/bin, ~/.cargo/bin)."""
    which = find_program("uv")
    if which:
        return which
    home = os.path.expanduser("~")
    for path in (os.path.join(home, ".local", "bin", "uv"), os.path.join(home, ".cargo", "bin", "uv")):
        if _is_exe(path):
            return path
    return None


def _read(path):
    with open(path, "r", errors="replace") as f:
        return f.read()


def disk_free_mib(path):
    """``(MiB free to this user at path or its nearest existing parent, that parent)``."""
    probe = os.path.abspath(os.path.expanduser(path or "."))
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize // MIB, probe


def clean_env():
    """This process's environment without :data:`STRAY_ENV_NAMES` (for the probes)."""
    return {k: v for k, v in os.environ.items() if k not in STRAY_ENV_NAMES}


def login_env():
    """The :data:`LOGIN_ENV_NAMES` the login environment sets, with their values."""
    return {name: os.environ[name] for name in LOGIN_ENV_NAMES if os.environ.get(name)}


def fs_info(path):
    """``{path, free_mib, noexec, readonly, writable}`` of the file system holding ``path`` (or its
    nearest existing parent, which ``path`` then names)."""
    probe = os.path.abspath(os.path.expanduser(path or "."))
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return {"path": probe, "free_mib": st.f_bavail * st.f_frsize // MIB,
            "noexec": bool(st.f_flag & getattr(os, "ST_NOEXEC", 8)),
            "readonly": bool(st.f_flag & getattr(os, "ST_RDONLY", 1)),
            "writable": os.access(probe, os.W_OK | os.X_OK)}


def site_packages_fs(path):
    """:func:`fs_info` of a venv's site-packages, with its ``owner`` and this login ``user`` (names,
    else uids), ``owned`` (the login's uid is the folder's owner) and its ``mode`` (octal, ``"0555"``):
    where pip writes an install, so a venv another user owns, or one its owner made read-only
    (``chmod a-w``), is named before one, with the fix that applies."""
    import pwd

    info = fs_info(path)

    def name(uid):
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    st = os.stat(info["path"])
    info["owner"], info["user"] = name(st.st_uid), name(os.geteuid())
    # the login owns it: a folder it cannot write is one whose write bit it may set again itself
    info["owned"], info["mode"] = st.st_uid == os.geteuid(), "%04o" % (st.st_mode & 0o7777)
    return info


#: The distribution the shipped deploy installs (fleetctl.facts.venv.DEPLOYED_PACKAGE).
DEPLOYED_DIST = "fp4_kernels"


def installed_locks(site_packages, dist=DEPLOYED_DIST):
    """The folders of the installed ``dist`` this login cannot replace, read as the install-state
    probe reads them for ``pip_install``'s preflight (fleetctl.tasks.venv_state.STATE_SCRIPT's
    ``locked``, ``n_locked``, ``locked_tops``, ``login_user``): every folder holding a file its
    ``RECORD`` lists, up to ``site_packages``, that this user may not write and enter (pip moves
    them aside to replace it; one a ``sudo pip install`` left owned by root stops it half-way).
    ``{dist, locked: [{path, owner}] (the first 3), n_locked, locked_tops, login_user}``, or None
    when no ``dist`` is installed in ``site_packages``; and, as the probe reads them too, its
    folders and files (not ``__pycache__``) less readable than ``site_packages`` (``unreadable``:
    ``"REL MODE"``, the first 3, folders first; ``n_unreadable``; ``site_mode``)."""
    import pwd

    def owner(path):
        try:
            return pwd.getpwuid(os.stat(path).st_uid).pw_name
        except (KeyError, OSError):
            return None
    want = re.sub(r"[-_.]+", "_", dist).lower()
    try:
        infos = sorted(n for n in os.listdir(site_packages) if n.endswith(".dist-info")
                       and re.sub(r"[-_.]+", "_", n[:-len(".dist-info")].split("-")[0]).lower() == want)
    except OSError:
        return None
    if not infos:
        return None
    root = os.path.realpath(site_packages)
    folders = set()
    try:
        record = _read(os.path.join(site_packages, infos[0], "RECORD"))
    except OSError:
        record = ""
    for line in record.splitlines():
        d = os.path.dirname(os.path.normpath(os.path.join(site_packages, line.rsplit(",", 2)[0])))
        while os.path.realpath(d).startswith(root + os.sep) and d not in folders:
            folders.add(d)
            d = os.path.dirname(d)
    locked = [{"path": d, "owner": owner(d)} for d in sorted(folders)
              if os.path.isdir(d) and not os.access(d, os.W_OK | os.X_OK)]
    # folders and files lacking a read (folders: read or search) bit site-packages gives group or
    # other: an install under a login's umask 077 (fleetctl.tasks.venv_modes), others cannot import it
    site_mode = os.stat(site_packages).st_mode & 0o777
    unreadable = []
    for d in sorted(folders):
        mode = os.stat(d).st_mode if os.path.isdir(d) and "__pycache__" not in d else site_mode
        if mode & site_mode & 0o055 != site_mode & 0o055:
            unreadable.append("%s/ %04o" % (os.path.relpath(d, site_packages), mode & 0o777))
    skip = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")  # the probe's order and files
    for line in sorted(l for l in record.splitlines() if l and not l.split(",")[0].endswith(skip)):
        rel = line.rsplit(",", 2)[0]
        path = os.path.normpath(os.path.join(site_packages, rel))
        try:
            mode = os.stat(path).st_mode if not rel.startswith("..") and "__pycache__" not in rel else site_mode
        except OSError:
            continue
        if mode & site_mode & 0o044 != site_mode & 0o044:
            unreadable.append("%s %04o" % (rel, mode & 0o777))
    try:
        login = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        login = str(os.geteuid())
    tops = sorted({os.path.join(site_packages, os.path.relpath(l["path"], site_packages).split(os.sep)[0])
                   for l in locked})
    return {"dist": dist, "locked": locked[:3], "n_locked": len(locked), "locked_tops": tops, "login_user": login,
            "unreadable": unreadable[:3], "n_unreadable": len(unreadable), "site_mode": "%04o" % site_mode}


def probe_cgroup(proc_cgroup="/proc/self/cgroup", mountinfo="/proc/self/mountinfo"):
    """This process's cgroup limits (v2, else v1): ``{version, memory_dir, memory_limit_mib,
    memory_used_mib, cpu_quota, memory_limit_file}``. Every ancestor's limit applies, so the lowest
    limit from the process's cgroup up to the mounted root is reported."""
    out = {"version": None, "memory_dir": None, "memory_limit_mib": None, "memory_used_mib": None,
           "cpu_quota": None, "memory_limit_file": None}
    paths = parse_proc_cgroup(_read(proc_cgroup))
    mounts = parse_mountinfo_cgroups(_read(mountinfo))

    def lowest(mount, path, name, parse):
        best, where = None, None
        folder = cgroup_dir(mount, path)
        while True:
            try:
                value = parse(_read(os.path.join(folder, name)))
            except (OSError, ValueError):
                value = None
            if value is not None and (best is None or value < best):
                best, where = value, os.path.join(folder, name)
            if folder == mount[1] or len(folder) <= len(mount[1]):
                return best, where
            folder = os.path.dirname(folder)

    v2_controllers = ""
    if paths["v2"] is not None and mounts["v2"]:
        try:  # a hybrid host mounts an empty v2 tree beside the v1 controllers
            v2_controllers = _read(os.path.join(mounts["v2"][1], "cgroup.controllers"))
        except OSError:
            v2_controllers = ""
    if "memory" in v2_controllers.split():
        out["version"] = 2
        mem, cpu = mounts["v2"], mounts["v2"]
        mem_path = cpu_path = paths["v2"]
        limit_name, usage_name = "memory.max", "memory.current"
        out["cpu_quota"], _ = lowest(cpu, cpu_path, "cpu.max", parse_cpu_max)
    elif "memory" in paths["v1"] and "memory" in mounts["v1"]:
        out["version"] = 1
        mem, mem_path = mounts["v1"]["memory"], paths["v1"]["memory"]
        limit_name, usage_name = "memory.limit_in_bytes", "memory.usage_in_bytes"
        if "cpu" in paths["v1"] and "cpu" in mounts["v1"]:
            folder = cgroup_dir(mounts["v1"]["cpu"], paths["v1"]["cpu"])
            try:
                out["cpu_quota"] = parse_cfs_quota(_read(os.path.join(folder, "cpu.cfs_quota_us")),
                                                   _read(os.path.join(folder, "cpu.cfs_period_us")))
            except OSError:
                pass
    else:
        return out
    folder = cgroup_dir(mem, mem_path)
    out["memory_dir"] = folder
    out["memory_limit_mib"], out["memory_limit_file"] = lowest(mem, mem_path, limit_name, parse_memory_max)
    try:
        used = int(_read(os.path.join(folder, usage_name)).strip())
        try:
            used -= parse_memory_stat_inactive_file(_read(os.path.join(folder, "memory.stat")), out["version"])
        except OSError:
            pass
        out["memory_used_mib"] = max(0, used) // MIB
    except (OSError, ValueError):
        pass
    return out


def gather_system(facts, workdir):
    """CPU, memory, disk, names: fills the system keys; each failure goes to ``facts["errors"]``."""
    errors = facts["errors"]

    def attempt(label, fn):
        try:
            fn()
        except Exception as exc:
            errors.append("%s: %s: %s" % (label, type(exc).__name__, exc))

    def cpus():
        if hasattr(os, "sched_getaffinity"):
            facts["cpu_count"] = len(os.sched_getaffinity(0))
        else:
            facts["cpu_count"] = os.cpu_count()

    def cgroup():
        cg = probe_cgroup()
        facts["cgroup"] = cg
        facts["cpu_quota"] = cg["cpu_quota"]
        facts["mem_limit_mib"] = cg["memory_limit_mib"]
        if cg["memory_limit_file"]:
            facts["mem_limit_source"] = "cgroup v%s %s" % (cg["version"], cg["memory_limit_file"])

    def meminfo():
        facts.update(parse_meminfo(_read("/proc/meminfo")))
        limit = dict((n, soft) for n, soft, _ in import_limits()).get("RLIMIT_AS", -1)
        facts["rlimit_as_mib"] = limit // MIB if limit is not None and limit >= 0 else None

    def disk():
        facts["disk_free_mib"], facts["disk_free_path"] = disk_free_mib(workdir)
        facts["workdir_fs"] = fs_info(workdir)

    def tmp():
        facts["tmp"] = fs_info(os.environ.get("TMPDIR") or "/tmp")
        facts["login_env"] = login_env()

    def names():
        uname = os.uname()
        facts["hostname"], facts["kernel"], facts["machine"] = uname.nodename, uname.release, uname.machine

    def osname():
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            if os.path.exists(path):
                facts["os"] = parse_os_release(_read(path))
                return
        import platform

        facts["os"] = platform.platform()

    for key in ("cpu_count", "cpu_quota", "rlimit_as_mib", "mem_total_mib", "mem_available_mib", "mem_limit_mib", "mem_limit_source",
                "cgroup", "disk_free_mib", "disk_free_path", "workdir_fs", "tmp", "hostname", "os", "kernel",
                "machine"):
        facts.setdefault(key, None)
    facts.setdefault("login_env", {})
    for label, fn in (("cpu_count", cpus), ("cgroup", cgroup), ("meminfo", meminfo),
                      ("disk_free", disk), ("tmp", tmp), ("hostname", names), ("os", osname)):
        attempt(label, fn)


def probe_environments(venv):
    """The staged environments behind ``venv`` (see the ``environments`` key), or None."""
    if not venv or not os.path.islink(venv):
        return None
    target = os.path.realpath(venv)
    folder = os.path.dirname(target)
    try:
        with open(os.path.join(folder, "envs.json")) as fh:
            index = json.load(fh)
    except (OSError, ValueError):
        return None
    match = re.match(r"^v([0-9]+)$", os.path.basename(target))
    keys = ("state", "created", "live_since", "torch", "torch_cuda", "adopted")
    versions = {}
    for k, v in (index.get("versions") or {}).items():
        versions[k] = {f: v.get(f) for f in keys if v.get(f) is not None}
        if not os.path.exists(os.path.join(folder, "v%s" % k, "bin", "python3")):
            versions[k]["missing"] = True  # its folder gone (moved or deleted by hand): the disk use is stale
    live = int(match.group(1)) if match else None
    return {"versions_dir": folder, "live_version": live, "versions": versions, "disk": index.get("disk"),
            "live_missing": not os.path.exists(target)}


# -- host compilers (what nvcc compiles host code with, and the newest its toolkit accepts) ---------

#: The build's PATH after the venv's and the toolkit's bin folders (fleetctl.build.archs.DEFAULT_PATH):
#: nvcc runs ``gcc`` from there unless told otherwise (``-ccbin``, ``NVCC_CCBIN``).
BUILD_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: Where RHEL-family hosts keep other GCC releases (``gcc-toolset-N``, older ``devtoolset-N``).
TOOLSET_GLOBS = ("/opt/rh/gcc-toolset-*/root/usr/bin/g++", "/opt/rh/devtoolset-*/root/usr/bin/g++")

#: At most this many versioned compilers are asked for their version (each ``-dM -E`` ~20 ms).
MAX_HOST_COMPILERS = 16

_GNU_BOUND = re.compile(r"#\s*if\s+__GNUC__\s*>\s*(\d+)")
_CLANG_BOUND = re.compile(r"\(__clang_major__\s*>=\s*(\d+)\)")
_VERSIONED_CXX = re.compile(r"^(g\+\+|clang\+\+)(-[0-9][0-9.]*)?$")


def parse_host_config(text):
    """``{"gnu": 15, "clang": 20}`` from a toolkit's ``crt/host_config.h``: the newest host compiler
    majors its ``#if __GNUC__ > N`` / ``(__clang_major__ >= N)`` checks let through (the plain
    clang check, after ``defined(__clang__) && !defined(__ibmxl_vrm__)``)."""
    out = {}
    m = _GNU_BOUND.search(text)
    if m:
        out["gnu"] = int(m.group(1))
    plain = text.find("defined(__clang__) && !defined(__ibmxl_vrm__)")
    m = _CLANG_BOUND.search(text, plain if plain >= 0 else 0)
    if m:
        out["clang"] = int(m.group(1)) - 1
    return out


def host_compiler_max(home):
    """``{gnu, clang, source}`` read from ``<home>/include/crt/host_config.h`` (or
    ``<home>/targets/<machine>-linux/include/crt/host_config.h``), or None when no header reads."""
    machine = {"aarch64": "sbsa"}.get(os.uname().machine, os.uname().machine)
    for path in (os.path.join(home, "include", "crt", "host_config.h"),
                 os.path.join(home, "targets", "%s-linux" % machine, "include", "crt", "host_config.h")):
        try:
            bounds = parse_host_config(_read(path))
        except OSError:
            continue
        if bounds:
            bounds["source"] = path
            return bounds
    return None


def parse_compiler_macros(text):
    """``{kind: "gnu" | "clang" | None, major, minor}`` from ``CXX -dM -E -x c++ /dev/null``."""
    macros = dict(m.groups() for m in re.finditer(r"^#define (\w+) (.*)$", text, re.M))
    if "__clang__" in macros:
        kind, major, minor = "clang", macros.get("__clang_major__"), macros.get("__clang_minor__")
    elif "__GNUC__" in macros:
        kind, major, minor = "gnu", macros.get("__GNUC__"), macros.get("__GNUC_MINOR__")
    else:
        return {"kind": None, "major": None, "minor": None}
    return {"kind": kind, "major": _to_int(major), "minor": _to_int(minor)}


def probe_compiler(path):
    """One compiler as ``{path, realpath, name, kind, major, minor, version, banner, error}``: its
    predefined macros (what nvcc's host_config.h tests) and the first line of ``--version``."""
    comp = {"path": path, "realpath": os.path.realpath(path), "name": os.path.basename(path), "kind": None,
            "major": None, "minor": None, "version": None, "banner": None, "error": None}
    rc, out, err, error = run_command([path, "-dM", "-E", "-x", "c++", os.devnull])
    if error or rc != 0:
        comp["error"] = error or "%s -dM -E: exit %s: %s" % (path, rc, cause_line(out, err))
    else:
        comp.update(parse_compiler_macros(out))
        if comp["major"] is not None:
            comp["version"] = "%s.%s" % (comp["major"], comp["minor"] or 0)
    rc, out, err, error = run_command([path, "--version"])
    if not error and rc == 0:
        comp["banner"] = _first_line(out)
    if comp["major"] is None:  # no macros: what it says of itself
        rc, out, err, error = run_command([path, "-dumpfullversion", "-dumpversion"])
        m = re.match(r"^(\d+)(?:\.(\d+))?", out.strip()) if not error and rc == 0 else None
        if m:
            name = comp["name"] + " " + (comp["banner"] or "")
            comp.update(kind="clang" if "clang" in name else "gnu", major=int(m.group(1)), minor=int(m.group(2) or 0))
            comp["version"] = "%s.%s" % (comp["major"], comp["minor"])
    return comp


def probe_host_compilers(venv, cuda_home, cache=None):
    """The ``host_compilers`` key: nvcc's default (``gcc`` on the build's PATH: the venv's bin, the
    toolkit's bin, :data:`BUILD_SYSTEM_PATH`) and the other C++ compilers present (``g++-N``,
    ``clang++[-N]`` on that PATH and the login PATH, :data:`TOOLSET_GLOBS`). A compiler's probe is
    kept in ``cache`` while the name and the program it resolves to are unchanged (:class:`AnswerCache`)."""
    import glob

    search = [d for d in ([os.path.join(venv, "bin")] if venv else []) +
              ([os.path.join(cuda_home, "bin")] if cuda_home else []) + BUILD_SYSTEM_PATH.split(":")]
    out = {"default": None, "default_cxx": None, "candidates": [], "search_path": search}

    def first(name):
        for d in search:
            if _is_exe(os.path.join(d, name)):
                return os.path.join(d, name)
        return None

    probed = {}  # realpath -> its probe: g++ and g++-12 are one program on most distributions

    def probe(path):
        real = os.path.realpath(path)
        if real not in probed:
            probed[real] = comp = remembered(cache, ["compiler", path, real], [path, real],
                                             lambda: probe_compiler(path),
                                             lambda c: c["error"] is None and c["major"] is not None)
            return comp
        return same_program(probed[real], path)

    default, cxx = first("gcc"), first("g++")
    if default:
        out["default"] = probe(default)
    if cxx:  # the C++ compiler a build without CXX runs (torch's cpp_extension, CMake after c++)
        out["default_cxx"] = probe(cxx)
    paths = []
    for d in search + [d for d in os.environ.get("PATH", "").split(":") if d and d not in search]:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        paths += [os.path.join(d, n) for n in names
                  if n.startswith(("g++", "clang++")) and _VERSIONED_CXX.match(n) and n != "g++"]
    for pattern in TOOLSET_GLOBS:
        paths += sorted(glob.glob(pattern))
    seen = set([os.path.realpath(default)] if default else [])  # g++-12 stays listed when g++ is it
    for p in paths:
        real = os.path.realpath(p)
        if real in seen or not _is_exe(p) or len(out["candidates"]) >= MAX_HOST_COMPILERS:
            continue
        seen.add(real)
        out["candidates"].append(probe(p))
    return out


def same_program(comp, path):
    """The probe of ``path`` from ``comp``, the probe of another name of the same program (one
    realpath): the macros are the program's; GCC's ``--version`` banner starts with the name it
    was run as (its ``progname``), so that word is the new name's; clang's does not name it."""
    other = dict(comp, path=path, name=os.path.basename(path))
    banner = comp.get("banner")
    if banner and banner.startswith(comp["name"] + " "):
        other["banner"] = other["name"] + banner[len(comp["name"]):]
    return other


#: The identity file of an install target (the venv, the workdir): a random id, written once.
TARGET_ID_NAME = ".fleetctl-id"
#: Its mode: every user who may log in to a host sharing the folder reads it (only its writer changes it).
TARGET_ID_MODE = 0o644
#: What fleetctl's last install into a venv was: ``{host, archs, wheel}`` (written by pip_install).
TARGET_INSTALL_NAME = ".fleetctl-install.json"


def target_id(folder, write=True):
    """``{path, id, local, error, unreadable, installed, copied, installed_copied}`` of a folder builds or
    installs write to: ``path`` its real path and ``id`` the random id in ``<folder>/.fleetctl-id``,
    written when absent (only when ``write``: ``fleetctl facts`` reads, a deploy writes). Two inventory
    hosts that report one id share the folder (an NFS home, one venv for a rack): an inode number alone
    does not say so across machines, a file both read does; ``local`` (:func:`local_id`) tells one folder on one
    kernel without the file, so the verdict does not depend on whether an earlier run wrote it. The id is written to a unique temporary name and
    hard-linked into place (atomic on NFS too), so two hosts writing at once agree on one id.

    The file's first line is the id; each further line (``at <boot id>:<dev>:<inode>``, the last
    :data:`TARGET_ID_CLAIMS` boots) is the folder as the kernel that wrote the file, or read it on a
    boot not yet listed, saw it (:func:`id_file_text`). A file copied with its folder (``cp -a``,
    rsync, a disk image, copied by hand into another user's venv) keeps the id, so the copy was taken
    for the same folder (operator trial: ``a and a2 share the venv`` for ``~/venv`` and
    ``~/venv-copy``). On one kernel (one boot id) one folder has one inode, bind mounts and NFS
    remounts included (the device number of an automounted NFS folder changes with each mount: it is
    not compared), so a line of this boot naming another inode says the file was written for another
    folder (:func:`copied_from`): ``copied`` says so in one line and the folder is given a fresh id
    (replaced by a rename; with ``write`` false the id is null, as a deploy would write a new one).
    Across machines (NFS clients) and reboots nothing is compared: one folder stays one.

    ``installed`` is fleetctl's last install there (:data:`TARGET_INSTALL_NAME`); ``installed_copied``
    (one line, else null) says it was written for another folder (:func:`record_copied`): it came
    with a copy and names a host whose install is elsewhere, so no planner takes it as a host sharing
    this venv (``fleetctl/tasks/install_target.py`` ``dropped_by``).

    The file is made mode 0644 whatever the umask (``os.open`` with the mode, then ``fchmod``: a
    umask of 077, common on hardened hosts and the one fleetctl's own first command runs under,
    would leave it 0600), so another user logging in to a host that shares the folder reads it
    too. An id file that exists but this user cannot read (one made 0600 by an older fleetctl or
    by hand) gives ``id`` null, ``unreadable`` true and an ``error`` naming the file, the user and
    the cause: the planners refuse such a host (``fleetctl/tasks/install_target.py``), since
    whether another host shares the folder cannot be told. A folder that does not exist or cannot
    be written gives ``id`` null (``error`` says why when writing failed)."""
    out = {"path": None, "id": None, "local": None, "error": None, "unreadable": False, "installed": None,
           "copied": None, "installed_copied": None}
    if not folder:
        return out
    path = os.path.realpath(os.path.expanduser(folder))
    out["path"] = path
    out["local"] = local = local_id(path)
    try:  # who installed into it last (pip_install writes it): another run's host may share it
        with open(os.path.join(path, TARGET_INSTALL_NAME)) as fh:
            out["installed"] = json.load(fh)
    except (OSError, ValueError):
        pass
    final = os.path.join(path, TARGET_ID_NAME)
    ident, claims = None, []
    try:
        with open(final) as fh:
            ident, claims = parse_id_file(fh.read())
    except FileNotFoundError:
        pass
    except OSError as exc:
        if os.path.lexists(final):  # there, but not for this user: never taken as "no id"
            out["unreadable"] = True
            out["error"] = unreadable_message(final, exc)
            return out
    other = copied_from(claims, local) if ident else None
    if other is not None:
        out["copied"] = ("%s was written for another folder (inode %s on this boot; this folder is inode %s): "
                         "copied with it, so this folder has an id of its own" % (final, other.split(":")[2], local.split(":")[2]))
    old = ident
    listed = local is not None and any(c.split(":")[0] == local.split(":")[0] for c in claims)
    if ident is not None and other is None and write and local and not listed:  # this boot's view, for a copy's sake
        _put_id(final, ident, claims + [local], replace=old)  # best effort: another user's file stays as it is
    elif (ident is None or other is not None) and write and os.path.isdir(path):
        error = _put_id(final, os.urandom(16).hex(), [local] if local else [], replace=old if other else None)
        try:
            with open(final) as fh:
                ident = parse_id_file(fh.read())[0]
        except OSError as exc:
            error = error or "%s: %s" % (final, exc.strerror or exc)
            ident = None
        if error:
            out["error"] = error
        if ident == old and other is not None:  # the copy's id could not be replaced: not this folder's
            ident = None
    elif other is not None:
        ident = None
    if other is not None and ident is None:
        out["copied"] = out["copied"].replace("has an id of its own", "has no id until a deploy gives it one")
    out["id"] = ident
    out["installed_copied"] = record_copied(out["installed"], local, old if other is not None else None, ident)
    return out


#: How many boots' views of the folder an id file keeps (one line each, the newest last).
TARGET_ID_CLAIMS = 8


def id_file_text(ident, claims):
    """The id file's text: the id, then ``at <boot id>:<dev>:<inode>`` for the last
    :data:`TARGET_ID_CLAIMS` of ``claims`` (local ids, :func:`local_id`)."""
    return "".join([ident + "\n"] + ["at %s\n" % c for c in claims[-TARGET_ID_CLAIMS:]])


def parse_id_file(text):
    """``(id or None, [local id, ...])`` from an id file's text (:func:`id_file_text`; a file of one
    line, written by fleetctl before the claims, is an id with none)."""
    lines = text.splitlines()
    ident = lines[0].strip() if lines else ""
    claims = [ln[3:].strip() for ln in lines[1:] if ln.startswith("at ") and ln[3:].strip().count(":") == 2]
    return (ident or None), claims


def copied_from(claims, local):
    """The claim (``<boot id>:<dev>:<inode>``) of ``claims`` that says the id file was written for
    another folder than the one whose local id is ``local``, or None: a claim of this boot naming
    another inode, when none of this boot names this one. The device is not compared (an NFS
    folder automounted again on one boot gets another device number, the same inode)."""
    if not local:
        return None
    boot, _, ino = local.split(":")
    mine = [c for c in claims if c.split(":")[0] == boot]
    if any(c.split(":")[2] == ino for c in mine):
        return None
    return mine[-1] if mine else None


def record_copied(rec, local, copied_id, ident):
    """One line when the install record ``rec`` (``<venv>/.fleetctl-install.json``) was written for
    another folder, else None: its ``local`` (the venv's local id when pip_install wrote it) is of
    this boot and another inode, or its ``id`` (the venv's id then) is the id of a copied id file
    (``copied_id``) or not this folder's id ``ident``. A record without them (an older fleetctl's, a
    staged version's) counts as this folder's."""
    if not isinstance(rec, dict):
        return None
    at, rid = rec.get("local"), rec.get("id")
    if isinstance(at, str) and at.count(":") == 2 and copied_from([at], local) is not None:
        return "the install record was written for another folder (inode %s on this boot)" % at.split(":")[2]
    if isinstance(rid, str) and rid and (rid == copied_id or (ident and rid != ident)):
        return "the install record was written for another folder (id %s, this folder's is %s)" % (rid, ident)
    return None


def _put_id(final, ident, claims, replace=None):
    """Write the id file ``final`` (:func:`id_file_text`) through a unique temporary name: hard-linked
    into place when ``replace`` is None (the first writer's id stands), else renamed over the file
    when it still holds the id ``replace`` (a refresh or a copy's fresh id never overwrites an id
    another host wrote meanwhile). Returns None or the error (one line)."""
    tmp = "%s.%s.%d" % (final, os.uname().nodename, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, TARGET_ID_MODE)
        try:
            os.fchmod(fd, TARGET_ID_MODE)  # the umask took bits from the mode os.open was given
            os.write(fd, id_file_text(ident, claims).encode("ascii"))
        finally:
            os.close(fd)
        if replace is None:
            try:
                os.link(tmp, final)
            except FileExistsError:
                pass
        else:
            with open(final) as fh:
                now = parse_id_file(fh.read())[0]
            if now == replace:
                os.rename(tmp, final)
        return None
    except OSError as exc:
        return "%s: %s" % (final, exc.strerror or exc)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def local_id(path):
    """``"<boot id>:<st_dev>:<st_ino>"`` of the folder ``path`` (read, never written), or ``None``
    when it cannot be stat'ed or the kernel has no boot id: the folder itself as this kernel knows
    it. Two logins (two users, two containers) on one kernel that report one local id are in one
    folder whether or not an earlier run wrote its ``.fleetctl-id``: the id file alone was written
    by the first ``--plan`` (by the user who may write the folder), so a second identical plan saw
    a sharing the first could not (new-user trial). A device number is one kernel's, so it is
    never compared across machines: the boot id (``/proc/sys/kernel/random/boot_id``) is part of
    the key, and across machines (NFS) only the id file tells."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        st = os.stat(path)
    except OSError:
        return None
    if not boot or not stat.S_ISDIR(st.st_mode):
        return None
    return "%s:%d:%d" % (boot, st.st_dev, st.st_ino)


def unreadable_message(final, exc):
    """One line for an id file that exists but this user cannot read (``exc``: why not)."""
    user = login_user()
    folder = os.path.dirname(final)
    return ("%s exists but user %s cannot read it (%s): is %s shared with another user or host? fleetctl cannot "
            "tell which hosts share it, so nothing is built or installed there: make the file readable "
            "(chmod 0644 %s), or give each host its own folder" % (final, user, exc.strerror or exc, folder, final))


def gather(venv=None, cuda_home=None, workdir=".", cache=None, read_only=False):
    """Every fact as one dict (the JSON object this script prints); never raises.

    The interpreter probe runs in a thread while the other probes run. ``cache``: an
    :class:`AnswerCache` whose answers of unchanged programs are used (``probe_cache`` reports it).
    ``read_only``: write nothing on the host (no id file, the cache not saved; see the module docstring).
    """
    started = time.time()
    facts = {"script_version": SCRIPT_VERSION, "workdir": workdir, "errors": []}
    box = {}

    def python_probe():
        try:
            box["python"] = probe_python(venv, cache)
        except Exception as exc:  # pragma: no cover - defensive
            box["python"] = {"executable": None, "venv": venv, "exists": False, "version": None,
                             "torch": None, "torch_cuda": None, "torch_error": None,
                             "error": "%s: %s" % (type(exc).__name__, exc)}

    thread = threading.Thread(target=python_probe, name="python-probe")
    thread.daemon = True
    thread.start()
    try:
        gather_gpus(facts)
    except Exception as exc:  # pragma: no cover - defensive
        facts.setdefault("gpus", [])
        facts["gpu_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        facts["cuda"] = probe_cuda(cuda_home, cache)
    except Exception as exc:  # pragma: no cover - defensive
        facts["cuda"] = {"home": None, "nvcc": None, "version": None, "error": "%s: %s" % (type(exc).__name__, exc)}
    for key, name, parse in (("cmake", "cmake", parse_cmake_version),
                             ("ninja", "ninja", lambda text: _first_line(text) or None)):
        try:
            facts[key] = probe_tool(name, venv, parse=parse, cache=cache)
        except Exception as exc:  # pragma: no cover - defensive
            facts[key] = {"path": None, "version": None, "error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        facts["uv"] = {"path": find_uv()}
    except Exception as exc:  # pragma: no cover - defensive
        facts["uv"] = {"path": None, "error": str(exc)}
    try:
        facts["environments"] = probe_environments(venv)
    except Exception as exc:  # pragma: no cover - defensive
        facts["environments"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        for tk in [facts["cuda"]] + list(facts["cuda"].get("toolkits") or []):
            bounds = host_compiler_max(tk["home"]) if tk.get("home") else None
            if bounds:  # only where the toolkit's header was read
                tk["host_compiler_max"] = bounds
        facts["host_compilers"] = probe_host_compilers(venv, facts["cuda"].get("home"), cache)
    except Exception as exc:  # pragma: no cover - defensive
        facts["host_compilers"] = {"default": None, "candidates": [], "error": "%s: %s" % (type(exc).__name__, exc)}
    gather_system(facts, workdir)
    try:
        facts["targets"] = {"venv": target_id(venv, write=not read_only),
                            "workdir": target_id(workdir, write=not read_only)}
    except Exception as exc:  # pragma: no cover - defensive
        facts["errors"].append("targets: %s: %s" % (type(exc).__name__, exc))
    thread.join(PYTHON_PROBE_TIMEOUT_S + 15)
    facts["python"] = box.get("python") or {
        "executable": None, "venv": venv, "exists": None, "version": None, "torch": None,
        "torch_cuda": None, "torch_error": None, "error": "interpreter probe did not finish"}
    try:
        path, source = find_cuobjdump(facts["cuda"].get("home"), facts["python"].get("site_packages"))
        facts["cuda"]["cuobjdump"], facts["cuda"]["cuobjdump_source"] = path, source
    except Exception as exc:  # pragma: no cover - defensive
        facts["errors"].append("cuobjdump: %s: %s" % (type(exc).__name__, exc))
    if cache is not None:
        if not read_only:
            cache.save()
        facts["probe_cache"] = cache.report()
    facts["duration_s"] = round(time.time() - started, 3)
    return facts


def open_cache(path, min_age_s=None):
    """The :class:`AnswerCache` kept in ``path`` for this script (its own file's digest: another
    version of the script never reads another's answers), or None without a path or a file.
    ``min_age_s``: seconds a dependency must be older than an answer to keep it (:data:`RACY_S`)."""
    import hashlib

    me = globals().get("__file__")
    if not path or not me:
        return None
    try:
        with open(me, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    except OSError:
        return None
    return AnswerCache(path, digest, min_age_s)


def set_timeouts(probe_timeout_s):
    """Set the per-command timeout (seconds); the interpreter probe gets twice that."""
    global TIMEOUT_S, PYTHON_PROBE_TIMEOUT_S
    if probe_timeout_s and probe_timeout_s > 0:
        TIMEOUT_S = float(probe_timeout_s)
        PYTHON_PROBE_TIMEOUT_S = 2 * float(probe_timeout_s)


def set_gpu_timeout(timeout_s):
    """Set :data:`GPU_PROBE_TIMEOUT_S` (seconds) when given and positive."""
    global GPU_PROBE_TIMEOUT_S
    if timeout_s and timeout_s > 0:
        GPU_PROBE_TIMEOUT_S = float(timeout_s)


#: The options a controller passes (fleetctl.facts.gather.facts_options and the session start),
#: each ``--name value``: read without argparse (whose import costs a host ~6 ms a run).
QUICK_OPTIONS = {"--venv": str, "--cuda-home": str, "--workdir": str, "--probe-timeout-s": float,
                 "--gpu-timeout-s": float, "--cache": str, "--cache-min-age-s": float, "--read-only": int}


def quick_options(argv):
    """``argv`` read as :data:`QUICK_OPTIONS` pairs (a namespace as :func:`main`'s parser makes),
    or None for anything else (another option, a missing or bad value, ``--name=value``)."""
    if argv is None or len(argv) % 2:
        return None
    values = {"venv": None, "cuda_home": None, "workdir": ".", "probe_timeout_s": TIMEOUT_S,
              "gpu_timeout_s": None, "cache": None, "cache_min_age_s": None, "nvml_child": False,
              "read_only": 0}
    for name, value in zip(argv[::2], argv[1::2]):
        kind = QUICK_OPTIONS.get(name)
        if kind is None or value.startswith("--"):
            return None
        try:
            values[name[2:].replace("-", "_")] = kind(value)
        except ValueError:
            return None
    return type("Options", (), values)


def main(argv=None):
    """Parse arguments, gather, print one JSON object; always returns 0."""
    args = quick_options(argv)
    if args is None:
        args, unknown = parse_options(argv)
    else:
        unknown = []
    set_timeouts(args.probe_timeout_s)
    set_gpu_timeout(args.gpu_timeout_s)
    if args.nvml_child:
        nvml_child()
        return 0
    if args.read_only:  # nor this process's imports nor any probe's writes a bytecode cache
        sys.dont_write_bytecode = True
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        facts = gather(venv=args.venv or None, cuda_home=args.cuda_home or None, workdir=args.workdir,
                       cache=open_cache(args.cache, args.cache_min_age_s), read_only=bool(args.read_only))
    except BaseException as exc:  # pragma: no cover - defensive: still print an object
        facts = {"script_version": SCRIPT_VERSION, "gpus": [], "errors": ["%s: %s" % (type(exc).__name__, exc)]}
    if unknown:
        facts.setdefault("errors", []).append("unknown arguments ignored: %s" % " ".join(unknown))
    sys.stdout.write(json.dumps(facts, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


def parse_options(argv):
    """``(namespace, unknown arguments)`` by argparse (the command line's full form)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=None, help="Python environment whose bin/python3 builds use")
    parser.add_argument("--cuda-home", default=None, help="CUDA toolkit root to use (holds bin/nvcc)")
    parser.add_argument("--workdir", default=".", help="remote working folder (for free disk space)")
    parser.add_argument("--probe-timeout-s", type=float, default=TIMEOUT_S,
                        help="seconds each probe command may take (the torch import gets twice that)")
    parser.add_argument("--gpu-timeout-s", type=float, default=None,
                        help="seconds nvidia-smi may take (default %g)" % GPU_PROBE_TIMEOUT_S)
    parser.add_argument("--cache", default=None,
                        help="JSON file keeping the answers of unchanged programs between runs (AnswerCache)")
    parser.add_argument("--cache-min-age-s", type=float, default=None,
                        help="seconds a program's files must be older than its answer for it to be kept (default %g)"
                             % RACY_S)
    parser.add_argument("--read-only", type=int, default=0,
                        help="1: write nothing on the host (fleetctl facts): no id file, no cache saved")
    parser.add_argument("--nvml-child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_known_args(argv)


if __name__ == "__main__":
    for _sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(_sig, stop_on_signal)
    sys.exit(main())
