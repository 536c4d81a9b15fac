"""Whether a host's venv can take an install and run what is installed, from its facts. Pure.

Both rules read what ``playbooks/scripts/facts.py`` measured as the login user (``python``:
``site_packages_fs`` and torch's files), and each is said twice with the same words: by the
planner that would fail on it, as a preflight that stops the host while planning, before anything
is uploaded, built or installed (``pip_install``: :func:`install_problem`; ``verify``:
:func:`torch_problem`), and by ``fleetctl facts`` as that line in the one form every problem a
deploy refuses takes there (:func:`fleetctl.facts.refusals.warning`: ``warning: LINE; a deploy
refuses this host until it is fixed``), so the host's facts read ``failed``, never ``ok``
(:func:`fleetctl.facts.refusals.refused_by_deploy`).

The cases, from a new operator's trial, where facts said ok and ``--plan`` said push:

- a venv another user owns (``venv: /home/tczsh/venv`` with ``ansible_user: tcbash``): pip
  failed in the middle of the install (``Could not restore ...dist-info/``, ``Permission denied:
  'RECORD'``);
- a venv on a full file system: pip failed with ENOSPC and left a partial install (a truncated
  ``.so``, no ``__init__.py``, no dist-info);
- a torch whose ``libtorch_cpu.so`` was moved aside: the version reads, the import fails;
- a venv without torch: the kernels build without it (no torch in their ``[build-system]
  requires``) but import it at run time, so the deploy's verify refuses the host while planning;
  facts said ``ok`` and nothing of torch;
- a venv without scikit-build-core and nanobind (kernel_src's ``[build-system] requires``, which
  the README lists as what facts check): the build's preflight refuses it
  (:func:`fleetctl.facts.refusals.build_requirements_problem`), unless the host's
  ``install_build_requirements`` var (or ``-e``) has the build install them
  (:func:`installs_build_requirements`): then a note says so, not a warning;
- a ``uv venv`` (no pip) on a host without uv: nothing can build or install into it
  (:func:`fleetctl.facts.refusals.no_front_end_problem`);
- a venv whose pip is older than the build's ``pip wheel --config-settings`` needs (pip 20.3.4),
  on a host without uv (:func:`fleetctl.facts.refusals.old_pip_problem`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from .venv_locks import unwritable_line

from .install_hint import existing_venv, install_command
from .refusals import build_requirements_problem, no_front_end_problem, old_pip_problem
from .refusals import builder_warning, warning as refusal_warning
from .venv_locks import REINSTALL_FIX, locked_line, unreadable_line

#: Free MiB (2**20 bytes) a venv's site-packages needs for any install: under it an install is
#: refused before pip runs (pip cuts an install short on ENOSPC, leaving a partial package). A
#: wheel needs its unpacked size on top (:func:`install_need_mib`).
VENV_MIN_FREE_MIB = 16
#: Free MiB in the venv's site-packages at and above which no install's room is checked (no wheel
#: fleetctl builds unpacks to 4 GiB): a healthy host pays no extra interpreter start, and facts
#: look no wheel up.
SIZE_ASKED_BELOW_MIB = 4096
#: MiB a wheel not built yet is taken to unpack to (``--plan``, and a deploy's planning pass, before
#: the build): fp4_kernels' wheel unpacks to about 10 MiB for one SM, about 20 for two.
UNBUILT_WHEEL_MIB = 32


def install_need_mib(unpacked_bytes: int | None) -> int:
    """The free MiB an install of a wheel needs in the venv's site-packages: the one estimate
    ``--plan``, ``--dry-run`` and the deploy use (``pip_install``'s planner), so that they agree.

    Args:
        unpacked_bytes: the wheel's unpacked size in bytes (the sum of its zip members' sizes),
            or None for a wheel not built yet (:data:`UNBUILT_WHEEL_MIB` stands in).

    Returns:
        that size in MiB, rounded up, plus :data:`VENV_MIN_FREE_MIB` (the margin).
    """
    wheel = UNBUILT_WHEEL_MIB if unpacked_bytes is None else -(-int(unpacked_bytes) // 1048576)
    return wheel + VENV_MIN_FREE_MIB


def install_need(name: str, unpacked_bytes: int | None = None, cached_bytes: int | None = None) -> tuple[int, str]:
    """``(MiB, what)``: the room an install of the wheel ``name`` needs in site-packages
    (:func:`install_need_mib`) and how it was counted, worded for :func:`install_problem`. The one
    rule ``pip_install``'s planner (``--plan``, ``--dry-run``, the deploy) and ``fleetctl facts``
    count with, so they give the same number.

    Args:
        name: the wheel's file name (facts, which know no playbook: ``the fp4_kernels wheel``).
        unpacked_bytes: the wheel's own unpacked size (it is on the host), or None.
        cached_bytes: else the unpacked size of its arch class's wheel in the controller's cache,
            or None: then it counts as not built yet (:data:`UNBUILT_WHEEL_MIB`).
    """
    if unpacked_bytes is not None:
        return install_need_mib(unpacked_bytes), f"{name} (unpacked, with a margin)"
    if cached_bytes is not None:
        return install_need_mib(cached_bytes), (f"{name} (the arch class's wheel in the controller's cache: "
                                                f"{-(-int(cached_bytes) // 1048576)} MiB unpacked, with a margin)")
    return install_need_mib(None), f"{name} (not built yet: taken as {UNBUILT_WHEEL_MIB} MiB unpacked, with a margin)"


def venv_free_mib(facts: Mapping[str, Any]) -> int | None:
    """Free MiB (for the login user) on the file system of the venv's site-packages, or None."""
    fs = _fs(facts)
    free = fs.get("free_mib") if fs else None
    return free if isinstance(free, int) and not isinstance(free, bool) else None


