#!/usr/bin/env python3
"""List the SASS and PTX embedded in a wheel's compiled extensions (stdlib only, Python 3.8+).

usage: wheel_sass.py WHEEL [CUOBJDUMP]

Extracts every ``.so`` of the wheel into a temporary folder and runs ``cuobjdump --list-elf`` (one
``*.sm_XX[a|f].cubin`` ELF per compiled SASS arch) and ``cuobjdump --list-ptx`` (one
``*.sm_XX[a|f].ptx`` per embedded PTX, i.e. virtual arch ``compute_XX``) on it. Prints one JSON
object: ``{"archs": ["sm_90a", ...], "ptx": ["compute_80", ...], "files": {"fp4_kernels/_C...so":
["sm_90a"]}, "error": null}``.
Runs on the host, or on the controller when the host has no cuobjdump. Exit 0 unless the wheel
cannot be read or cuobjdump cannot run (exit 3, with ``error``).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ARCH = re.compile(r"\b(sm_\d+[af]?)\b")


def find_cuobjdump(given=None):
    """The given path, else CUDA_HOME/bin, else PATH, else PyPI's nvidia-cuda-cuobjdump."""
    cands = [given] if given else []
    home = os.environ.get("CUDA_HOME")
    if home:
        cands.append(os.path.join(home, "bin", "cuobjdump"))
    cands.append(shutil.which("cuobjdump"))
    try:
        import nvidia  # noqa: F401  (namespace package of PyPI's CUDA wheels)

        for base in getattr(nvidia, "__path__", []):
            for sub in ("cu13", "cuda_cuobjdump", "cu12"):
                cands.append(os.path.join(base, sub, "bin", "cuobjdump"))
    except ImportError:
        pass
    for cand in cands:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def main(argv):
    if len(argv) < 2:
        print("usage: wheel_sass.py WHEEL [CUOBJDUMP]", file=sys.stderr)
        return 2
    wheel = argv[1]
    tool = find_cuobjdump(argv[2] if len(argv) > 2 else None)
    out = {"archs": [], "ptx": [], "files": {}, "cuobjdump": tool, "error": None}
    if tool is None:
        out["error"] = "cuobjdump not found"
        print(json.dumps(out))
        return 3
    tmp = tempfile.mkdtemp(prefix="fleetctl-sass-")
    ptx = set()
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.endswith(".so") or ".so." in n]
            for name in names:
                target = os.path.join(tmp, str(len(out["files"])) + ".so")
                with zf.open(name) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                res = subprocess.run([tool, "--list-elf", target], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
                archs = sorted(set(ARCH.findall(res.stdout)))
                out["files"][name] = archs
                res = subprocess.run([tool, "--list-ptx", target], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
                ptx.update(a.replace("sm_", "compute_") for a in ARCH.findall(res.stdout))
        out["archs"] = sorted({a for v in out["files"].values() for a in v})
        out["ptx"] = sorted(ptx)
    except (OSError, zipfile.BadZipFile, subprocess.SubprocessError) as exc:
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
        print(json.dumps(out))
        return 3
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
