"""Whether a host's venv can take an install and run what is installed, from its facts. Pure.

Both rules read what ``playbooks/scripts/facts.py`` measured as the login user (``python``:
``site_packages_fs`` and torch's files), and each is said twice with the same words: by ``fleetctl
facts`` as a ``warning:`` note (:func:`fleetctl.facts.gather.complete_facts`), and by the planner
that would fail on it, as a preflight that stops the host while planning, before anything is
uploaded, built or installed (``pip_install``: :func:`install_problem`; ``verify``:
:func:`fleetctl.tasks.runtime_preflight.torch_runtime_problem`).

The cases, from a new operator's trial, where facts said ok and ``--plan`` said push:

- a venv another user owns (``venv: /home/tczsh/venv`` with ``ansible_user: tcbash``): pip
  failed in the middle of the install (``Could not restore ...dist-info/``, ``Permission denied:
  'RECORD'``);
- a venv on a full file system: pip failed with ENOSPC and left a partial install (a truncated
  ``.so``, no ``__init__.py``, no dist-info);
- a torch whose ``libtorch_cpu.so`` was moved aside: the version reads, the import fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Free MiB (2**20 bytes) a venv's site-packages needs for any install: under it an install is
#: refused before pip runs (pip cuts an install short on ENOSPC, leaving a partial package). A
#: wheel on the host is measured too (its unpacked size: ``pip_install``'s planner).
VENV_MIN_FREE_MIB = 16


def _fs(facts: Mapping[str, Any]) -> Mapping[str, Any] | None:
    py = facts.get("python")
    fs = py.get("site_packages_fs") if isinstance(py, Mapping) else None
    return fs if isinstance(fs, Mapping) and fs.get("path") else None


def install_problem(facts: Mapping[str, Any], need_mib: int = VENV_MIN_FREE_MIB, what: str = "an install") -> str | None:
    """The one line saying why pip cannot install into the venv, or None (also when unmeasured).

    Args:
        facts: the host's facts (``python.site_packages_fs``: ``{path, free_mib, readonly,
            writable, owner, user}``, measured as the login user).
        need_mib: the MiB the install needs in site-packages (:data:`VENV_MIN_FREE_MIB`, or a
            wheel's unpacked size).
        what: what needs them, named in the line (``"fp4_kernels-0.1.0-....whl (3 MiB unpacked)"``).

    Returns:
        ``"venv's site-packages SP is not writable by USER (owned by OWNER): ...; fix: ..."``, the
        same for a read-only file system, or ``"venv's site-packages SP has N MiB free; WHAT needs
        M MiB: ...; fix: ..."``.
    """
    fs = _fs(facts)
    if fs is None:
        return None
    where = f"venv's site-packages {fs['path']}"
    if fs.get("readonly"):
        return (f"{where} is on a read-only file system: pip cannot install there; fix: point the host var "
                "'venv' at a venv on a writable file system")
    if fs.get("writable") is False:
        user, owner = fs.get("user") or "the login user", fs.get("owner") or "another user"
        return (f"{where} is not writable by {user} (owned by {owner}): pip would fail in the middle of the "
                f"install (Permission denied); fix: deploy as {owner} (ansible_user), give {user} write access "
                f"to the venv, or point the host var 'venv' at a venv {user} owns")
    free = fs.get("free_mib")
    if isinstance(free, int) and free < need_mib:
        return (f"{where} has {free} MiB free; {what} needs {need_mib} MiB: pip would stop with ENOSPC and leave "
                "a partial install; fix: free space on that file system, or point the host var 'venv' at a venv "
                "with space")
    return None


def torch_import_warning(facts: Mapping[str, Any]) -> str | None:
    """``"warning: venv V: torch X does not import (ImportError: ...): ..."`` for a torch whose
    version reads but whose import fails (``python.torch`` and ``python.torch_error`` both set:
    a library of torch's own is missing), or None. A venv without torch is no warning: a build
    host needs none, and the plays that need one refuse it by name."""
    py = facts.get("python")
    if not isinstance(py, Mapping) or not py.get("torch") or not py.get("torch_error"):
        return None
    # no install command here: the one that works depends on the venv's installer (pip, uv, neither),
    # and the preflight that refuses the host prints it (tasks.runtime_preflight.torch_runtime_problem)
    return (f"warning: venv {py.get('venv') or py.get('prefix')}: torch {py['torch']} does not import "
            f"({py['torch_error']}): a package that needs torch at run time cannot verify; repair torch in the venv "
            f"(reinstall torch {py['torch']} from the index it came from; 'fleetctl verify' names the command for "
            f"this venv)")


def venv_warnings(facts: Mapping[str, Any]) -> list[str]:
    """The ``warning:`` notes ``fleetctl facts`` gives about the venv (see the module docstring);
    the install rule only for a host with the ``venv`` var (builds and installs need one)."""
    out = []
    py = facts.get("python")
    problem = install_problem(facts) if isinstance(py, Mapping) and py.get("venv") else None
    if problem:  # only the host var's venv: without one, facts describe the system's python
        out.append(f"warning: {problem}")
    broken = torch_import_warning(facts)
    if broken:
        out.append(broken)
    return out
