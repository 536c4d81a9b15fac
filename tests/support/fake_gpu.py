"""A fake ``nvidia-smi`` for test hosts: a tiny /bin/sh script reporting chosen GPUs.

Put its folder first on a test host's PATH to simulate an SM 9.0 / 10.0 / 12.0 host, a mixed
one, or one with no GPU. It answers the way the real tool does for what fleetctl asks:

* ``--query-gpu=F1,F2,... --format=csv[,noheader][,nounits]`` for the fields ``index``,
  ``name``, ``compute_cap``, ``memory.total``, ``driver_version``, ``uuid`` (:func:`fake_uuid`),
  ``pci.bus_id`` (:func:`fake_bus_id`) and ``mig.mode.current`` (``[N/A]``) (any order; any other field
  -> ``Field "X" is not a valid field to query.``, exit 2);
* ``-L``: ``GPU 0: NAME (UUID: GPU-...)`` lines;
* no GPU: ``No devices were found`` on stdout, exit 6, whatever was asked;
* a GPU in an error state (``values``): the markers the real one prints in a field's place, exit 0,
  as in ``1, NVIDIA H100 80GB HBM3, [Unknown Error], [Unknown Error], 580.95.05, GPU-..., 00000000:3C:00.0,
  [Unknown Error]`` (no `` MiB`` unit after a marker);
* a corrupted infoROM (``inforom_corrupt``): ``WARNING: infoROM is corrupted at gpu BUS_ID`` before
  the rows, exit 14.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

#: Recorded rows (compute_cap, name, memory MiB) of real GPUs, as nvidia-smi reports them.
H200 = ("9.0", "NVIDIA H200", 143771)
H100 = ("9.0", "NVIDIA H100 80GB HBM3", 81559)
B200 = ("10.0", "NVIDIA B200", 183359)
RTX_PRO_6000 = ("12.0", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887)
L40S = ("8.9", "NVIDIA L40S", 46068)

def fake_uuid(index: int) -> str:
    """The UUID the fake reports for GPU ``index`` (nvidia-smi's ``GPU-`` form)."""
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def fake_bus_id(index: int) -> str:
    """The PCI bus id the fake reports for GPU ``index`` (nvidia-smi's ``pci.bus_id`` form)."""
    return f"00000000:{0x17 + index:02X}:00.0"


#: The ``--query-gpu`` fields the fake knows (:func:`write_fake_nvidia_smi`'s ``unknown_fields`` drops some).
FAKE_FIELDS = ("index", "name", "compute_cap", "memory.total", "driver_version", "uuid", "pci.bus_id",
               "mig.mode.current")


def _script(gpus: list[tuple[str, str, int]], driver: str, unknown_fields: tuple[str, ...] = (),
            values: dict[int, dict[str, str]] | None = None, inforom_corrupt: tuple[int, ...] = ()) -> str:
    q = shlex.quote
    if not gpus:
        return "#!/bin/sh\necho 'No devices were found'\nexit 6\n"
    rows = []
    for i, (cap, name, mem) in enumerate(gpus):
        row = dict(zip(FAKE_FIELDS, (str(i), name, cap, str(mem), driver, fake_uuid(i), fake_bus_id(i), "[N/A]")))
        row.update((values or {}).get(i, {}))
        rows.append("  row " + " ".join(q(row[f]) for f in FAKE_FIELDS))
    listing = "\n".join(
        f"  echo {q(f'GPU {i}: {name} (UUID: {fake_uuid(i)})')}"
        for i, (_, name, _) in enumerate(gpus)
    )
    return f"""#!/bin/sh
# fake nvidia-smi written by tests/support/fake_gpu.py
query=""
format="csv"
prev=""
for a in "$@"; do
  case "$prev" in
    --query-gpu) query="$a" ;;
    --format) format="$a" ;;
  esac
  case "$a" in
    --query-gpu=*) query="${{a#--query-gpu=}}" ;;
    --format=*) format="${{a#--format=}}" ;;
    -L|--list-gpus) listing=1 ;;
  esac
  prev="$a"
done
if [ -n "$listing" ]; then
{listing}
  exit 0
fi
if [ -z "$query" ]; then
  echo "fake nvidia-smi: GPUs: {len(gpus)}, driver {driver}"
  exit 0
fi
{chr(10).join(f"echo {q(f'WARNING: infoROM is corrupted at gpu {fake_bus_id(i)}')}" for i in inforom_corrupt)}
nounits=0; noheader=0
case ",$format," in *,nounits,*) nounits=1 ;; esac
case ",$format," in *,noheader,*) noheader=1 ;; esac
oldifs="$IFS"
IFS=","
for f in $query; do
  case "$f" in
    {"|".join(f for f in FAKE_FIELDS if f not in unknown_fields)}) ;;
    *) echo "Field \\"$f\\" is not a valid field to query."; echo; echo "Please see 'nvidia-smi --help-query-gpu' for usage information."; exit 2 ;;
  esac
done
IFS="$oldifs"
emit() {{
  # $1: text of one line; fields joined with ", "
  printf '%s\\n' "$1"
}}
if [ "$noheader" = 0 ]; then
  line=""
  IFS=","
  for f in $query; do
    case "$f" in
      memory.total) h="memory.total [MiB]" ;;
      *) h="$f" ;;
    esac
    if [ -z "$line" ]; then line="$h"; else line="$line, $h"; fi
  done
  IFS="$oldifs"
  emit "$line"
fi
row() {{
  line=""
  IFS=","
  for f in $query; do
    case "$f" in
      index) v="$1" ;;
      name) v="$2" ;;
      compute_cap) v="$3" ;;
      memory.total) case "$nounits$4" in 1*|*\\]) v="$4" ;; *) v="$4 MiB" ;; esac ;;
      driver_version) v="$5" ;;
      uuid) v="$6" ;;
      pci.bus_id) v="$7" ;;
      mig.mode.current) v="$8" ;;
    esac
    if [ -z "$line" ]; then line="$v"; else line="$line, $v"; fi
  done
  IFS="$oldifs"
  emit "$line"
}}
{chr(10).join(rows)}
exit {14 if inforom_corrupt else 0}
"""


def write_fake_nvidia_smi(
    bin_dir: str | os.PathLike[str],
    gpus: list[tuple[str, str, int]],
    driver: str = "580.82.07",
    unknown_fields: tuple[str, ...] = (),
    values: dict[int, dict[str, str]] | None = None,
    inforom_corrupt: tuple[int, ...] = (),
) -> Path:
    """Write an executable fake ``nvidia-smi`` into ``bin_dir`` (created if missing).

    Args:
        bin_dir: folder to put first on the test host's PATH.
        gpus: one ``(compute_cap, name, memory_mib)`` per GPU, index = position
            (``[("9.0", "NVIDIA H200", 143771)]``); ``compute_cap`` may be ``"[N/A]"``.
            Empty: the script prints ``No devices were found`` and exits 6, as the real one does.
        driver: the ``driver_version`` every GPU reports.
        unknown_fields: fields this driver's nvidia-smi does not know (``("compute_cap",)`` for
            a driver before R510): asked, it prints ``Field "compute_cap" is not a valid field to
            query.`` on stdout and exits 2, as the real one does.
        values: ``{index: {field: value}}``, what GPU ``index`` prints for a field instead
            (``{1: {"compute_cap": "[Unknown Error]"}}``: a GPU in an error state); a field of
            :data:`FAKE_FIELDS`.
        inforom_corrupt: indexes of GPUs whose infoROM is corrupted: a query prints
            ``WARNING: infoROM is corrupted at gpu BUS_ID`` for each before the rows, which it
            still prints, and exits 14 (``nvidia-smi -h``, RETURN VALUE: "infoROM is corrupted").

    Returns:
        The script's path.
    """
    folder = Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(_script(list(gpus), driver, tuple(unknown_fields), values, tuple(inforom_corrupt)))
    path.chmod(0o755)
    return path


def write_failing_nvidia_smi(
    bin_dir: str | os.PathLike[str],
    rc: int = 9,
    message: str = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.",
) -> Path:
    """Write an ``nvidia-smi`` that fails as it does with no loaded driver (stdout message, exit 9)."""
    folder = Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(f"#!/bin/sh\necho {shlex.quote(message)}\nexit {int(rc)}\n")
    path.chmod(0o755)
    return path


#: What nvidia-smi prints for a GPU that has fallen off the bus (Xid 79), NVML_ERROR_GPU_IS_LOST, in
#: the place of that GPU's row; it then exits 15 (``nvidia-smi -h``, RETURN VALUE).
GPU_LOST_RC = 15


def gpu_lost_message(index: int) -> str:
    """The line nvidia-smi prints for lost GPU ``index`` (its bus id as :func:`fake_bus_id`, 4-digit domain)."""
    return (f"Unable to determine the device handle for GPU {fake_bus_id(index)[4:]}: GPU is lost.  "
            "Reboot the system to recover this GPU")


def write_lost_gpu_nvidia_smi(bin_dir: str | os.PathLike[str], healthy: list[tuple[str, str, int]],
                              stream: str = "stdout") -> Path:
    """Write an ``nvidia-smi`` of a host whose GPU ``len(healthy)`` is lost: it answers every query
    with the ``healthy`` GPUs' rows (indexes 0..n-1, as :func:`write_fake_nvidia_smi`), then the
    lost GPU's :func:`gpu_lost_message` on ``stream`` (``"stdout"`` or ``"stderr"``), and exits 15."""
    folder = Path(bin_dir)
    write_fake_nvidia_smi(folder / "healthy", healthy)
    path = folder / "nvidia-smi"
    redirect = " >&2" if stream == "stderr" else ""
    healthy_smi = shlex.quote(str(folder / "healthy" / "nvidia-smi"))
    lost = shlex.quote(gpu_lost_message(len(healthy)))
    path.write_text(f'#!/bin/sh\n{healthy_smi} "$@"\necho {lost}{redirect}\nexit {GPU_LOST_RC}\n')
    path.chmod(0o755)
    return path


def write_unrunnable_nvidia_smi(bin_dir: str | os.PathLike[str], how: str = "mode") -> Path:
    """Write an ``nvidia-smi`` (one that would list an H200) that cannot be executed, as found on
    hosts: ``how="mode"``, installed without its x bit (mode 0644; ``shutil.which`` skips it);
    ``how="exec"``, mode 0755 but its exec fails with EACCES (permission denied) as on a noexec
    mount: its ``#!`` interpreter, beside it, has no x bit."""
    path = write_fake_nvidia_smi(bin_dir, [H200])
    if how == "mode":
        path.chmod(0o644)
    elif how == "exec":
        interp = Path(bin_dir) / "sh-without-x"
        interp.write_bytes(Path("/bin/sh").read_bytes())
        interp.chmod(0o644)
        path.write_text(path.read_text().replace("#!/bin/sh\n", f"#!{interp}\n", 1))
    else:
        raise ValueError(how)
    return path


def write_fake_libnvml(
    lib_dir: str | os.PathLike[str],
    gpus: list[tuple[str, str, int]],
    driver: str = "580.82.07",
    init_rc: int = 0,
    cc: str = "cc",
) -> Path:
    """Compile a fake ``libnvidia-ml.so.1`` into ``lib_dir`` (put it on ``LD_LIBRARY_PATH``).

    It implements the NVML calls the facts script makes (nvmlInit_v2, nvmlShutdown,
    nvmlErrorString, nvmlSystemGetDriverVersion, nvmlDeviceGetCount_v2,
    nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetCudaComputeCapability,
    nvmlDeviceGetMemoryInfo, nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3) with the signatures of
    nvml.h, answering with ``gpus`` (UUIDs and bus ids as :func:`fake_uuid`, :func:`fake_bus_id`)
    (``(compute_cap, name, memory_mib)``; memory reported in bytes).

    Args:
        init_rc: what nvmlInit_v2 returns (9 = NVML_ERROR_DRIVER_NOT_LOADED).
        cc: the C compiler.

    Raises:
        subprocess.CalledProcessError: the compiler failed.
    """
    import subprocess

    folder = Path(lib_dir)
    folder.mkdir(parents=True, exist_ok=True)

    def c_str(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    majors, minors = [], []
    for cap, _, _ in gpus:
        major, _, minor = cap.partition(".")
        majors.append(major if major.isdigit() else "0")
        minors.append(minor if minor.isdigit() else "0")
    n = len(gpus)
    pad = max(n, 1)
    names = ", ".join(c_str(name) for _, name, _ in gpus) or '""'
    mems = ", ".join(f"{int(mem)}ULL * 1048576ULL" for _, _, mem in gpus) or "0"
    source = f"""
#include <stdio.h>
#include <string.h>
typedef struct {{ unsigned long long total, free, used; }} nvmlMemory_t;
static const char *names[{pad}] = {{{names}}};
static const int majors[{pad}] = {{{", ".join(majors) or "0"}}};
static const int minors[{pad}] = {{{", ".join(minors) or "0"}}};
static const unsigned long long mems[{pad}] = {{{mems}}};
static int inited = 0;
int nvmlInit_v2(void) {{ if ({int(init_rc)} == 0) inited = 1; return {int(init_rc)}; }}
int nvmlShutdown(void) {{ inited = 0; return 0; }}
const char *nvmlErrorString(int r) {{
  switch (r) {{ case 9: return "Driver Not Loaded"; case 2: return "Invalid Argument";
    case 1: return "Uninitialized"; default: return "Unknown Error"; }}
}}
int nvmlSystemGetDriverVersion(char *buf, unsigned int len) {{
  if (!inited) return 1; strncpy(buf, {c_str(driver)}, len); buf[len - 1] = 0; return 0;
}}
int nvmlDeviceGetCount_v2(unsigned int *count) {{ if (!inited) return 1; *count = {n}; return 0; }}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {{
  if (!inited) return 1; if (i >= {n}) return 2; *h = (void *)(unsigned long)(i + 1); return 0;
}}
static int idx(void *h) {{ return (int)((unsigned long)h) - 1; }}
int nvmlDeviceGetName(void *h, char *buf, unsigned int len) {{
  strncpy(buf, names[idx(h)], len); buf[len - 1] = 0; return 0;
}}
int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {{
  *major = majors[idx(h)]; *minor = minors[idx(h)]; return 0;
}}
typedef struct {{ char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32]; }} nvmlPciInfo_t;
int nvmlDeviceGetUUID(void *h, char *buf, unsigned int len) {{
  snprintf(buf, len, "GPU-00000000-0000-0000-0000-%012d", idx(h)); return 0;
}}
int nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) {{
  memset(p, 0, sizeof *p); snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", 0x17 + idx(h)); return 0;
}}
int nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {{
  m->total = mems[idx(h)]; m->free = m->total; m->used = 0; return 0;
}}
"""
    src = folder / "fake_nvml.c"
    src.write_text(source)
    out = folder / "libnvidia-ml.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out


#: What the proprietary module's ``/proc/driver/nvidia/version`` says (its first line, as on a host).
PROC_VERSION = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Release Build  "
                "(dvs-builder@U16-I3-A17-3-1)  Wed May 21 03:41:20 UTC 2025\n"
                "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")


def loaded_module_wrap(folder: str | os.PathLike[str], version: str) -> list[str]:
    """An sshd ``wrap`` (tests/support/sshd.py) for a host whose loaded NVIDIA kernel module is
    ``version``: sshd, and so every session, runs in a private mount namespace where ``folder``
    (holding ``nvidia/version``, :data:`PROC_VERSION`) is bind-mounted on ``/proc/driver`` (needs root
    and ``unshare``). ``folder`` must stay until the host is stopped."""
    folder = Path(folder)
    (folder / "nvidia").mkdir(parents=True, exist_ok=True)
    (folder / "nvidia" / "version").write_text(PROC_VERSION.format(version=version))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /proc/driver && exec "$@"', str(folder)]


#: What nvidia-smi prints and returns after a driver update without a reboot (the loaded kernel
#: module and the installed NVML library differ): exit 18, NVML_ERROR_LIB_RM_VERSION_MISMATCH.
MISMATCH_RC = 18
MISMATCH_MESSAGE = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95"


def write_mismatched_nvidia_smi(bin_dir: str | os.PathLike[str]) -> Path:
    """Write an ``nvidia-smi`` failing as the real one does on a driver/library version mismatch."""
    folder = Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\nprintf '%s\\n' " + shlex.quote(MISMATCH_MESSAGE) + f"\nexit {MISMATCH_RC}\n")
    path.chmod(0o755)
    return path


#: What a driver/library mismatch looked like on an operator's host: the GPU's ``nvidia-smi -L``
#: line on stdout first, then NVML's error on stderr, exit 18.
GPU_LINE_FIRST = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"


def write_gpu_line_then_mismatch_nvidia_smi(bin_dir: str | os.PathLike[str]) -> Path:
    """Write an ``nvidia-smi`` that prints :data:`GPU_LINE_FIRST` on stdout, then the first line of
    :data:`MISMATCH_MESSAGE` on stderr, and exits :data:`MISMATCH_RC`."""
    folder = Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\necho " + shlex.quote(GPU_LINE_FIRST) + "\necho "
                    + shlex.quote(MISMATCH_MESSAGE.splitlines()[0]) + f" >&2\nexit {MISMATCH_RC}\n")
    path.chmod(0o755)
    return path


