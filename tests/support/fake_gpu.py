"""A fake ``nvidia-smi`` for test hosts: a tiny /bin/sh script reporting chosen GPUs.

Put its folder first on a test host's PATH to simulate an SM 9.0 / 10.0 / 12.0 host, a mixed
one, or one with no GPU. It answers the way the real tool does for what fleetctl asks:

* ``--query-gpu=F1,F2,... --format=csv[,noheader][,nounits]`` for the fields ``index``,
  ``name``, ``compute_cap``, ``memory.total`` and ``driver_version`` (any order; any other field
  -> ``Field "X" is not a valid field to query.``, exit 2);
* ``-L``: ``GPU 0: NAME (UUID: GPU-...)`` lines;
* no GPU: ``No devices were found`` on stdout, exit 6, whatever was asked.
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

def _script(gpus: list[tuple[str, str, int]], driver: str) -> str:
    q = shlex.quote
    if not gpus:
        return "#!/bin/sh\necho 'No devices were found'\nexit 6\n"
    rows = []
    for i, (cap, name, mem) in enumerate(gpus):
        rows.append(f"  row {i} {q(name)} {q(cap)} {q(str(mem))} {q(driver)}")
    listing = "\n".join(
        f"  echo {q(f'GPU {i}: {name} (UUID: GPU-00000000-0000-0000-0000-{i:012d})')}"
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
nounits=0; noheader=0
case ",$format," in *,nounits,*) nounits=1 ;; esac
case ",$format," in *,noheader,*) noheader=1 ;; esac
oldifs="$IFS"
IFS=","
for f in $query; do
  case "$f" in
    index|name|compute_cap|memory.total|driver_version) ;;
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
      memory.total) if [ "$nounits" = 1 ]; then v="$4"; else v="$4 MiB"; fi ;;
      driver_version) v="$5" ;;
    esac
    if [ -z "$line" ]; then line="$v"; else line="$line, $v"; fi
  done
  IFS="$oldifs"
  emit "$line"
}}
{chr(10).join(rows)}
exit 0
"""


def write_fake_nvidia_smi(
    bin_dir: str | os.PathLike[str],
    gpus: list[tuple[str, str, int]],
    driver: str = "580.82.07",
) -> Path:
    """Write an executable fake ``nvidia-smi`` into ``bin_dir`` (created if missing).

    Args:
        bin_dir: folder to put first on the test host's PATH.
        gpus: one ``(compute_cap, name, memory_mib)`` per GPU, index = position
            (``[("9.0", "NVIDIA H200", 143771)]``); ``compute_cap`` may be ``"[N/A]"``.
            Empty: the script prints ``No devices were found`` and exits 6, as the real one does.
        driver: the ``driver_version`` every GPU reports.

    Returns:
        The script's path.
    """
    folder = Path(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(_script(list(gpus), driver))
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
    nvmlDeviceGetMemoryInfo) with the signatures of nvml.h, answering with ``gpus``
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
