"""Tiny extensions and real host conditions for the build-fault tests.

The extensions live in ``tests/data/ext/`` (a setuptools torch ``CUDAExtension`` and a CPU-only
``CppExtension``; a
scikit-build-core CMake project with a FetchContent and an ExternalProject dependency and a
generator it builds and runs; ``nb_ext``, a scikit-build-core project using the venv's nanobind
CMake package, built without isolation); they are copied into a test's folder before use. The conditions are
real, not simulated: a noexec or tiny tmpfs (``mount``), a memory cgroup (v1 or v2) around a test
host's sshd, a mount namespace in which ``/usr/local`` holds no CUDA (``unshare``), CMake 4 (PyPI's
``cmake``, installed by ``scripts/setup.sh``), wheels written with ``zipfile``. Only the GPU and the
driver are faked (``tests/support/fake_gpu.py``). Mounts and cgroups need root, which CI has.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import shlex
import shutil
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from tests.support.fleet import REPO

EXT = REPO / "tests" / "data" / "ext"
CMAKE4 = REPO / ".venv" / "opt" / "cmake4" / "cmake" / "data" / "bin" / "cmake"
REAL_CUDA = Path("/usr/local/cuda").resolve()


def tool_venv(path: Path) -> str:
    """A real venv for a test host, made by ``virtualenv`` (its own current pip and setuptools,
    setuptools' distutils shim active as on users' hosts); torch and the build tools come from
    :func:`tests.support.hostvenv.base_site` (never the controller's ``.venv`` itself); what
    fleetctl installs lands in the venv's own site-packages."""
    from tests.support.hostvenv import make_venv

    return make_venv(path, "virtualenv")


def site_packages(venv: str) -> Path:
    """A venv's own site-packages folder."""
    return next(Path(venv).glob("lib/python3*/site-packages"))


def torch_ext(dest: Path) -> Path:
    """A copy of the setuptools torch CUDA extension (``tiny_torch_ext``) at ``dest``."""
    shutil.copytree(EXT / "torch_ext", dest)
    return dest


def cpp_ext(dest: Path) -> Path:
    """A copy of the CPU-only setuptools torch ``CppExtension`` (``tiny_cpp_ext``) at ``dest``."""
    shutil.copytree(EXT / "cpp_ext", dest)
    return dest


def cmake_ext(dest: Path) -> Path:
    """A copy of the CMake project (``tiny_cmake_ext``) at ``dest``, with its ExternalProject
    dependency packed as the local tarball its CMakeLists.txt downloads (no network)."""
    shutil.copytree(EXT / "cmake_ext", dest, ignore=shutil.ignore_patterns("extdep"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted((EXT / "cmake_ext" / "deps" / "extdep").iterdir()):
            info = tar.gettarinfo(str(path), arcname=f"extdep/{path.name}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    (dest / "deps" / "extdep.tar.gz").write_bytes(buf.getvalue())
    return dest


def cmake4() -> Path:
    """CMake 4 (PyPI's ``cmake``, put in ``.venv/opt/cmake4`` by scripts/setup.sh)."""
    if not CMAKE4.exists():
        pytest.fail(f"{CMAKE4} missing: run scripts/setup.sh (it installs CMake 4 for the build tests)")
    return CMAKE4


def link_into(bin_dir: Path, *tools: Path) -> None:
    """Symlink ``tools`` into a test host's ``bin/`` (first on its PATH)."""
    for tool in tools:
        (bin_dir / tool.name).symlink_to(tool)


def wrapper_nvcc(root: Path) -> Path:
    """A second "toolkit" whose nvcc is a script running the real one: another compiler path."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f'#!/bin/sh\nexec {REAL_CUDA}/bin/nvcc "$@"\n')
    nvcc.chmod(0o755)
    return nvcc


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *options: str):
    """A tmpfs of ``size`` (``"1m"``) mounted at ``path`` with mount ``options`` (``noexec``)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", "mode=1777", *options]), "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path) -> None:
    """Fill the file system that holds ``folder`` to its last byte (a file ``filler`` in it)."""
    with open(folder / "filler", "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()


def _v2_root() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


@contextlib.contextmanager
def memory_cgroup(pid: int, limit_mib: int, name: str):
    """Put process ``pid`` (a test host's sshd: its sessions inherit it) into a new memory cgroup
    limited to ``limit_mib`` MiB: cgroup v2 when its memory controller is there, else v1."""
    v2 = _v2_root()
    if v2 is not None and "memory" in (v2 / "cgroup.controllers").read_text().split():
        with contextlib.suppress(OSError):
            (v2 / "cgroup.subtree_control").write_text("+memory")
        folder, limit, procs = v2 / f"fltest-{name}", "memory.max", "cgroup.procs"
    else:
        own = next(ln.split(":", 2)[2] for ln in Path("/proc/self/cgroup").read_text().splitlines()
                   if ln.split(":")[1].split(",").count("memory"))
        folder, limit, procs = Path("/sys/fs/cgroup/memory") / own.lstrip("/") / f"fltest-{name}", \
            "memory.limit_in_bytes", "cgroup.procs"
    try:
        folder.mkdir(exist_ok=True)
        (folder / limit).write_text(str(limit_mib * 1024 * 1024))
        (folder / procs).write_text(str(pid))
    except OSError as exc:
        pytest.fail(f"cannot make a memory cgroup at {folder} (root and a writable cgroup file system needed): {exc}")
    try:
        yield folder
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                folder.rmdir()
                break
            except OSError:  # sessions are still leaving the cgroup
                time.sleep(0.05)


def without_local_cuda(farm, name: str, *, shell: str | None = None, env: dict | None = None,
                       keep_versioned: bool = False, login_path_toolkit: Path | None = None):
    """Start a test host in its own mount namespace where ``/usr/local`` is an empty tmpfs: no
    ``/usr/local/cuda``, no nvcc on PATH. ``keep_versioned`` bind-mounts the real toolkit back as
    ``/usr/local/cuda-<version>`` only; ``login_path_toolkit`` bind-mounts it there and adds it to PATH
    in the login user's ``~/.bashrc`` *after* Debian's "not interactive: return" guard, so only an
    interactive login shell finds it."""
    from tests.support import sshd as sshd_mod

    root = farm.root / name
    stage = root / "stage"
    stage.mkdir(parents=True)
    script = [f"mount --bind {shlex.quote(str(REAL_CUDA))} {shlex.quote(str(stage))}",
              "mount -t tmpfs -o size=1m tmpfs /usr/local"]
    if keep_versioned:
        target = f"/usr/local/{REAL_CUDA.name}"
        script += [f"mkdir -p {target}", f"mount --bind {shlex.quote(str(stage))} {target}"]
    if login_path_toolkit is not None:
        login_path_toolkit.mkdir(parents=True, exist_ok=True)
        script.append(f"mount --bind {shlex.quote(str(stage))} {shlex.quote(str(login_path_toolkit))}")
        user = sshd_mod.ensure_user(shell or "bash")
        home = Path(os.path.expanduser(f"~{user}"))
        bashrc = root / "bashrc"
        bashrc.write_text("# ~/.bashrc of a host where CUDA is set up for terminal sessions only\n"
                          "case $- in\n    *i*) ;;\n      *) return;;\nesac\n"
                          f"export PATH={login_path_toolkit}/bin:$PATH\n")
        bashrc.chmod(0o644)
        script.append(f"mount --bind {shlex.quote(str(bashrc))} {shlex.quote(str(home / '.bashrc'))}")
    encoded = base64.b64encode(" && ".join(script).encode()).decode()
    wrap = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            f'eval "$(echo {encoded} | base64 -d)" && exec "$@"', "fleetctl-test-ns"]
    return farm.start(name, shell=shell, env=env, wrap=wrap)


def write_wheel(folder: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel written with zipfile (PEP 427: METADATA, WHEEL, RECORD)."""
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    entries = {**files, f"{dist}/METADATA": meta,
               f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: fleetctl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, text in entries.items():
            zf.writestr(path, text)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return out


def fake_torch_files(version: str) -> dict[str, str]:
    """The files of a stand-in ``torch`` distribution (version.py as torch lays it out), for a
    venv whose torch is upgraded or broken by a test; it imports, it computes nothing."""
    return {"torch/__init__.py": f"from .version import __version__, cuda  # stand-in torch {version}\n",
            "torch/version.py": f"__version__ = {version!r}\ncuda = None\n"}