class FrozenCgroup:
    """A cgroup v1 freezer group in state FROZEN (root only): a process that enters it stops in
    the kernel (state ``D``) and SIGKILL stays pending until the group thaws, as nvidia-smi does
    on a GPU that has fallen off the bus (NVIDIA Xid 79). (cgroup v2's ``cgroup.freeze`` is no
    stand-in: its frozen processes die of SIGKILL, kernel docs cgroup-v2 "Core Interface Files".)

    ``close()`` thaws it, kills what is in it, waits for them to go and removes the group.

    Raises:
        RuntimeError: no writable v1 freezer hierarchy (``/sys/fs/cgroup/freezer``).
    """

    ROOT = Path("/sys/fs/cgroup/freezer")

    def __init__(self, name: str) -> None:
        if not (self.ROOT / "freezer.state").exists() and not (self.ROOT / "cgroup.procs").exists():
            raise RuntimeError(f"no cgroup v1 freezer at {self.ROOT}: cannot make an unkillable process")
        self.path = self.ROOT / name
        self.path.mkdir()
        (self.path / "freezer.state").write_text("FROZEN\n")

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        return [int(p) for p in self.procs_file.read_text().split()]

    def close(self) -> None:
        import signal
        import time

        if not self.path.exists():
            return
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        (self.path / "freezer.state").write_text("THAWED\n")
        deadline = time.monotonic() + 30
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.path.rmdir()


def write_hanging_nvidia_smi(bin_dir: str | os.PathLike[str], frozen: FrozenCgroup,
                             log: str | os.PathLike[str]) -> Path:
    """Write an ``nvidia-smi`` that blocks in the kernel and cannot be killed: it appends its pid
    to ``log`` (one line per start) and moves itself into ``frozen`` (:class:`FrozenCgroup`)."""
    folder = Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n# fake nvidia-smi of a GPU off the bus (tests/support/fake_gpu.py)\n"
                    f"echo $$ >> {shlex.quote(str(log))}\n"
                    f"echo $$ > {shlex.quote(str(frozen.procs_file))}\n"
                    "echo 'unreachable: the freezer stops this shell before here'\nexit 0\n")
    path.chmod(0o755)
    return path
