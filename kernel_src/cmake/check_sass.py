#!/usr/bin/env python3
"""Post-build check: the extension's embedded SASS must hold every requested arch.

Usage: check_sass.py --so PATH --archs 90a,120a [--nvcc PATH] [--cuobjdump PATH]

Runs ``cuobjdump --list-elf PATH`` and compares the ``sm_XX`` cubins it lists with the
requested archs. Exit 1 naming the missing arch(s); exit 0 when all are present.
cuobjdump is looked up in: --cuobjdump / $CUOBJDUMP, $CUDA_HOME/bin, next to nvcc, the
``nvidia/cu*/bin`` (PyPI nvidia-cuda-cuobjdump) folders of this and the base interpreter
and of $VIRTUAL_ENV, then PATH. If none exists the check is skipped with a warning (the
deploy tool re-checks on the controller). Stdlib only, Python 3.8+.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

_ELF_RE = re.compile(r"\bsm_(\d+[af]?)\b")


def _site_dirs():
    roots = {sys.prefix, sys.base_prefix, getattr(sys, "real_prefix", sys.prefix)}
    if os.environ.get("VIRTUAL_ENV"):
        roots.add(os.environ["VIRTUAL_ENV"])
    dirs = list(sys.path)
    for root in roots:
        dirs += glob.glob(os.path.join(root, "lib", "python3*", "site-packages"))
        dirs += glob.glob(os.path.join(root, "lib", "site-packages"))
    return [d for d in dirs if d and os.path.isdir(d)]


def find_cuobjdump(explicit: str | None = None, nvcc: str | None = None) -> str | None:
    """Return the path of a cuobjdump executable, or None."""
    cands = []
    if explicit:
        cands.append(explicit)
    if os.environ.get("CUOBJDUMP"):
        cands.append(os.environ["CUOBJDUMP"])
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "bin", "cuobjdump"))
    if nvcc:
        cands.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump"))
        cands.append(os.path.join(os.path.dirname(nvcc), "cuobjdump"))
    for d in _site_dirs():
        cands += sorted(glob.glob(os.path.join(d, "nvidia", "cu*", "bin", "cuobjdump")), reverse=True)
        cands += glob.glob(os.path.join(d, "nvidia", "cuda_cuobjdump", "bin", "cuobjdump"))
    which = shutil.which("cuobjdump")
    if which:
        cands.append(which)
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def sass_archs(so: str, cuobjdump: str) -> set[str]:
    """Archs (e.g. {"90a", "120a"}) of the cubins embedded in ``so``."""
    res = subprocess.run([cuobjdump, "--list-elf", so], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True)
    if res.returncode != 0:
        raise RuntimeError("%s --list-elf %s failed (rc %d): %s"
                           % (cuobjdump, so, res.returncode, res.stdout.strip()))
    return set(_ELF_RE.findall(res.stdout))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--so", required=True)
    ap.add_argument("--archs", required=True, help="comma/semicolon separated, e.g. 90a,120a")
    ap.add_argument("--nvcc")
    ap.add_argument("--cuobjdump")
    a = ap.parse_args(argv)
    want = [x.strip() for x in re.split(r"[,; ]", a.archs) if x.strip()]
    tool = find_cuobjdump(a.cuobjdump, a.nvcc)
    if tool is None:
        print("fp4_kernels: WARNING: cuobjdump not found ($CUDA_HOME/bin, next to nvcc, "
              "nvidia/cu*/bin in site-packages, PATH): the SASS check of %s was SKIPPED "
              "(requested: %s)" % (a.so, ", ".join("sm_" + w for w in want)), flush=True)
        return 0
    try:
        have = sass_archs(a.so, tool)
    except RuntimeError as e:
        print("fp4_kernels: ERROR: SASS check failed: %s" % e, flush=True)
        return 1
    missing = [w for w in want if w not in have]
    found = ", ".join("sm_" + h for h in sorted(have)) or "none"
    if missing:
        print("fp4_kernels: ERROR: %s lacks SASS for %s (cuobjdump %s found: %s)"
              % (a.so, ", ".join("sm_" + m for m in missing), tool, found), flush=True)
        return 1
    print("fp4_kernels: SASS check ok: %s holds %s (cuobjdump: %s)" % (a.so, found, tool),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
