"""Whether a host's venv can run what is installed, from its facts. Pure.

The rule reads what ``playbooks/scripts/facts.py`` measured as the login user (``python``:
torch's files), and is said twice: by ``fleetctl facts`` as a ``warning:`` note
(:func:`fleetctl.facts.gather.complete_facts`), and by the planner that would fail on it, as a
preflight that stops the host while planning, before anything is uploaded, built or installed
(``verify``: :func:`fleetctl.tasks.runtime_preflight.torch_runtime_problem`).

The case, from a new operator's trial, where facts said ok and ``--plan`` said push: a torch
whose ``libtorch_cpu.so`` was moved aside: the version reads, the import fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

def torch_import_warning(facts: Mapping[str, Any]) -> str | None:
    """``"warning: venv V: torch X does not import (ImportError: ...): ..."`` for a torch whose
    version reads but whose import fails (``python.torch`` and ``python.torch_error`` both set:
    a library of torch's own is missing), or None. A venv without torch is no warning: a build
    host needs none, and the plays that need one refuse it by name."""
    py = facts.get("python")
    if not isinstance(py, Mapping) or not py.get("torch") or not py.get("torch_error"):
        return None
    return (f"warning: venv {py.get('venv') or py.get('prefix')}: torch {py['torch']} does not import "
            f"({py['torch_error']}): a package that needs torch at run time cannot verify; repair torch in the venv "
            f"(pip install --force-reinstall torch=={py['torch']})")


def venv_warnings(facts: Mapping[str, Any]) -> list[str]:
    """The ``warning:`` notes ``fleetctl facts`` gives about the venv (see the module docstring)."""
    out = []
    broken = torch_import_warning(facts)
    if broken:
        out.append(broken)
    return out
