"""Helpers for the fp4_kernels tests (build commands, cuobjdump lookup, byte comparison)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNEL_SRC = REPO / "kernel_src"
ARCH_LIST = "9.0a;12.0a"


def cuda_home() -> str:
    for c in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if c and os.path.isfile(os.path.join(c, "bin", "nvcc")):
            return c
    found = shutil.which("nvcc")
    if found:
        return str(Path(found).resolve().parent.parent)
    raise RuntimeError("nvcc not found (CUDA_HOME, /usr/local/cuda, PATH): the kernel tests "
                       "need a real CUDA compiler")


def build_env(**extra) -> dict:
    env = dict(os.environ)
    home = cuda_home()
    env["CUDA_HOME"] = home
    env["PATH"] = os.path.join(home, "bin") + os.pathsep + env.get("PATH", "")
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    for k in ("TORCH_CUDA_ARCH_LIST", "CMAKE_CUDA_ARCHITECTURES", "CUDAARCHS", "MAX_JOBS",
              "FP4_ENABLE_CUDA", "FP4_REQUIRE_CUDA"):
        env.pop(k, None)
    env.update(extra)
    return env


def pip_wheel(out_dir: Path, env: dict, extra_args=()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
           "-w", str(out_dir), *extra_args, str(KERNEL_SRC)]
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=1800)


def find_cuobjdump() -> str:
    """The PyPI nvidia-cuda-cuobjdump binary (CI installs it), else CUDA_HOME/bin."""
    try:
        import nvidia  # namespace package
        for base in list(nvidia.__path__):
            for c in sorted(glob.glob(os.path.join(base, "cu*", "bin", "cuobjdump")), reverse=True):
                return c
            c = os.path.join(base, "cuda_cuobjdump", "bin", "cuobjdump")
            if os.path.isfile(c):
                return c
    except ImportError:
        pass
    c = os.path.join(cuda_home(), "bin", "cuobjdump")
    if os.path.isfile(c):
        return c
    raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")



#: Functions of ``cuobjdump -sass`` listings already made, by (path, size, mtime_ns, arch): the
#: session's .so is listed and parsed once (73 MB of SASS, ~15 s of CPU), not once per test.
_LISTINGS: dict = {}


def sass_all(path, arch: str | None = None) -> dict:
    """SASS text of every function of the ELF / cubin ``path``: {(arch, mangled name): text}, arch
    as cuobjdump prints it (``sm_90a``; ``arch`` for a cubin whose listing names none). Made
    once per state of the file; the caller gets a copy of the mapping."""
    st = os.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns, arch)
    if key not in _LISTINGS:
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(find_cuobjdump()) + os.pathsep + env.get("PATH", "")  # nvdisasm beside it
        out = subprocess.run([find_cuobjdump(), "-sass", str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, env=env)
        assert out.returncode == 0, out.stdout[-2000:]
        funcs, counts, cur = {}, {}, None
        for line in out.stdout.splitlines():
            m = re.search(r"arch = (sm_\d+a?)", line)
            if m:
                arch = m.group(1)
            m = re.search(r"Function : (\S+)", line)
            if m:
                cur = (arch, m.group(1))
                funcs[cur] = []
                counts[arch] = counts.get(arch, 0) + 1
            elif cur is not None:
                funcs[cur].append(line)
        _LISTINGS[key] = ({k: "\n".join(v) for k, v in funcs.items()}, counts)
    return dict(_LISTINGS[key][0])


def sass_function_counts(path) -> dict:
    """{arch: number of ``Function :`` entries} of ``path``'s listing (every ELF of the fatbins)."""
    sass_all(path)
    st = os.stat(path)
    return dict(_LISTINGS[(str(path), st.st_size, st.st_mtime_ns, None)][1])


def sass_functions(path, fn_substr: str, arch: str | None = None) -> dict:
    """:func:`sass_all` of ``path``, only the functions whose mangled name contains ``fn_substr``."""
    return {k: v for k, v in sass_all(path, arch).items() if fn_substr in k[1]}


def same_bytes(a, b) -> None:
    """Assert bitwise equality (NaNs compared by position)."""
    import torch

    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    a, b = a.cpu(), b.cpu()
    if a.is_floating_point() and a.dtype != torch.float8_e4m3fn:
        na, nb = torch.isnan(a), torch.isnan(b)
        assert torch.equal(na, nb), "NaN positions differ"
        a, b = a.masked_fill(na, 0), b.masked_fill(nb, 0)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[a.element_size()]
    ia, ib = a.contiguous().view(ints), b.contiguous().view(ints)
    bad = (ia != ib).nonzero()
    assert bad.numel() == 0, "%d elements differ, first at %s: %s vs %s" % (
        bad.shape[0], bad[0].tolist(), ia[tuple(bad[0])].item(), ib[tuple(bad[0])].item())
