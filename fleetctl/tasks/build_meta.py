"""What a source tree says about its own build: the package's build requirements, its backend,
and whether it is a torch extension or a CMake project.

Read from the tree's top-level ``pyproject.toml`` (PEP 518 ``[build-system]``), ``setup.py`` and
``CMakeLists.txt``: on the controller when a ``copy`` task of the run uploads the tree (so the
answer is known before anything is uploaded), else on the host, in the same read as the tree's
CMake files (:func:`fleetctl.tasks.build_deps.read_tree`: one probe answers both).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: The files read, at the tree's top level.
META_FILES = ("pyproject.toml", "setup.py", "CMakeLists.txt")

#: PEP 517's fallback when a tree has no ``[build-system]`` table: setuptools' legacy backend.
LEGACY_REQUIRES = ("setuptools>=40.8.0",)

#: What building a torch C++/CUDA extension with ``torch.utils.cpp_extension`` needs in the venv
#: besides torch (its ``BuildExtension`` imports setuptools and packaging and drives ninja;
#: ``wheel`` only for setuptools < 70.1, which has no ``bdist_wheel`` of its own).
TORCH_EXTENSION_TOOLS = ("setuptools", "packaging", "ninja")

_TORCH_EXT = re.compile(r"torch\.utils\.cpp_extension|\bCUDAExtension\b|\bCppExtension\b|\bBuildExtension\b")
_CMAKE_TORCH = re.compile(r"find_package\s*\(\s*Torch\b", re.I)
_CMAKE_MIN = re.compile(r"^[ \t]*cmake_minimum_required\s*\(\s*VERSION\s+([0-9]+(?:\.[0-9]+)*)", re.I | re.M)
_LOWER = re.compile(r"^\s*(?:>=|==|~=|>)\s*([0-9]+(?:\.[0-9]+)*)\s*$")


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def cmake_floor(pyproject_table: Mapping[str, Any], cmakelists: str | None) -> tuple[str, str] | None:
    """The newest CMake version the tree requires and where it says so (see
    :attr:`BuildMeta.cmake_minimum`): ``("3.26", "CMakeLists.txt cmake_minimum_required")``."""
    found: list[tuple[str, str]] = []
    m = _CMAKE_MIN.search(cmakelists or "")
    if m:
        found.append((m.group(1), "CMakeLists.txt cmake_minimum_required"))
    tool = ((pyproject_table.get("tool") or {}).get("scikit-build") or {}) if isinstance(pyproject_table, Mapping) else {}
    cmake = tool.get("cmake") if isinstance(tool, Mapping) else None
    if isinstance(cmake, Mapping):
        for part in str(cmake.get("version") or "").split(","):
            low = _LOWER.match(part)
            if low:
                found.append((low.group(1), f"pyproject.toml [tool.scikit-build] cmake.version {cmake['version']!r}"))
        old = str(cmake.get("minimum-version") or "")
        if re.fullmatch(r"[0-9]+(?:\.[0-9]+)*", old):
            found.append((old, "pyproject.toml [tool.scikit-build] cmake.minimum-version"))
    return max(found, key=lambda f: _vtuple(f[0])) if found else None


@dataclass(frozen=True)
class BuildMeta:
    """A source tree's build, as its own files declare it.

    Attributes:
        found: a ``pyproject.toml`` or ``setup.py`` was there (else nothing is known).
        where: ``"controller"`` or ``"host"``: where the files were read.
        requires: ``[build-system] requires`` (PEP 508 strings), or :data:`LEGACY_REQUIRES`.
        backend: ``build-backend`` (``"scikit_build_core.build"``), or ``None``.
        torch_extension: builds against torch (``torch.utils.cpp_extension`` in setup.py, or
            ``find_package(Torch)`` in CMakeLists.txt): torch is imported by the build.
        cmake: configured with CMake (scikit-build-core, or a top-level CMakeLists.txt).
        torch_required: torch is among ``requires`` (an isolated build installs its own torch).
        error: why ``pyproject.toml`` could not be read, if it could not.
        cmake_minimum: ``(version, where)``: the newest CMake floor the tree declares, from the
            top-level ``CMakeLists.txt``'s ``cmake_minimum_required(VERSION min[...max])``
            (cmake_minimum_required(7): an older CMake stops at configure time) and
            scikit-build-core's ``[tool.scikit-build] cmake.version`` (a specifier; its lower
            bound) or the deprecated ``cmake.minimum-version`` (scikit-build-core's configuration
            docs: a non-isolated build with an older CMake fails in "Preparing metadata");
            ``None`` when neither declares one.
    """

    found: bool = False
    where: str = ""
    requires: tuple[str, ...] = ()
    backend: str | None = None
    torch_extension: bool = False
    cmake: bool = False
    torch_required: bool = False
    error: str | None = None
    files: tuple[str, ...] = field(default=())
    cmake_minimum: tuple[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"found": self.found, "where": self.where, "requires": list(self.requires), "backend": self.backend,
                "torch_extension": self.torch_extension, "cmake": self.cmake, "torch_required": self.torch_required,
                "error": self.error, "cmake_minimum": list(self.cmake_minimum) if self.cmake_minimum else None}


def requirement_name(req: str) -> str:
    """The distribution name of a PEP 508 requirement, normalised (``"scikit-build-core>=0.10"``
    -> ``"scikit-build-core"``, ``"Torch[x]"`` -> ``"torch"``)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else req.strip().lower()


def meta_from_texts(texts: Mapping[str, str], where: str) -> BuildMeta:
    """A :class:`BuildMeta` from the files' texts (``{"pyproject.toml": "...", ...}``; absent keys:
    absent files)."""
    pyproject, setup_py, cmakelists = (texts.get(name) for name in META_FILES)
    if pyproject is None and setup_py is None:
        return BuildMeta(found=False, where=where, files=tuple(texts))
    requires: tuple[str, ...] = LEGACY_REQUIRES
    backend, error, whole = None, None, {}
    if pyproject is not None:
        try:
            whole = tomllib.loads(pyproject)
            table = whole.get("build-system") or {}
            if isinstance(table.get("requires"), list):
                requires = tuple(str(r) for r in table["requires"])
            backend = table.get("build-backend")
        except (tomllib.TOMLDecodeError, AttributeError) as exc:
            error = f"pyproject.toml: {exc}"
    torch_ext = bool(setup_py and _TORCH_EXT.search(setup_py)) or bool(cmakelists and _CMAKE_TORCH.search(cmakelists))
    cmake = (backend or "").startswith("scikit_build_core") or cmakelists is not None
    return BuildMeta(found=True, where=where, requires=requires, backend=backend, torch_extension=torch_ext,
                     cmake=cmake, torch_required=any(requirement_name(r) == "torch" for r in requires), error=error,
                     files=tuple(texts), cmake_minimum=cmake_floor(whole, cmakelists) if cmake else None)
