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

import posixpath
from collections.abc import Mapping
from typing import Any

from .pytool import existing_venv, install_command


def torch_runtime_problem(facts: Mapping[str, Any], venv: str | None, python: str, package: str) -> str | None:
    """The one line refusing a venv whose torch does not import, or None.

    Args:
        facts: the host's facts (``python``: the venv interpreter's facts).
        venv: the host's venv (its ``venv`` var), or None.
        python: the interpreter the package runs with (``<venv>/bin/python3``).
        package: the import name checked (``fp4_kernels``), named in the line.

    Returns:
        None when torch imports (its version read and no ``torch_error``: a torch whose own
        libraries are missing has both: ``fleetctl facts`` warns,
        :func:`fleetctl.facts.venv.torch_import_warning`), when an earlier task would install it
        (``torch_pending``), when
        the venv's interpreter is missing (``build_wheel``'s
        preflight names that) or when fleetctl's own torch reader failed (``torch_probe_error``:
        it says nothing about the host's torch; ``verify`` then tells). Else
        ``"torch does not import in VENV (ModuleNotFoundError: ...): PACKAGE needs torch at run
        time and fleetctl never installs it; install ... into the venv ..., or point the host var
        'venv' at the venv that has it"``; for a torch that is there but does not import,
        ``"torch 2.13.0 in VENV does not import (ImportError: libtorch_cpu.so: ...): ..."``.
    """
    py = facts.get("python")
    if (not isinstance(py, Mapping) or (py.get("torch") and not py.get("torch_error")) or py.get("torch_probe_error")
            or py.get("torch_pending") or not py.get("exists", True)):
        return None
    venv, _ = existing_venv(facts, venv, python)  # in a stage not made yet: the live venv it copies
    where = venv or posixpath.dirname(posixpath.dirname(python)) or python
    why = py.get("torch_error") or "not installed"
    if py.get("torch"):  # there, but broken: what the import says (facts read it from torch's files)
        return (f"torch {py['torch']} in {where} does not import ({why}): {package} needs torch at run time, so it "
                f"could be built and installed but never verified; repair torch in the venv "
                f"({install_command(facts, python, '--force-reinstall torch==' + str(py['torch']))}, from the index "
                f"it came from), or point the host var 'venv' at a venv whose torch imports")
    return (f"torch does not import in {where} ({why}): {package} needs torch at run time and fleetctl never "
            f"installs it; install the torch build for this host's CUDA into the venv "
            f"({install_command(facts, python, 'torch')}), or point the host var 'venv' at the venv that has it")


def torch_cuda_problem(facts: Mapping[str, Any], venv: str | None, python: str, package: str,
                       device: str) -> str | None:
    """The one line refusing a CPU-only torch where ``verify`` will run on the GPU, or None.

    ``verify`` runs on the GPU (``device == "cuda"``: the host's facts list GPUs, or the host var
    ``verify_device`` says so) and its ``cuda`` check needs torch to see them; a torch without CUDA
    (``python.torch_cuda`` of the facts is None: its ``version.py`` says ``cuda = None``, PyTorch's
    CPU wheels) never can, so the host would build, install and then fail verify. Refused while
    planning instead, as :func:`torch_runtime_problem` refuses a missing torch. None when torch is
    unknown or missing (that line is :func:`torch_runtime_problem`'s), pending (an earlier task
    upgrades it), or has CUDA.
    """
    py = facts.get("python")
    if device != "cuda" or not isinstance(py, Mapping) or not py.get("torch") or py.get("torch_pending"):
        return None
    if py.get("torch_cuda") or "torch_cuda" not in py or py.get("torch_probe_error"):
        return None
    gpus = [g for g in facts.get("gpus") or [] if isinstance(g, Mapping)]
    where = venv or posixpath.dirname(posixpath.dirname(python)) or python
    have = f"{len(gpus)} GPU(s) nvidia-smi lists" if gpus else "GPUs (host var verify_device: cuda)"
    return (f"torch {py.get('torch')} in {where} is a CPU-only build (its version.py says cuda = None) and the "
            f"host has {have}: {package} would build and install, but verify on the GPU cannot pass; install "
            f"the CUDA build of torch for this host's driver into the venv, or set the host var verify_device: "
            f"cpu to verify on the CPU")
