"""Test hosts' venvs, made the way users make them, with a torch of their own that is not the
controller's environment.

Kinds (:data:`KINDS`), each with the front end users run:

- ``venv``: ``python -m venv`` with the pip (and, on Python <= 3.11, the setuptools) that
  Python bundles (ensurepip: pip 23.2.1 on 3.11), then ``pip install --upgrade setuptools``
  as users do (from virtualenv's embedded wheels: the current setuptools, no index needed);
- ``virtualenv``: ``virtualenv`` (its own current pip and setuptools, seeded from its wheels);
- ``uv``: ``uv venv`` (no pip, no setuptools: what ``uv venv`` makes);
- ``system-site``: ``python -m venv --system-site-packages`` over the interpreter the tests run
  on (its base installation's site-packages show through, after the venv's own), then a current
  setuptools as for ``venv`` (ensurepip's setuptools 65 would need ``wheel``, which the preflight
  rightly asks for);
- ``bare``: ``python -m venv --without-pip``.

torch and the build requirements come from :func:`base_site`: a folder of links to exactly the
controller's torch, its dependencies and the build tools (scikit-build-core, nanobind, numpy,
setuptools, wheel, packaging), named by a ``.pth`` file in the venv's own site-packages (which
comes first on ``sys.path``, so a venv's own pip and setuptools win). Never pip, fleetctl or what
``fleetctl deploy --hosts local`` installed into the controller's ``.venv`` (``fp4_kernels``):
a test host sees only what a user's host would hold.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from tests.support.hermetic import SESSION_ROOT

KINDS = ("venv", "virtualenv", "uv", "system-site", "bare")
#: The distributions the base site holds, with their dependencies (those installed).
BASE_ROOTS = ("torch", "numpy", "scikit-build-core", "nanobind", "setuptools", "wheel", "packaging")
#: Never in the base site: what a test host's venv must hold by itself, or must not hold at all.
NEVER = {"pip", "fleetctl", "fp4-kernels", "uv", "virtualenv"}
PTH_NAME = "_test_host_base.pth"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def base_dists() -> list[metadata.Distribution]:
    """The controller's distributions :func:`base_site` links: :data:`BASE_ROOTS` and their
    requirements (markers evaluated for this interpreter, no extras), never :data:`NEVER`."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(BASE_ROOTS)
    while todo:
        name = _norm(todo.pop())
        if name in seen or name in NEVER:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


@functools.lru_cache(maxsize=1)
def base_site() -> Path:
    """``<session root>/host-base-site``: one link per top-level file or folder of each of
    :func:`base_dists` (from its RECORD), built once per test session."""
    folder = SESSION_ROOT / "host-base-site"
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(SESSION_ROOT, 0o711)  # test users may pass through (HOME inside stays 0700)
    for dist in base_dists():
        root = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in sorted(tops):
            if top == "__pycache__" or top.endswith(".pth") or top.startswith("__editable__"):
                continue
            link, target = folder / top, root / top
            if target.exists() and not link.exists():
                link.symlink_to(target)
    return folder


#: What of :func:`base_site` is torch's (torch's own distribution: its packages and dist-info).
TORCH_TOPS = ("torch", "functorch", "torchgen")


@functools.lru_cache(maxsize=1)
def tools_site() -> Path:
    """``<session root>/host-tools-site``: :func:`base_site` without torch (:data:`TORCH_TOPS` and
    torch's dist-info): a venv with the build requirements whose torch is missing, as a plain
    ``python3 -m venv`` plus ``pip install scikit-build-core nanobind`` leaves it."""
    base = base_site()
    folder = SESSION_ROOT / "host-tools-site"
    folder.mkdir(parents=True, exist_ok=True)
    for entry in sorted(base.iterdir()):
        if entry.name in TORCH_TOPS or entry.name.startswith("torch-") or not entry.is_symlink():
            continue  # (what is not a link is the site's own cache, e.g. __pycache__ of a top-level module)
        link = folder / entry.name
        if not link.exists():
            link.symlink_to(os.readlink(entry))
    return folder


def site_packages(venv: Path) -> Path:
    """A venv's own purelib, as its interpreter says."""
    out = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return Path(out)


def virtualenv_wheels() -> Path:
    """virtualenv's embedded wheels (current pip and setuptools), a local find-links folder."""
    import virtualenv.seed.wheels.embed as embed

    return Path(embed.__file__).parent


def uv() -> str:
    """The uv of the controller's environment (the ``uv`` test requirement)."""
    path = Path(sys.executable).parent / "uv"
    return str(path) if path.exists() else "uv"


def make_venv(path: Path, kind: str = "virtualenv", *, torch: bool = True, build_tools: bool = False) -> str:
    """A venv of ``kind`` (see the module docstring) at ``path``; with ``torch``, the
    :func:`base_site` named by a ``.pth`` in its own site-packages; without torch but with
    ``build_tools``, :func:`tools_site` (the build requirements, no torch). Returns the venv's path."""
    path = Path(path)
    python = sys.executable
    if kind in ("venv", "system-site"):
        extra = ["--system-site-packages"] if kind == "system-site" else []
        subprocess.run([python, "-m", "venv", *extra, str(path)], check=True)
        subprocess.run([str(path / "bin" / "python3"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-index", "--find-links", str(virtualenv_wheels()), "--upgrade", "setuptools"],
                       check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    elif kind == "virtualenv":
        subprocess.run([python, "-m", "virtualenv", "-q", "--no-periodic-update", str(path)], check=True)
    elif kind == "uv":
        subprocess.run([uv(), "venv", "-q", "--python", python, str(path)], check=True)
    elif kind == "bare":
        subprocess.run([python, "-m", "venv", "--without-pip", str(path)], check=True)
    else:
        raise ValueError(f"unknown venv kind {kind!r}; one of {', '.join(KINDS)}")
    if torch:
        (site_packages(path) / PTH_NAME).write_text(str(base_site()) + "\n")
    elif build_tools:
        (site_packages(path) / PTH_NAME).write_text(str(tools_site()) + "\n")
    return str(path)