def _fs(facts: Mapping[str, Any]) -> Mapping[str, Any] | None:
    py = facts.get("python")
    fs = py.get("site_packages_fs") if isinstance(py, Mapping) else None
    return fs if isinstance(fs, Mapping) and fs.get("path") else None


def install_problem(facts: Mapping[str, Any], need_mib: int = VENV_MIN_FREE_MIB, what: str = "an install") -> str | None:
    """The one line saying why pip cannot install into the venv, or None (also when unmeasured).

    Args:
        facts: the host's facts (``python.site_packages_fs``: ``{path, free_mib, readonly,
            writable, owner, user, owned, mode}``, measured as the login user).
        need_mib: the MiB the install needs in site-packages (:data:`VENV_MIN_FREE_MIB`, or a
            wheel's unpacked size).
        what: what needs them, named in the line (``"fp4_kernels-0.1.0-....whl (3 MiB unpacked)"``).

    Returns:
        ``"venv's site-packages SP is not writable by USER (owned by OWNER): ...; fix: ..."`` (``fix:
        chmod u+w SP`` where USER owns it: :func:`~fleetctl.facts.venv_locks.unwritable_line`), the
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
        return unwritable_line(where, fs)
    free = fs.get("free_mib")
    if isinstance(free, int) and free < need_mib:
        return (f"{where} has {free} MiB free; {what} needs {need_mib} MiB: pip would stop with ENOSPC and leave "
                "a partial install; fix: free space on that file system, or point the host var 'venv' at a venv "
                "with space")
    return None


#: A failed mapping or allocation (ENOMEM) as glibc's loader, strerror(3), Python, C++, torch's CPU
#: allocator, OpenBLAS (a thread's stack is an mmap too) and CUDA word it.
_MEMORY_FAILURE = re.compile(r"failed to map segment|allocate memory|MemoryError|bad_alloc|out of memory|"
                             r"memory allocation|pthread_create failed|ENOMEM|errno 12\b|error code 12\b", re.I)


def address_space_cause(facts: Mapping[str, Any], failure: str | None = None) -> str | None:
    """The words naming this login's address-space limit as the cause of a failure, or None: the
    one wording ``fleetctl facts``, ``--plan`` (:func:`torch_problem`) and ``verify``
    (:func:`fleetctl.tasks.verify.failure_line`) give it.

    The rule: getrlimit(2): past ``RLIMIT_AS`` (bytes) mmap(2), mremap and brk fail with ENOMEM, so
    the dynamic loader cannot map a shared object's segments (glibc: ``failed to map segment from
    shared object``; torch's ``libtorch_cpu.so`` alone spans over 300 MiB) and allocators fail
    (``MemoryError``, ``std::bad_alloc``, an abort); bash's ``ulimit -v`` sets it in KiB, pam_limits
    from limits.conf(5)'s ``as`` item (KiB). The facts script reports the soft limit the login's
    commands run under as ``rlimit_as_mib`` (MiB, floor; null: unlimited), so ``ulimit -v 400000``
    in ``~/.bashrc`` reads 390 (operator trial: facts advised a reinstall of a torch that was fine).

    Args:
        facts: the host's facts (``rlimit_as_mib``).
        failure: what the failure said; the limit is named only when it reads as a failed mapping
            or allocation (:data:`_MEMORY_FAILURE`). None: the caller knows the failure is one the
            limit causes (an ``import torch`` whose files are complete failed under it; an
            interpreter that died of SIGABRT or SIGSEGV).

    Returns:
        ``"this login's address-space limit (ulimit -v, RLIMIT_AS) is N MiB: ...; it is usually set
        in the login's rc files (...) or in /etc/security/limits.conf (...); fix: raise or remove it
        for this login"``, or None (no limit in the facts, or a failure that is not one of memory).
    """
    mib = facts.get("rlimit_as_mib")
    if not isinstance(mib, int) or isinstance(mib, bool) or mib < 0:
        return None
    if failure is not None and not _MEMORY_FAILURE.search(failure):
        return None
    return (f"this login's address-space limit (ulimit -v, RLIMIT_AS) is {mib} MiB, and under it the dynamic "
            "loader's mmap of torch's libraries and the allocations of its runtime fail (ENOMEM): torch itself may "
            "be fine; it is usually set in the login's rc files (e.g. ~/.bashrc or ~/.profile: ulimit -v, in KiB) "
            "or in /etc/security/limits.conf (an 'as' line, pam_limits); fix: raise or remove it for this login")


def torch_problem(facts: Mapping[str, Any], venv: str | None, python: str, package: str) -> str | None:
    """The one line refusing a venv whose torch does not import, or None: ``verify``'s preflight
    refuses the host with it (:func:`fleetctl.tasks.runtime_preflight.torch_runtime_problem`) and
    ``fleetctl facts`` warns with it (:func:`venv_warnings`), the same words.

    Args:
        facts: the host's facts (``python``: the venv interpreter's facts).
        venv: the host's venv (its ``venv`` var), or None.
        python: the interpreter the package runs with (``<venv>/bin/python3``).
        package: the import name checked (``fp4_kernels``), named in the line.

    Returns:
        None when torch imports (its version read and no ``torch_error``), when an earlier task
        would install it (``torch_pending``), when the venv's interpreter is missing or gave no
        answer (the build's preflight names that: :mod:`fleetctl.facts.refusals`) or when fleetctl's own torch reader failed (``torch_probe_error``:
        it says nothing about the host's torch; ``verify`` then tells). Else ``"torch does not
        import in VENV (ModuleNotFoundError: ...): PACKAGE needs torch at run time and fleetctl
        never installs it; install ... into the venv (CMD), or point the host var 'venv' at the venv
        that has it"``; for a torch that is there but does not import (a library of torch's own
        missing), ``"torch 2.13.0 in VENV does not import (ImportError: libtorch_cpu.so: ...): ..."``.
        ``CMD`` is :func:`fleetctl.facts.install_hint.install_command`'s for this venv. When the
        facts carry an address-space limit and the import said a mapping or an allocation failed
        (an undefined symbol under a limit keeps the reinstall advice), the limit is the cause and the fix (:func:`address_space_cause`), never a reinstall of torch:
        ``"torch 2.13.0 in VENV does not import (...): PACKAGE needs torch at run time, so it
        could be built and installed but never verified; this login's address-space limit ..."``.
    """
    py = facts.get("python")
    if (not isinstance(py, Mapping) or (py.get("torch") and not py.get("torch_error")) or py.get("torch_probe_error")
            or py.get("torch_pending") or not py.get("exists", True)
            or (py.get("error") and not py.get("version"))):  # the interpreter gave no answer: not torch's fault
        return None
    venv, _ = existing_venv(facts, venv, python)  # in a stage not made yet: the live venv it copies
    where = venv or posixpath.dirname(posixpath.dirname(python)) or python
    why = py.get("torch_error") or "not installed"
    if py.get("torch"):  # there, but broken: what the import says (facts read it from torch's files)
        limit = address_space_cause(facts, str(why))  # only a failure that reads as one of memory
        if limit:  # torch's files are there; this login's limit stops the loader (operator trial)
            return (f"torch {py['torch']} in {where} does not import ({why}): {package} needs torch at run time, so "
                    f"it could be built and installed but never verified; {limit}")
        return (f"torch {py['torch']} in {where} does not import ({why}): {package} needs torch at run time, so it "
                f"could be built and installed but never verified; repair torch in the venv "
                f"({install_command(facts, python, '--force-reinstall torch==' + str(py['torch']))}, from the index "
                f"it came from), or point the host var 'venv' at a venv whose torch imports")
    return (f"torch does not import in {where} ({why}): {package} needs torch at run time and fleetctl never "
            f"installs it; install the torch build for this host's CUDA into the venv "
            f"({install_command(facts, python, 'torch')}), or point the host var 'venv' at the venv that has it")


def cpu_torch_problem(facts: Mapping[str, Any], venv: str | None, python: str, package: str,
                      device: str) -> str | None:
    """The one line refusing a CPU-only torch where ``verify`` will run on the GPU, or None:
    ``verify``'s preflight refuses the host with it
    (:func:`fleetctl.tasks.runtime_preflight.torch_cuda_problem`) and ``fleetctl facts`` warns
    with it (:func:`venv_warnings`), the same words.

    ``verify`` runs on the GPU (``device == "cuda"``: the host's facts list GPUs, or the host var
    ``verify_device`` says so) and its ``cuda`` check needs torch to see them; a torch without CUDA
    (``python.torch_cuda`` of the facts is None: its ``version.py`` says ``cuda = None``, PyTorch's
    CPU wheels) never can, so the host would build, install and then fail verify. None when torch
    is unknown or missing (that line is :func:`torch_problem`'s), pending (an earlier task
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


def deployed_verify_device(facts: Mapping[str, Any], host_device: str = "auto") -> str:
    """Where the shipped deploy's ``verify`` runs (its ``device: "{{ verify_device | default('auto')
    }}"``, resolved as :func:`fleetctl.tasks.verify.verify_device` does): the host var
    ``verify_device`` when not ``auto``, else ``cuda`` when the facts list a GPU with a compute
    capability, else ``cpu``."""
    if host_device != "auto":
        return host_device
    gpus = [g for g in facts.get("gpus") or [] if isinstance(g, Mapping) and g.get("compute_cap")]
    return "cuda" if gpus else "cpu"


#: The package the shipped deploy verifies (``playbooks/fp4-kernels.yaml``'s ``verify``), which
#: ``fleetctl facts`` names in its torch warning: facts do not know the playbook a deploy will run.
DEPLOYED_PACKAGE = "fp4_kernels"


#: kernel_src's ``[build-system] requires`` (``kernel_src/pyproject.toml``), which the shipped
#: deploy's build needs in the venv (it builds without isolation): ``fleetctl facts`` checks them
#: against the venv's ``python.packages`` (tests/test_venv_facts_e2e.py keeps them equal).
DEPLOYED_BUILD_REQUIRES = ("scikit-build-core>=0.10", "nanobind>=2.0")


def _numbers(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def missing_build_requirements(facts: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``(requirement, installed version or None)`` for each of :data:`DEPLOYED_BUILD_REQUIRES` the
    venv's packages (facts ``python.packages``: ``{dist: version | None}``) do not satisfy (not
    installed, or older than its ``>=`` floor); empty when facts do not list them."""
    py = facts.get("python") or {}
    packages = py.get("packages") if isinstance(py, Mapping) else None
    if not isinstance(packages, Mapping) or py.get("packages_error"):
        return []
    out = []
    for req in DEPLOYED_BUILD_REQUIRES:
        name, _, floor = req.partition(">=")
        if name not in packages:
            continue
        have = packages[name]
        if have is None or _numbers(str(have)) < _numbers(floor):
            out.append((req, have))
    return out


#: The var the shipped fp4-kernels playbook reads for build_wheel's ``install_build_requirements``.
INSTALL_BUILD_REQUIREMENTS_VAR = "install_build_requirements"


def installs_build_requirements(host_vars: Mapping[str, Any]) -> bool:
    """Whether a deploy of the shipped playbook installs missing build requirements on this host:
    its ``install_build_requirements`` var (host var, or ``-e``, merged in), read as the deploy
    reads it (``{{ install_build_requirements | default(false) }}`` into build_wheel's boolean
    argument: pydantic's bool, so ``true``, ``yes``, ``on``, ``1``... count; a value pydantic
    refuses, or a template, counts as not set)."""
    from pydantic import TypeAdapter, ValidationError

    value = host_vars.get(INSTALL_BUILD_REQUIREMENTS_VAR, False)
    try:
        return TypeAdapter(bool).validate_python(str(value) if not isinstance(value, (bool, int)) else value)
    except ValidationError:
        return False


class PhaseNote(NamedTuple):
    """A note about the venv and the phase of the shipped deploy that refuses for it: ``build``,
    ``install`` or ``verify`` (:attr:`fleetctl.tasks.base.Action.phase`'s names). A play without a
    task of that phase is not told it (:func:`fleetctl.build.arch_notes.told_notes`): a custom
    playbook with no verify is never warned that verify would refuse its host."""

    phase: str
    text: str


def venv_warnings(facts: Mapping[str, Any], install_requirements: bool = False,
                  class_wheel: tuple[str, int] | None = None, verify_device: str = "auto") -> list[PhaseNote]:
    """The ``warning:`` notes ``fleetctl facts`` gives about the venv (see the module docstring),
    each a problem a deploy refuses, worded by :func:`fleetctl.facts.refusals.warning`: the install
    rule only for a host with the ``venv`` var (builds and installs need one), torch's for a torch
    that does not import, and, for a host with the ``venv`` var, for a venv without torch (the
    shipped deploy's verify refuses it: :data:`DEPLOYED_PACKAGE` imports torch at run time),
    without pip on a host without uv, and without :data:`DEPLOYED_BUILD_REQUIRES` (the shipped
    deploy's build refuses it), unless ``install_requirements`` (:func:`installs_build_requirements`):
    the build installs them first, which a plain note says.

    The install rule counts the shipped deploy's wheel as ``--plan`` does (:func:`install_need`):
    ``class_wheel`` (``(name, unpacked bytes)``: the host's arch class's wheel in the controller's
    cache, when there is one) or one not built yet; so facts warn with --plan's number (operator
    trial: facts said ok at 25 MiB free, --plan refused: ``needs 36 MiB``). A CPU-only torch
    where the shipped deploy verifies on the GPU (``verify_device``: the host var, resolved by
    :func:`deployed_verify_device`) is :func:`cpu_torch_problem`'s warning. An installed
    :data:`DEPLOYED_PACKAGE` whose folders the login cannot replace (the facts script's
    ``python.installed_locks``) is warned with ``pip_install``'s preflight line
    (:func:`fleetctl.facts.venv_locks.locked_line`); one others cannot read with its ``unreadable_line``."""
    out = []
    py = facts.get("python")
    if not isinstance(py, Mapping):
        return out
    venv = py.get("venv")
    name, cached = class_wheel or (f"the {DEPLOYED_PACKAGE} wheel", None)
    problem = install_problem(facts, *install_need(name, cached_bytes=cached)) if venv else None
    if problem:  # only the host var's venv: without one, facts describe the system's python
        out.append(PhaseNote("install", refusal_warning(problem)))
    locked = locked_line(py.get("installed_locks") or {}, DEPLOYED_PACKAGE) if venv and not problem else None
    if locked:  # pip_install's preflight line (operator trial: facts said ok, --plan refused the host)
        out.append(PhaseNote("install", refusal_warning(locked)))
    unreadable = unreadable_line(DEPLOYED_PACKAGE, py.get("installed_locks") or {}) if venv else None
    if unreadable:  # an install under a login's umask 077: not a refusal, the next deploy installs it again
        out.append(PhaseNote("install", f"warning: {unreadable}; {REINSTALL_FIX}"))
    python = py.get("executable") or (posixpath.join(venv, "bin", "python3") if venv else "python3")
    torch = torch_problem(facts, venv, python, DEPLOYED_PACKAGE) if venv or py.get("torch") else None
    if torch:  # a missing torch only in the host var's venv: a build host's system python needs none
        out.append(PhaseNote("verify", refusal_warning(torch)))
    cpu_only = cpu_torch_problem(facts, venv, python, DEPLOYED_PACKAGE,
                                 deployed_verify_device(facts, verify_device)) if venv else None
    if cpu_only:  # operator trial: facts said ok for a +cpu torch on an H100 that --plan refused
        out.append(PhaseNote("verify", refusal_warning(cpu_only)))
    if not venv or not py.get("exists", True):
        return out
    no_tool = no_front_end_problem(facts, venv, python)
    if no_tool:
        out.append(PhaseNote("build", refusal_warning(no_tool)))
    old_pip = old_pip_problem(facts, venv, python)  # the build's pip wheel --config-settings: pip >= 22.1
    if old_pip:
        out.append(PhaseNote("build", builder_warning(old_pip)))
    missing = missing_build_requirements(facts)
    if missing and install_requirements:
        what = ", ".join(f"{req} (have {have})" if have else req for req, have in missing)
        out.append(PhaseNote("build", f"build requirements missing in {venv}: {what}; the deploy's build installs "
                                      f"them first ({INSTALL_BUILD_REQUIREMENTS_VAR}=true)"))
    elif missing:
        where, run_with = existing_venv(facts, venv, python)
        out.append(PhaseNote("build", builder_warning(build_requirements_problem(facts, where, run_with, missing))))
    return out
