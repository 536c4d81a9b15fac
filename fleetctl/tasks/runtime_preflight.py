"""What an installed package needs in the venv at run time, checked from facts while planning.

The FP4 kernel package imports torch at run time (``kernel_src/src/fp4_kernels``) but does not
declare it (``kernel_src/pyproject.toml``: ``dependencies = []``, so that ``pip install`` never
touches the host's torch), and fleetctl never installs torch. Building it does not need torch (its
``[build-system] requires`` is scikit-build-core and nanobind; the CMakeLists has no
``find_package(Torch)``): ``build_wheel``'s preflight asks for torch only when the tree builds
against torch (:mod:`~fleetctl.tasks.build_preflight`). ``verify`` imports torch first, and a
package that needs torch at run time (``verify``'s ``needs_torch``, true unless a playbook says
otherwise for a package verified without torch) cannot pass without it, so a venv without torch
is refused by ``verify``'s planner from the facts (``python.torch``,
``python.torch_error`` of ``playbooks/scripts/facts.py``) before its first step; the refusal is a
preflight (:attr:`fleetctl.tasks.base.TaskResult.preflight`), so it stops the host while planning,
before anything is uploaded or built, in ``--plan``, ``--dry-run`` and a deploy alike.

Facts are those the play runs with: a task that switches the venv (``venv_stage``,
``venv_switch``) replaces ``python`` for the tasks after it, and a planned ``venv_upgrade`` of
torch (``playbooks/nightly.yaml``) marks it ``python.torch_pending``, which this check accepts. A playbook that installs torch itself
with a ``command`` task is not seen here; it must let verify run in a play of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..facts.refusals import missing_python_problem, silent_python_problem
from ..facts.venv import cpu_torch_problem, torch_problem


def interpreter_problem(facts: Mapping[str, Any], venv: str | None) -> str | None:
    """The one line refusing a venv whose interpreter cannot run anything, or None: not there
    (:func:`fleetctl.facts.refusals.missing_python_problem`: the venv's folder removed, or its
    base python gone) or silent at start (:func:`fleetctl.facts.refusals.silent_python_problem`),
    the words ``fleetctl facts`` and the build's preflight use. ``verify`` refuses with it while
    planning, before uploading its script (operator trial: verify of a removed venv printed the
    host's raw ``/usr/bin/env: '/home/u/venv/bin/python3': No such file or directory`` where facts
    and ``--plan`` named the cause)."""
    return missing_python_problem(facts, venv) or silent_python_problem(facts, venv)


def torch_runtime_problem(facts: Mapping[str, Any], venv: str | None, python: str, package: str) -> str | None:
    """The one line refusing a venv whose torch does not import, or None: the rule and its words
    are :func:`fleetctl.facts.venv.torch_problem`'s, which ``fleetctl facts`` warns with too."""
    return torch_problem(facts, venv, python, package)


def torch_cuda_problem(facts: Mapping[str, Any], venv: str | None, python: str, package: str,
                       device: str) -> str | None:
    """The one line refusing a CPU-only torch where ``verify`` will run on the GPU, or None: the
    rule and its words are :func:`fleetctl.facts.venv.cpu_torch_problem`'s, which ``fleetctl
    facts`` warns with too (operator trial: facts said ok where ``--plan`` refused)."""
    return cpu_torch_problem(facts, venv, python, package, device)
