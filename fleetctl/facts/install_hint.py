"""The command an operator runs to install into a host's venv, from its facts alone: the one
every hint that tells an install prints, in a preflight's refusal (``fleetctl.tasks``) and in the
same line ``fleetctl facts`` warns with (:mod:`fleetctl.facts.venv`). Which front end works
depends on the venv (pip in it or not) and the host (uv or not): :mod:`fleetctl.tasks.pytool`
says why the venv's pip is preferred for anything read from an index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Where to get uv (Astral's install page).
UV_INSTALL = "https://docs.astral.sh/uv/getting-started/installation/"


def venv_has_pip(facts: Mapping[str, Any]) -> bool | None:
    """Whether the venv's python finds a pip distribution (``None``: facts do not say)."""
    packages = (facts.get("python") or {}).get("packages")
    if not isinstance(packages, Mapping) or "pip" not in packages:
        return None
    return packages.get("pip") is not None


def existing_venv(facts: Mapping[str, Any], venv: str | None, python: str) -> tuple[str | None, str]:
    """``(venv, python)`` an operator can install into now: the live venv a staged version is made
    from while the play runs in a stage (facts ``staged_env``, :data:`fleetctl.tasks.envs.STAGED_FACT`:
    ``{path, live}``; ``<versions>/vN`` does not exist yet while planning, and a failed run's stage is
    replaced by the next one, which copies the live venv again), else ``venv`` and ``python`` as given."""
    staged = facts.get("staged_env")
    if not isinstance(staged, Mapping) or not staged.get("live") or not staged.get("path"):
        return venv, python
    path, live = str(staged["path"]).rstrip("/"), str(staged["live"]).rstrip("/")
    if python.startswith(path + "/"):
        python = live + python[len(path):]
    return (live if venv and venv.rstrip("/") == path else venv), python


def install_command(facts: Mapping[str, Any], python: str, packages: str) -> str:
    """The command an operator runs to put ``packages`` (one shell-quoted string, pip's options
    first when any) into the venv, the one every hint that tells an install prints:

    - ``PY -m pip install ...`` when the venv has pip (or facts do not say): the rule of
      :func:`fleetctl.tasks.pytool.index_tool`, so a hint's command honours the site's pip.conf as fleetctl's does;
    - ``UV pip install --python PY ...`` when it has none (``uv venv`` made it, or ``python -m venv
      --without-pip``) and the host has uv (uv's docs, "Using Python environments");
    - ``PY -m ensurepip --upgrade && PY -m pip install ...`` when it has none and the host has no uv:
      ensurepip puts the pip bundled with that Python into the venv (the ensurepip docs), since
      ``PY -m pip`` alone fails with ``No module named pip``.

    A staged version's interpreter is named by its live venv's (:func:`existing_venv`).
    """
    _, python = existing_venv(facts, None, python)  # a stage's vN: its live venv (the one that exists)
    uv = (facts.get("uv") or {}).get("path")
    if venv_has_pip(facts) is False:
        if uv:
            return f"{uv} pip install --python {python} {packages}"
        return f"{python} -m ensurepip --upgrade && {python} -m pip install {packages}"
    return f"{python} -m pip install {packages}"


def add_pip_hint(python: str, uv: str | None) -> str:
    """How to put pip into a venv that has none: ``add pip to it (PY -m ensurepip --upgrade[, or
    UV pip install --python PY pip])`` (the ensurepip docs; uv's, "Using Python environments")."""
    return f"add pip to it ({python} -m ensurepip --upgrade" + (f", or {uv} pip install --python {python} pip)"
                                                                 if uv else ")")
