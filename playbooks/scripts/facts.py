#!/usr/bin/env python3
"""Gather one host's build facts in one round trip and print them as one JSON object.

fleetctl uploads this file and runs it ON the host (``python3 facts.py --workdir DIR [--venv DIR]
[--cuda-home DIR]``). It needs only the standard library of any Python >= 3.8, prints exactly one
JSON object on stdout (diagnostics go to stderr) and exits 0 whatever it finds: every probe is
wrapped, and a missing tool yields ``null`` plus an error string instead of a crash.

Output keys (sizes in MiB = 2**20 bytes, durations in seconds):

``script_version``  str, bumped when the shape changes.
``gpus``            list of ``{index: int, name: str, compute_cap: "9.0" | null, memory_mib: int | null}``
                    from ``nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version
                    --format=csv,noheader,nounits`` (field meanings: ``nvidia-smi --help-query-gpu``),
                    or from NVML through ctypes when nvidia-smi is missing or fails.
``gpu_source``      ``"nvidia-smi"`` | ``"nvml"`` | null (no source answered).
``gpu_error``       str | null: why no source answered (null when one did, even with no GPU).
``gpu_probe_errors`` list of str: every failed source, including one a later source made up for.
``driver_version``  str | null, e.g. ``"580.82.07"``.
``cuda``            ``{home, nvcc, nvcc_realpath, version: "13.0", archs: ["compute_75", ...],
                    codes: ["sm_75", ...], cuobjdump, cuobjdump_source, cccl_include, source,
                    requested_home, toolkits, error}``; ``source`` is ``"cuda_home var"`` |
                    ``"CUDA_HOME env"`` | ``"/usr/local/cuda"`` | ``"PATH"`` | ``"/usr/local/cuda-*"`` |
                    ``"interactive login PATH"`` | null. ``toolkits``: every distinct toolkit found,
                    in search order, as ``{home, nvcc, nvcc_realpath, version, archs, source}``.
``python``          ``{executable, venv, exists, version: "3.12.3", tag: "cp312", implementation,
                    site_packages, prefix, in_venv, packages: {dist: version | null}, torch,
                    torch_cuda, torch_cxx11_abi, torch_arch_list, torch_file, torch_error,
                    torch_probe_error, error}``; ``torch_error`` is what is wrong with the host's torch,
                    ``torch_probe_error`` what went wrong in fleetctl's own reader (never the host's).
                    from a subprocess of that interpreter; torch is NOT imported (seconds of CPU):
                    its version, CUDA build, C++ ABI flag and arch list are read from its files
                    (:data:`TORCH_READER`), so a broken torch is reported, never fatal.
``cmake``           ``{path, version: "3.28.3", error}``; ``ninja`` ``{path, version}``; ``uv`` ``{path}``.
``cpu_count``       int: CPUs this process may run on (``os.sched_getaffinity``).
``cpu_quota``       float | null: the cgroup's CPU quota in CPUs (v2 ``cpu.max``, v1
                    ``cpu.cfs_quota_us / cpu.cfs_period_us``), null when unlimited.
``mem_total_mib``, ``mem_available_mib``  int | null from ``/proc/meminfo``.
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
``login_env``       ``{NAME: value}`` for the variables of :data:`LOGIN_ENV_NAMES` the login
                    environment sets (a stray ``VIRTUAL_ENV``, ``CONDA_PREFIX``, ``PYTHONPATH``,
                    ``TMPDIR``...). The probes of this script run without the stray ones.
``environments``    null, or, when ``--venv`` is a symlink into a versions folder fleetctl manages
                    (docs/staged.md): ``{versions_dir, live_version, versions: {N: {state, created,
                    live_since, torch, torch_cuda}}, disk: {total_mib, versions: {N: {size_mib,
                    own_mib}}, measured}}``, read from the folder's ``envs.json`` (no walk).
``workdir``, ``hostname``, ``os`` (PRETTY_NAME of /etc/os-release), ``kernel``, ``machine``.
``errors``          list of str: probe failures not reported elsewhere.
``duration_s``      float: the script's own run time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

SCRIPT_VERSION = "2"

#: Fields asked of nvidia-smi, in this order (see ``nvidia-smi --help-query-gpu``).
GPU_QUERY_FIELDS = ("index", "name", "compute_cap", "memory.total", "driver_version")

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
LOGIN_ENV_NAMES = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME", "TMPDIR")
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
        "compute_cap": "9.0" | None, "memory_mib": int | None}`` in output order;
        ``driver_version`` the first non-placeholder driver version, or ``None``.
        Placeholders such as ``[N/A]`` become ``None``; a GPU name that itself holds commas is
        rejoined; blank lines are skipped.

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
        index = _to_int(_na(row.get("index", "")))
        cap = _na(row.get("compute_cap", ""))
        if cap is not None and not re.match(r"^\d+\.\d+$", cap):
            cap = None
        gpus.append({
            "index": index if index is not None else len(gpus),
            "name": _na(row.get("name", "")) or "",
            "compute_cap": cap,
            "memory_mib": _to_int(_na(row.get("memory.total", ""))),
        })
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


def run_command(argv, timeout_s=None, env=None):
    """Run argv without a shell; return ``(rc, stdout, stderr, error)``; never raises.

    ``rc`` is None and ``error`` a one-line message when the program is missing, cannot run or
    passes ``timeout_s`` seconds (default :data:`TIMEOUT_S`; then it is killed and any partial
    output is returned).
    """
    if timeout_s is None:
        timeout_s = TIMEOUT_S
    try:
        proc = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            timeout=timeout_s, env=env,
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


def _is_exe(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def probe_nvidia_smi():
    """GPUs through nvidia-smi: ``(gpus, driver, error)``; ``gpus`` is None when it failed.

    nvidia-smi with no GPU prints "No devices were found" and exits 6: that is an answer
    (an empty list), not a failure.
    """
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, None, "nvidia-smi: not found on PATH"
    rc, out, err, error = run_command(
        [exe, "--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"])
    if error:
        return None, None, error
    if "No devices were found" in out + err:
        return [], None, None
    if rc != 0:
        return None, None, "nvidia-smi: exit %s: %s" % (rc, _first_line(out, err) or "no output")
    try:
        gpus, driver = parse_nvidia_smi_csv(out)
    except ValueError as exc:
        return None, None, "nvidia-smi: unexpected output: %s" % exc
    return gpus, driver, None


def nvml_query():
    """Query NVML through ctypes in THIS process; returns ``{"gpus", "driver_version"}``.

    Calls (NVML API reference): nvmlInit_v2, nvmlSystemGetDriverVersion,
    nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName,
    nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetMemoryInfo (bytes), nvmlShutdown.

    Raises:
        OSError: libnvidia-ml.so.1 cannot be loaded.
        RuntimeError: an NVML call returned an error (message from nvmlErrorString).
    """
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    c_uint, c_int, c_char_p, c_void_p = ctypes.c_uint, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

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
            gpus.append({
                "index": i,
                "name": name.value.decode("utf-8", "replace"),
                "compute_cap": cap,
                "memory_mib": int(mem.total // MIB) if ret == 0 else None,
            })
        return {"gpus": gpus, "driver_version": driver}
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:
            pass


def probe_nvml():
    """GPUs through NVML, queried in a child process (a wedged driver or a ctypes fault cannot
    hang or kill the facts script): ``(gpus, driver, error)``; ``gpus`` is None when it failed."""
    me = os.path.abspath(__file__)
    rc, out, err, error = run_command([sys.executable, me, "--nvml-child"])
    if error:
        return None, None, "nvml: " + error
    for line in out.splitlines():
        if line.startswith(_MARK):
            try:
                data = json.loads(line[len(_MARK):])
            except ValueError:
                break
            if data.get("error"):
                return None, None, "nvml: " + data["error"]
            return data.get("gpus") or [], data.get("driver_version"), None
    return None, None, "nvml: probe exited %s: %s" % (rc, _first_line(err, out) or "no output")


def nvml_child():
    """Entry point of ``--nvml-child``: print one marked JSON line with the NVML answer."""
    try:
        data = nvml_query()
    except Exception as exc:
        data = {"error": "%s" % exc}
    sys.stdout.write(_MARK + json.dumps(data) + "\n")
    sys.stdout.flush()


def gather_gpus(facts):
    """Fill ``gpus``, ``gpu_source``, ``gpu_error``, ``gpu_probe_errors``, ``driver_version``."""
    errors = []
    facts.update({"gpus": [], "gpu_source": None, "gpu_error": None, "driver_version": None})
    for source, probe in (("nvidia-smi", probe_nvidia_smi), ("nvml", probe_nvml)):
        try:
            gpus, driver, error = probe()
        except Exception as exc:  # pragma: no cover - defensive
            gpus, driver, error = None, None, "%s: %s: %s" % (source, type(exc).__name__, exc)
        if gpus is not None:
            facts.update({"gpus": gpus, "gpu_source": source, "driver_version": driver})
            break
        errors.append(error)
        log(error)
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
    which = shutil.which("nvcc")
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
    which = shutil.which("cuobjdump")
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


def probe_toolkit(home, source):
    """One toolkit: ``{home, nvcc, nvcc_realpath, version, archs, codes, source, errors}``
    (``nvcc --version``, ``--list-gpu-arch``, ``--list-gpu-code``)."""
    nvcc = os.path.join(home, "bin", "nvcc")
    tk = {"home": home, "nvcc": nvcc, "nvcc_realpath": os.path.realpath(nvcc), "version": None, "archs": None,
          "codes": None, "source": source, "errors": []}
    rc, out, err, error = run_command([nvcc, "--version"])
    if error or rc != 0:
        tk["errors"].append(error or "nvcc --version: exit %s: %s" % (rc, _first_line(err, out)))
    else:
        tk["version"] = parse_nvcc_version(out)
        if tk["version"] is None:
            tk["errors"].append("nvcc --version: no release number in %r" % _first_line(out))
    for key, flag in (("archs", "--list-gpu-arch"), ("codes", "--list-gpu-code")):
        rc, out, err, error = run_command([nvcc, flag])
        if error or rc != 0:
            tk["errors"].append(error or "nvcc %s: exit %s: %s" % (flag, rc, _first_line(err, out)))
        else:
            tk[key] = parse_word_list(out)
    return tk


def probe_cuda(cuda_home):
    """The CUDA toolkit as the ``cuda`` dict (see the module docstring).

    Search order: ``--cuda-home`` (an error is recorded when it lacks ``bin/nvcc``, and the
    search goes on), ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda``, ``nvcc`` on PATH, then
    ``/usr/local/cuda-*`` (newest first); when none has nvcc, the interactive login shell's PATH
    (:func:`login_path_nvcc`). Every distinct toolkit found (by nvcc's real path) is probed and
    listed in ``toolkits``; the first is the one described. ``cuobjdump`` is filled in later by
    :func:`find_cuobjdump` (it may live in the venv).
    """
    cuda = {
        "home": None, "nvcc": None, "nvcc_realpath": None, "version": None, "archs": None, "codes": None,
        "cuobjdump": None, "cuobjdump_source": None, "cccl_include": None,
        "source": None, "requested_home": cuda_home, "toolkits": [], "error": None,
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
                found.append(probe_toolkit(home, source))
        elif source == "cuda_home var":
            errors.append("cuda_home %s has no executable bin/nvcc" % home)
        elif source == "CUDA_HOME env":
            errors.append("CUDA_HOME %s has no executable bin/nvcc" % home)
    if not found:
        home, detail = login_path_nvcc()
        if home:
            found.append(probe_toolkit(home, "interactive login PATH"))
            log("cuda: nvcc only on the interactive login PATH: %s" % home)
        else:
            looked = [h + "/bin" for _, h in candidates] + ["PATH", detail]
            errors.append("nvcc not found (looked in %s)" % ", ".join(looked))
    if found:
        first = found[0]
        cuda.update({k: first[k] for k in ("home", "nvcc", "nvcc_realpath", "version", "archs", "codes", "source")})
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
import json, sys, sysconfig
MARK = %(mark)r
info = {
    "version": "%%d.%%d.%%d" %% sys.version_info[:3],
    "implementation": sys.implementation.name,
    "tag": {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
           + "%%d%%d" %% sys.version_info[:2],
    "site_packages": sysconfig.get_paths().get("purelib"),
    "prefix": sys.prefix,
    "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    "packages": {},
}
try:
    info["packages"] = dist_versions(%(packages)r)
except Exception as exc:
    info["packages_error"] = "%%s: %%s" %% (type(exc).__name__, exc)
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
"""


def probe_python(venv):
    """The interpreter builds will use, as the ``python`` dict (see the module docstring).

    ``<venv>/bin/python3`` when ``venv`` is given, else the interpreter running this script.
    One child process of that interpreter reports its version, tag, purelib, package versions
    and torch's facts read from its files (timeout ``PYTHON_PROBE_TIMEOUT_S`` seconds).
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
        "packages": {}, "torch": None, "torch_cuda": None, "torch_file": None,
        "torch_error": None, "torch_cxx11_abi": None, "torch_arch_list": None, "error": None,
        "torch_probe_error": None,
    }
    if not py["exists"]:
        py["error"] = "%s: no such interpreter" % exe
        py["torch_error"] = "interpreter missing"
        log("python: " + py["error"])
        return py
    rc, out, err, error = run_command([exe, "-c", _PYTHON_PROBE], timeout_s=PYTHON_PROBE_TIMEOUT_S, env=clean_env())
    parts = []
    for line in out.splitlines():
        if line.startswith(_MARK):
            try:
                parts.append(json.loads(line[len(_MARK):]))
            except ValueError:
                pass
    for part in parts:
        py.update(part)
    if not parts:
        py["error"] = error or "probe exited %s: %s" % (rc, _first_line(err, out) or "no output")
        py["torch_error"] = py["torch_error"] or "interpreter probe failed"
    elif len(parts) == 1:
        py["torch_probe_error"] = "fleetctl's probe read_torch did not answer: " + (
            error or "probe exited %s: %s" % (rc, _first_line(err) or "no output"))
    if py["error"]:
        log("python: " + py["error"])
    if py["torch_error"]:
        log("python: torch: " + py["torch_error"])
    if py["torch_probe_error"]:
        log("python: torch: " + py["torch_probe_error"])
    return py


def probe_tool(name, venv, version_flag="--version", parse=parse_cmake_version):
    """``{path, version, error}`` for a build tool: ``<venv>/bin/<name>`` first (pip's cmake or
    ninja are what the build's PATH will find), then PATH."""
    path = None
    if venv and _is_exe(os.path.join(venv, "bin", name)):
        path = os.path.join(venv, "bin", name)
    else:
        path = shutil.which(name)
    tool = {"path": path, "version": None, "error": None}
    if not path:
        tool["error"] = "%s: not found" % name
        return tool
    rc, out, err, error = run_command([path, version_flag])
    if error or rc != 0:
        tool["error"] = error or "%s %s: exit %s: %s" % (name, version_flag, rc, _first_line(err, out))
    else:
        tool["version"] = parse(out)
    return tool


def find_uv():
    """Path of uv: PATH, then the installer's usual places (~/.local/bin, ~/.cargo/bin)."""
    which = shutil.which("uv")
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

    def disk():
        facts["disk_free_mib"], facts["disk_free_path"] = disk_free_mib(workdir)
        facts["workdir_fs"] = fs_info(workdir)

    def tmp():
        facts["tmp"] = fs_info(os.environ.get("TMPDIR") or "/tmp")
        facts["login_env"] = login_env()

    def names():
        facts["hostname"] = socket.gethostname()
        facts["kernel"] = platform.release()
        facts["machine"] = platform.machine()

    def osname():
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            if os.path.exists(path):
                facts["os"] = parse_os_release(_read(path))
                return
        facts["os"] = platform.platform()

    for key in ("cpu_count", "cpu_quota", "mem_total_mib", "mem_available_mib", "mem_limit_mib", "mem_limit_source",
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
    return {"versions_dir": folder, "live_version": int(match.group(1)) if match else None,
            "versions": {k: {f: v.get(f) for f in keys if v.get(f) is not None}
                         for k, v in (index.get("versions") or {}).items()},
            "disk": index.get("disk")}


def gather(venv=None, cuda_home=None, workdir="."):
    """Every fact as one dict (the JSON object this script prints); never raises.

    The interpreter probe (slow: it imports torch) runs in a thread while the other probes run.
    """
    started = time.time()
    facts = {"script_version": SCRIPT_VERSION, "workdir": workdir, "errors": []}
    box = {}

    def python_probe():
        try:
            box["python"] = probe_python(venv)
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
        facts["cuda"] = probe_cuda(cuda_home)
    except Exception as exc:  # pragma: no cover - defensive
        facts["cuda"] = {"home": None, "nvcc": None, "version": None, "error": "%s: %s" % (type(exc).__name__, exc)}
    for key, name, parse in (("cmake", "cmake", parse_cmake_version),
                             ("ninja", "ninja", lambda text: _first_line(text) or None)):
        try:
            facts[key] = probe_tool(name, venv, parse=parse)
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
    gather_system(facts, workdir)
    thread.join(PYTHON_PROBE_TIMEOUT_S + 15)
    facts["python"] = box.get("python") or {
        "executable": None, "venv": venv, "exists": None, "version": None, "torch": None,
        "torch_cuda": None, "torch_error": None, "error": "interpreter probe did not finish"}
    try:
        path, source = find_cuobjdump(facts["cuda"].get("home"), facts["python"].get("site_packages"))
        facts["cuda"]["cuobjdump"], facts["cuda"]["cuobjdump_source"] = path, source
    except Exception as exc:  # pragma: no cover - defensive
        facts["errors"].append("cuobjdump: %s: %s" % (type(exc).__name__, exc))
    facts["duration_s"] = round(time.time() - started, 3)
    return facts


def set_timeouts(probe_timeout_s):
    """Set the per-command timeout (seconds); the interpreter probe gets twice that."""
    global TIMEOUT_S, PYTHON_PROBE_TIMEOUT_S
    if probe_timeout_s and probe_timeout_s > 0:
        TIMEOUT_S = float(probe_timeout_s)
        PYTHON_PROBE_TIMEOUT_S = 2 * float(probe_timeout_s)


def main(argv=None):
    """Parse arguments, gather, print one JSON object; always returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=None, help="Python environment whose bin/python3 builds use")
    parser.add_argument("--cuda-home", default=None, help="CUDA toolkit root to use (holds bin/nvcc)")
    parser.add_argument("--workdir", default=".", help="remote working folder (for free disk space)")
    parser.add_argument("--probe-timeout-s", type=float, default=TIMEOUT_S,
                        help="seconds each probe command may take (the torch import gets twice that)")
    parser.add_argument("--nvml-child", action="store_true", help=argparse.SUPPRESS)
    args, unknown = parser.parse_known_args(argv)
    set_timeouts(args.probe_timeout_s)
    if args.nvml_child:
        nvml_child()
        return 0
    try:
        facts = gather(venv=args.venv or None, cuda_home=args.cuda_home or None, workdir=args.workdir)
    except BaseException as exc:  # pragma: no cover - defensive: still print an object
        facts = {"script_version": SCRIPT_VERSION, "gpus": [], "errors": ["%s: %s" % (type(exc).__name__, exc)]}
    if unknown:
        facts.setdefault("errors", []).append("unknown arguments ignored: %s" % " ".join(unknown))
    sys.stdout.write(json.dumps(facts, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
