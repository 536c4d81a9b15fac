"""Facts -> the build's environment and CMake defines: what every build step runs with.

Pure functions, no I/O (split from :mod:`fleetctl.build.archs`, which decides the arch list and the job
count): the environment a build step gets (CUDA_HOME, CUDACXX, PATH, the venv, the arch lists,
MAX_JOBS), the CMake defines a wheel build passes, and how each frontend spells them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .archs import DEFAULT_PATH, build_plan
from ..errors import FleetError

#: ``cmake_minimum_required`` floor CMake 4 needs for projects (and their FetchContent and
#: ExternalProject dependencies) that still declare < 3.5.
CMAKE_POLICY_VERSION_MINIMUM = "3.5"

_DEFINE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-+:]*$")


def _plan(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    plan = facts.get("build")
    return plan if isinstance(plan, Mapping) and plan.get("cuda_architectures") else build_plan(facts)


def build_environment(
    facts: Mapping[str, Any],
    *,
    venv: str | None,
    overrides: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """The environment every build step runs with: nothing left to the login shell's guesses.

    Args:
        facts: the host's facts; ``facts["build"]`` (from :func:`build_plan`) is used when
            present, else a plan is derived with the defaults.
        venv: the Python environment the build uses (the ``venv`` host var), or None.
        overrides: variables that win over the derived ones (the ``env`` of a task or host);
            a ``None`` value removes the variable.

    Returns:
        ``{name: value}`` with ``CUDA_HOME``, ``CUDA_PATH``, ``CUDACXX`` (``$CUDA_HOME/bin/nvcc``)
        when the host has a CUDA toolkit; ``PATH`` (venv bin, CUDA bin, the folder of the cmake
        facts report when it is none of these: the venv's ``bin/cmake``, else the login PATH's first
        ``cmake``, e.g. ``/opt/cmake/bin`` or ``~/.local/bin`` of ``pip install --user cmake``, so that
        the build runs the cmake facts show and the preflight checked; :data:`DEFAULT_PATH`,
        then uv's folder when it is elsewhere, e.g. ``~/.local/bin``); ``VIRTUAL_ENV`` when ``venv`` is set; ``TORCH_CUDA_ARCH_LIST``
        (``"9.0a;12.0a"``), ``CMAKE_CUDA_ARCHITECTURES`` and ``CUDAARCHS`` (``"90a;120a"``; CMake
        reads ``CUDAARCHS`` as the default of ``CMAKE_CUDA_ARCHITECTURES``), ``MAX_JOBS`` and
        ``CMAKE_BUILD_PARALLEL_LEVEL`` (jobs), ``NVCC_THREADS`` (``"1"``: parallelism comes from
        jobs, and memory was budgeted per job), ``CMAKE_POLICY_VERSION_MINIMUM`` (``"3.5"``: the
        environment variable, so that the CMake runs of FetchContent and ExternalProject
        dependencies get it too, not only the top-level project's cache).
        Without a CUDA toolkit the CUDA_* keys are absent; the build task's preflight must
        check ``facts["cuda"]["nvcc"]``.
    """
    plan = _plan(facts)
    cuda = facts.get("cuda") or {}
    home = cuda.get("home")
    path: list[str] = []
    env: dict[str, str] = {}
    if venv:
        venv = venv.rstrip("/") or "/"
        env["VIRTUAL_ENV"] = venv
        path.append(f"{venv}/bin")
    if home:
        home = home.rstrip("/") or "/"
        nvcc = cuda.get("nvcc") or f"{home}/bin/nvcc"
        env.update({"CUDA_HOME": home, "CUDA_PATH": home, "CUDACXX": nvcc})
        path.append(f"{home}/bin")
    # the cmake facts report (the venv's, else the login PATH's first: /opt/cmake/bin, ~/.local/bin
    # of a `pip install --user cmake`) is the one the build runs, not an older one in DEFAULT_PATH
    cmake = (facts.get("cmake") or {}).get("path")
    if cmake and "/" in cmake and (cmake.rsplit("/", 1)[0] or "/") not in DEFAULT_PATH.split(":"):
        path.append(cmake.rsplit("/", 1)[0] or "/")
    path.extend(DEFAULT_PATH.split(":"))
    uv = (facts.get("uv") or {}).get("path")
    if uv and "/" in uv:
        path.append(uv.rsplit("/", 1)[0] or "/")
    seen: list[str] = []
    for entry in path:
        if entry not in seen:
            seen.append(entry)
    env["PATH"] = ":".join(seen)
    jobs = str(plan["max_jobs"])
    env.update({
        "TORCH_CUDA_ARCH_LIST": plan["torch_cuda_arch_list"],
        "CMAKE_CUDA_ARCHITECTURES": plan["cuda_architectures"],
        "CUDAARCHS": plan["cuda_architectures"],
        "MAX_JOBS": jobs,
        "CMAKE_BUILD_PARALLEL_LEVEL": jobs,
        "NVCC_THREADS": str(plan.get("nvcc_threads") or 1),
        "CMAKE_POLICY_VERSION_MINIMUM": CMAKE_POLICY_VERSION_MINIMUM,
    })
    for name, value in (overrides or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def cmake_defines(facts: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """CMake ``-D`` definitions for a build on this host.

    Returns:
        ``{"CMAKE_POLICY_VERSION_MINIMUM": "3.5"`` (CMake 4 refuses fetched projects declaring
        ``cmake_minimum_required`` < 3.5 without it), ``"CMAKE_CUDA_ARCHITECTURES": "90a;120a"``,
        and, when the host has nvcc, ``"CMAKE_CUDA_COMPILER"`` (its path) and
        ``"CUDAToolkit_ROOT"`` (the toolkit home, for ``find_package(CUDAToolkit)``)``}``,
        then ``extra`` (which wins; bools become ``ON``/``OFF``, a ``None`` value removes the key).
    """
    plan = _plan(facts)
    cuda = facts.get("cuda") or {}
    defines = {
        "CMAKE_POLICY_VERSION_MINIMUM": CMAKE_POLICY_VERSION_MINIMUM,
        "CMAKE_CUDA_ARCHITECTURES": plan["cuda_architectures"],
    }
    if cuda.get("nvcc"):
        defines["CMAKE_CUDA_COMPILER"] = cuda["nvcc"]
    if cuda.get("home"):
        defines["CUDAToolkit_ROOT"] = cuda["home"]
    for name, value in (extra or {}).items():
        if value is None:
            defines.pop(name, None)
        elif isinstance(value, bool):
            defines[name] = "ON" if value else "OFF"
        else:
            defines[name] = str(value)
    return defines


#: CMake defines that set how fast a build runs, never what it produces: left out of the inputs
#: that decide a wheel (its arch class), so hosts that differ only in memory share one build.
#: ``SGL_KERNEL_COMPILE_THREADS`` is nvcc's ``--threads`` in sgl-kernel (fleetctl/build/sgl_recipe.py).
PARALLELISM_DEFINES = frozenset({"SGL_KERNEL_COMPILE_THREADS"})


def wheel_defines(defines: Mapping[str, str]) -> dict[str, str]:
    """The defines that decide a wheel's bytes: ``defines`` without :data:`PARALLELISM_DEFINES`."""
    return {k: v for k, v in defines.items() if k not in PARALLELISM_DEFINES}


#: The defines :func:`cmake_defines` fills with the toolkit's path, and the ``cuda`` facts keys of
#: that path as the host spelled it and as ``os.path.realpath`` resolves it (playbooks/scripts/facts.py).
TOOLKIT_PATH_DEFINES = {"CMAKE_CUDA_COMPILER": ("nvcc", "nvcc_realpath"), "CUDAToolkit_ROOT": ("home", "home_realpath")}


def keyed_defines(defines: Mapping[str, str], facts: Mapping[str, Any]) -> dict[str, str]:
    """The defines as a build key holds them (:func:`fleetctl.tasks.build_keys.build_inputs`):
    :func:`wheel_defines`, with the toolkit's path (:data:`TOOLKIT_PATH_DEFINES`) spelled as its
    real path when the host reported it, so that ``/usr/local/cuda`` and the ``/usr/local/cuda-13.0``
    it links to (NVIDIA's installers lay toolkits out so) are one arch class, not two (operator
    trial: two hosts built the same wheel twice). A define the task set to another path is kept as
    written (the controller cannot resolve a host's symlink)."""
    cuda = facts.get("cuda") or {}
    out = wheel_defines(defines)
    for name, (spelled, real) in TOOLKIT_PATH_DEFINES.items():
        if name in out and cuda.get(real) and out[name] == cuda.get(spelled):
            out[name] = cuda[real]
    return out


def toolkit_identity(facts: Mapping[str, Any]) -> dict[str, str]:
    """What the CUDA toolkit is, for a build key: ``{"cuda": "13.0", "cuda_build": "V13.0.88
    cuda_13.0.r13.0/compiler.36424714_0"}`` (``nvcc --version``'s release, V number and Build line,
    facts ``cuda.version`` / ``cuda.build``); ``cuda_build`` is left out when the facts lack it, and
    ``cuda`` is None without a toolkit. Two nvcc builds of one release do not share a wheel."""
    cuda = facts.get("cuda") or {}
    out = {"cuda": cuda.get("version")}
    if cuda.get("build"):
        out["cuda_build"] = cuda["build"]
    return out


#: The config-settings flag each PEP 517 front end accepts (``-C`` works for all three):
#: pip ``--config-settings``; uv (``uv build``, ``uv pip install``) and pypa/build
#: ``--config-setting``.
CONFIG_SETTINGS_FLAG = {"pip": "--config-settings", "uv": "--config-setting", "build": "--config-setting"}


def config_settings_args(defines: Mapping[str, Any], *, frontend: str = "pip") -> list[str]:
    """Render CMake defines as scikit-build-core config settings for a build front end.

    scikit-build-core reads ``cmake.define.NAME=VALUE`` (a table of ``-D`` definitions,
    additive to ``[tool.scikit-build.cmake.define]``); ``cmake.args`` would replace the
    project's own args, so it is not used. A value holding ``;`` stays one CMake list.

    Args:
        defines: ``{NAME: VALUE}`` as :func:`cmake_defines` returns (bools become ``ON``/``OFF``).
        frontend: ``"pip"`` (``--config-settings=cmake.define.NAME=VALUE``), ``"uv"`` or
            ``"build"`` (``--config-setting=cmake.define.NAME=VALUE``).

    Returns:
        argv items, one per define, in ``defines`` order.

    Raises:
        FleetError: unknown ``frontend``, or a define name that is empty or holds ``=`` or spaces.
    """
    try:
        flag = CONFIG_SETTINGS_FLAG[frontend]
    except KeyError:
        raise FleetError(f"unknown build front end {frontend!r} (want one of {', '.join(CONFIG_SETTINGS_FLAG)})") from None
    args = []
    for name, value in defines.items():
        if not _DEFINE_NAME_RE.match(str(name)):
            raise FleetError(f"invalid CMake define name {name!r}")
        if isinstance(value, bool):
            value = "ON" if value else "OFF"
        args.append(f"{flag}=cmake.define.{name}={value}")
    return args
