"""What a build actually used, read inside the build, and the checks on it.

During a build, fleetctl's hooks (``playbooks/scripts/build_hook_*``) append JSON lines to the
record file ``FLEETCTL_BUILD_RECORD``: ``sitecustomize.py`` (on the build's PYTHONPATH) the torch
each Python process of the build imported; ``fleetctl_record.cmake`` (``CMAKE_PROJECT_INCLUDE``)
the cmake that ran and the CUDA compiler CMake chose. The build's own output adds what the hooks
cannot see: CMake's "The CUDA compiler identification is ..." and "Check for working CUDA
compiler: PATH", the nvcc of setuptools' compile lines, and the torch include folder they use
(which is how an isolated build, whose PYTHONPATH pip resets, still shows its torch).

:func:`parse_record` merges both into one record; :func:`torch_drift` and
:func:`compiler_mismatch` compare it with what fleetctl asked for.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from ..util.torchname import torch_label

#: The record file, next to the wheel in the build key's folder.
RECORD_NAME = ".fleetctl-build-record.jsonl"
#: The hooks: local script (``playbooks/scripts/``) -> its name in ``<run_dir>/scripts/build_hook/``
#: on the host (that folder goes on the build's PYTHONPATH, so the Python hook must be named
#: ``sitecustomize.py`` there).
HOOK_FILES = {"build_hook_sitecustomize.py": "sitecustomize.py", "build_hook_record.cmake": "fleetctl_record.cmake"}

_CMAKE_CUDA_ID = re.compile(r"The CUDA compiler identification is (\S+) ([\d.]+)")
_CMAKE_CUDA_CHECK = re.compile(r"Check for working CUDA compiler: (\S+)")
_COMPILE_NVCC = re.compile(r"(?:^|[\s\]])(/\S*/nvcc)\s.*\s-c\s")
_TORCH_INCLUDE = re.compile(r"-I(\S+?)/torch/include(?:\s|$)")
_FOUND_TORCH = re.compile(r"Found Torch: (\S+)")
_SKBUILD_CMAKE = re.compile(r"scikit-build-core \S+ using CMake (\S+)")


def parse_record(record_text: str, output: str) -> dict[str, Any]:
    """The build record: ``{"torch": [{"torch", "torch_cuda", "torch_file", "python"}...],
    "torch_dirs": ["<site-packages>/torch"...], "cmake": {"path", "version",
    "policy_version_minimum"} | None, "cuda_compiler": {"path", "realpath", "version", "source", "host_compiler"} | None}``
    (``host_compiler``: CMake's ``CMAKE_CUDA_HOST_COMPILER``, nvcc's ``-ccbin``; None when nvcc's
    default).

    Args:
        record_text: the record file's JSON lines (unreadable lines skipped).
        output: the build's stdout and stderr.
    """
    torches, cmake, compiler = [], None, None
    for line in record_text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        kind = item.pop("kind", None) if isinstance(item, dict) else None
        if kind == "torch":
            key = (item.get("torch"), item.get("torch_cuda"), item.get("torch_file"))
            if key not in [(t.get("torch"), t.get("torch_cuda"), t.get("torch_file")) for t in torches]:
                torches.append(item)
        elif kind == "cmake" and cmake is None:
            cmake = {"path": item.get("path"), "version": item.get("version"),
                     "policy_version_minimum": item.get("policy_version_minimum") or None}
        elif kind == "cuda_compiler" and compiler is None:
            compiler = {"path": item.get("path"), "realpath": item.get("realpath"),
                        "version": item.get("version") or None, "source": "CMake configure",
                        "host_compiler": item.get("host_compiler") or None}
    dirs: list[str] = []
    for m in _TORCH_INCLUDE.finditer(output):
        d = m.group(1).rstrip("/") + "/torch"
        if d not in dirs:
            dirs.append(d)
    for m in _FOUND_TORCH.finditer(output):  # .../torch/lib/libtorch.so
        d = posixpath.dirname(posixpath.dirname(m.group(1)))
        if d.endswith("/torch") and d not in dirs:
            dirs.append(d)
    if compiler is None:
        ident, check = _CMAKE_CUDA_ID.search(output), _CMAKE_CUDA_CHECK.search(output)
        nvcc = _COMPILE_NVCC.search(output)
        if check or nvcc:
            compiler = {"path": (check or nvcc).group(1), "realpath": None,
                        "version": ident.group(2) if ident else None,
                        "source": "CMake configure output" if check else "compile commands"}
    if cmake is None:
        m = _SKBUILD_CMAKE.search(output)
        if m:
            cmake = {"path": None, "version": m.group(1), "policy_version_minimum": None}
    return {"torch": torches, "torch_dirs": dirs, "cmake": cmake, "cuda_compiler": compiler}


def _major_minor(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or "")[:2])


def torch_drift(record: Mapping[str, Any], runtime: Mapping[str, Any]) -> str | None:
    """Why the build's torch is not the venv's, naming both; ``None`` when they agree (or the build
    did not use torch).

    Args:
        record: :func:`parse_record`'s result.
        runtime: the venv's torch as facts report it (``facts["python"]``: ``torch``,
            ``torch_cuda``, ``torch_file``).
    """
    want = (runtime.get("torch"), runtime.get("torch_cuda"))
    where = runtime.get("torch_file") or "its site-packages"
    for t in record.get("torch") or []:
        if (t.get("torch"), t.get("torch_cuda")) != want:
            return (f"torch drift: the build compiled against {torch_label(t.get('torch'), t.get('torch_cuda'))} "
                    f"from {t.get('torch_file')}, but the venv runs {torch_label(*want)} from {where}; "
                    "build in the venv (no_build_isolation: true, the default) with the torch it runs")
    runtime_dir = posixpath.dirname(where) if runtime.get("torch_file") else None
    if runtime_dir and not record.get("torch"):
        other = [d for d in record.get("torch_dirs") or [] if d != runtime_dir]
        if other:
            return (f"torch drift: the build compiled against the torch in {other[0]} (an isolated build's own "
                    f"torch), but the venv runs {torch_label(*want)} from {where}; build in the venv "
                    "(no_build_isolation: true, the default)")
    return None


def compiler_mismatch(record: Mapping[str, Any], cuda: Mapping[str, Any]) -> str | None:
    """Why the CUDA compiler the build used is not the one fleetctl asked for (``facts["cuda"]``:
    ``nvcc``, ``nvcc_realpath``, ``version``); ``None`` when it is, or nothing was recorded."""
    used = record.get("cuda_compiler") or {}
    want = cuda.get("nvcc")
    if not used.get("path") or not want:
        return None
    same_path = used["path"] in (want, cuda.get("nvcc_realpath")) or (
        used.get("realpath") is not None and used["realpath"] in (want, cuda.get("nvcc_realpath")))
    v_used, v_want = _major_minor(used.get("version")), _major_minor(cuda.get("version"))
    if same_path and (not v_used or not v_want or v_used == v_want):
        return None
    got = f"{used['path']}" + (f" ({used['version']})" if used.get("version") else "")
    return (f"the build used the CUDA compiler {got}, not {want} ({cuda.get('version')}) that fleetctl asked for "
            f"(seen in the {used.get('source')}): the project or a toolchain file sets CMAKE_CUDA_COMPILER or "
            "CUDA_HOME itself; remove that, or set the host var cuda_home to the toolkit you want")
