"""Which front end builds and installs into a host's venv: uv or the venv's own pip, decided
while planning from facts, so that a venv that has neither fails before anything is uploaded.

Venvs come without pip: ``uv venv`` makes none, nor ``python -m venv --without-pip``, nor a
Debian python without ``python3-venv``'s ensurepip. ``python -m pip`` then fails with ``No module
named pip``, after the sources were uploaded. uv needs no pip in the venv (``uv pip install
--python PY``, ``uv build --python PY``: uv's docs, "Using Python environments").

Facts (``python.packages.pip``: the venv's pip version, ``None`` when it has none; ``uv.path``)
decide; when facts do not list the venv's packages (an older facts script), pip is assumed.

Installing FROM AN INDEX (build requirements, a wheel's dependencies, ``torch==X`` back) is the
venv's pip whenever the venv has pip, uv only when it has none (:func:`index_tool`, and the hints
of :func:`install_command`): pip reads the site's configuration (``/etc/pip.conf``,
``~/.config/pip/pip.conf``, ``PIP_INDEX_URL``, ``PIP_CERT``: pip's docs, "Configuration") and
uv does not (it reads ``uv.toml`` and ``UV_INDEX_URL``: uv's docs, "Configuration files"), so
on a site whose mirror is set in pip.conf uv goes to pypi.org and fails (``invalid peer
certificate: UnknownIssuer``, ``client error (Connect)``). A local wheel installed with
``--no-deps`` reads no index: uv may install it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# their home is facts (``fleetctl facts`` names the same commands as the preflights)
from ..facts.install_hint import UV_INSTALL, add_pip_hint, existing_venv, install_command, venv_has_pip  # noqa: F401 - re-exported
from ..facts.refusals import no_front_end_problem


def pick_tool(requested: str, facts: Mapping[str, Any], venv: str | None, python: str) -> tuple[str, str | None, str | None]:
    """``(tool, uv path, problem)`` for a task's ``tool`` (``"auto"``, ``"uv"``, ``"pip"``).

    ``auto`` is uv when the host has it, else the venv's pip. ``problem`` (one line: the cause
    and both fixes) is set when the chosen tool is not there; the task must then fail while
    planning.
    """
    uv = (facts.get("uv") or {}).get("path")
    pip = venv_has_pip(facts)
    where = venv or python
    add_pip = add_pip_hint(python, uv)
    if requested == "uv":
        if uv:
            return "uv", uv, None
        return "uv", None, (f"tool: uv, but this host has no uv (looked on PATH, ~/.local/bin, ~/.cargo/bin): install "
                            f"uv on the host ({UV_INSTALL})" + (", or use tool: pip (the venv has pip)" if pip is not False
                                                                else f", or {add_pip} and use tool: pip"))
    if requested == "pip":
        if pip is not False:
            return "pip", uv, None
        return "pip", uv, (f"tool: pip, but the venv {where} has no pip (No module named pip): {add_pip}"
                           + (", or use tool: auto (this host has uv)" if uv else
                              f", or install uv on the host ({UV_INSTALL}) and use tool: auto"))
    if uv:
        return "uv", uv, None
    if pip is not False:
        return "pip", None, None
    return "pip", None, no_front_end_problem(facts, venv, python)


def index_tool(requested: str, tool: str, facts: Mapping[str, Any]) -> str:
    """The front end for an install that reads a package index: ``"pip"`` (the venv's own) when
    the venv has pip (or facts do not say) and the task did not ask for uv by name (``tool: uv``),
    else ``tool`` (:func:`pick_tool`'s choice). Why pip: the module docstring."""
    if requested != "uv" and venv_has_pip(facts) is not False:
        return "pip"
    return tool
