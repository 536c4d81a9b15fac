"""Problems in a host's facts that a deploy refuses, worded once: the preflight refuses the host
with the line (:func:`fleetctl.tasks.build_preflight.facts_problems`, and the venv's:
:mod:`fleetctl.facts.venv`), and ``fleetctl facts`` shows the same line in one form, whichever
rule found it (:func:`warning`: ``warning: LINE; a deploy refuses this host until it is fixed``),
and is in ``--json``'s ``warnings`` (docs/contracts.md: one rule for both).

A host with such a line is never ``ok`` (:func:`refused_by_deploy` tells those lines from benign
ones): its facts run status is ``failed`` with ``error`` naming the first cause
(:func:`refusal_error`), ``fleetctl facts`` exits 1 and the API's ``HostFacts.status`` reads
``failed`` (fresh operator trial: ``Fleet.select(h).facts()`` gave ``ok`` for a host whose venv
was gone, so a script checking ``r.ok`` went on to a deploy that refused it). Why failed and not
a status of its own: the facts were gathered, but the question a facts run answers for a script
is "can this host be deployed to", and docs/contracts.md's status words already have the one
answer (``failed``: a reached host that is refused after gathering, as a broken GPU stack is);
the facts stay beside the error. A line the deploy does not refuse the host for (a builder-only
problem, :func:`builder_warning`: the host may still receive its class's wheel; a Slurm label
that fits no GPU) leaves the host ``ok``, listed in ``warnings`` all the same.

Each function takes facts (``python``: the venv interpreter's, ``playbooks/scripts/facts.py``) and
returns one line (the cause and the fix) or None.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..build.cudacompat import ArchToken, driver_problem, predicted_binaries, uncovered_gpus
from .install_hint import UV_INSTALL, add_pip_hint, install_command, venv_has_pip


#: What :func:`warning` ends with: the words that mark a line a deploy refuses the host for.
REFUSAL_TAIL = "; a deploy refuses this host until it is fixed"


def warning(problem: str) -> str:
    """The ``fleetctl facts`` note of a problem a deploy refuses: ``warning: PROBLEM; a deploy
    refuses this host until it is fixed``."""
    return f"warning: {problem}{REFUSAL_TAIL}"


def refused_by_deploy(note: str) -> bool:
    """Whether a facts note (``build.notes``) is one a deploy refuses the host for, whatever its
    role: a :func:`warning` (every rule of :func:`host_refusals`, the venv's install and verify
    preflights: :func:`fleetctl.facts.venv.venv_warnings`, the workdir's room below a receiver's
    floor), or a workdir the deploy cannot write (:func:`fleetctl.facts.workdir.workdir_warning`:
    it fails making its run folder there). A :func:`builder_warning` is not one (the host may
    receive its class's wheel), nor are the other ``warning:`` notes (a GPU stack's or a Slurm
    label's remarks). The one rule that makes such a host's facts ``failed`` (the module docstring)."""
    from .workdir import WORKDIR_WARNING_LEAD

    return note.startswith("warning: ") and (note.endswith(REFUSAL_TAIL) or note.startswith(WORKDIR_WARNING_LEAD))


def refusal_error(notes: Sequence[str]) -> str | None:
    """The ``error`` of a host whose facts show problems a deploy refuses it for: the first such
    note without its ``warning:`` lead (``venv /x: ...; a deploy refuses this host until it is
    fixed``), and how many more there are (``(and 2 more: see warnings)``); None when no note
    is one (:func:`refused_by_deploy`)."""
    refused = [n for n in notes if refused_by_deploy(n)]
    if not refused:
        return None
    more = f" (and {len(refused) - 1} more: see warnings)" if len(refused) > 1 else ""
    return refused[0][len("warning: "):] + more


#: What :func:`builder_warning` ends with: the deploy's arch-class roles
#: (:mod:`fleetctl.engine.classes`) make a member that passed the build preflight the builder, and a
#: member that did not receives the wheel; only a class with no able member refuses its hosts.
BUILDER_TAIL = ("; a deploy refuses this host as its arch class's builder until it is fixed "
                "(it still receives the class's wheel when another host of its class can build it)")


def builder_warning(problem: str) -> str:
    """The ``fleetctl facts`` note of a problem only a host that compiles has (an old pip, missing
    build requirements, a host compiler or toolkit the build refuses, too little room to build):
    ``warning: PROBLEM`` + :data:`BUILDER_TAIL`. A host that receives its arch class's wheel is
    not refused for it (``fleetctl/tasks/build_wheel.py``: ``cannot_build``), so facts of one host,
    which cannot know its class's other members, say both (operator trial 10: "a deploy refuses
    this host" for a host the deploy then made a receiver)."""
    return f"warning: {problem}{BUILDER_TAIL}"


def _major(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:1])


def host_refusals(facts: Mapping[str, Any], tokens: Sequence[ArchToken], venv: str | None,
                  cuda_home: str | None = None, cuda_home_origin: str | None = None, *,
                  need_venv: bool = True) -> list[str]:
    """The problems a deploy's build refuses a host for whatever its role (build, receive or reuse
    the class's wheel), from facts alone: ``build_wheel``'s preflight
    (:func:`fleetctl.tasks.build_preflight.facts_problems`) refuses with them and ``fleetctl facts``
    warns with each (:func:`warning`), so the two cannot disagree (operator trial: facts said ok
    where ``--plan`` refused). In order: the ``cuda_home`` var without ``bin/nvcc``
    (:func:`cuda_home_problem`), no ``venv`` var (only with ``need_venv``: facts of a host without
    one describe its system Python), a venv interpreter that is not there
    (:func:`missing_python_problem`), a venv that is no virtual environment
    (:func:`not_a_venv_problem`), a driver older than nvcc's CUDA or than the venv's torch's
    (when their majors differ) needs, on a host with GPUs
    (:func:`fleetctl.build.cudacompat.driver_problem`: NVIDIA's minimum driver per CUDA major), and
    an arch list ``tokens`` that runs on none of a GPU (:func:`fleetctl.build.cudacompat.uncovered_gpus`).

    ``cuda_home`` is the host var: when set, the toolkit found must be that one (a silent fallback
    to another toolkit is how builds end up with the wrong nvcc); ``cuda_home_origin`` names where
    it was set (``-e cuda_home``, or the inventory file) in the fix.
    """
    problems = []
    cuda = facts.get("cuda") or {}
    wrong_home = cuda_home_problem(facts, cuda_home, cuda_home_origin)
    problems += [wrong_home] if wrong_home else []
    if not venv and need_venv:
        problems.append("no venv for this host: set the host var 'venv' (the build must not pick the system Python)")
    py = facts.get("python") or {}
    for problem in (missing_python_problem(facts, venv), silent_python_problem(facts, venv),
                    not_a_venv_problem(facts, venv)):
        problems += [problem] if problem else []
    if cuda.get("nvcc"):
        drv = driver_problem(facts.get("driver_version"), cuda.get("version"), f"nvcc {cuda.get('version')} at {cuda['nvcc']}")
        if drv and facts.get("gpus"):
            problems.append(drv)
    drv = driver_problem(facts.get("driver_version"), py.get("torch_cuda"),
                         f"the venv's torch {py.get('torch')} (built for CUDA {py.get('torch_cuda')})")
    if drv and facts.get("gpus") and (not cuda.get("version") or _major(py.get("torch_cuda")) != _major(cuda.get("version"))):
        problems.append(drv)
    sass, ptx = predicted_binaries(tokens)
    uncovered = uncovered_gpus(facts.get("gpus") or [], sass, ptx)
    if uncovered:
        arch_list = ";".join(t.text for t in tokens)
        problems.append(f"arch list {arch_list} runs on none of {', '.join(uncovered)} (SASS runs only on its own "
                        "major version, arch-specific 'a' SASS only on exactly its GPU): add the GPU's own arch, "
                        "or an older arch with +PTX")
    return problems


def cuda_home_problem(facts: Mapping[str, Any], cuda_home: str | None, origin: str | None = None) -> str | None:
    """The ``cuda_home`` var names a folder without ``bin/nvcc`` (facts then found another
    toolkit, or none: a silent fallback is how builds end up with the wrong nvcc). ``fleetctl facts``
    adds which toolkit it found instead. ``origin``: where the value was set, named in the fix
    (:meth:`fleetctl.inventory.vars.VarSource.origin`: ``-e cuda_home``, or the inventory var with
    its file and line; fresh operator's trial: ``-e cuda_home=/opt/notcuda`` said "fix the host
    var"); not known: the host var."""
    cuda = facts.get("cuda") or {}
    if not cuda_home or cuda.get("source") == "cuda_home var":
        return None
    return f"cuda_home {cuda_home} has no bin/nvcc (fix {origin or 'the host var ' + repr('cuda_home')})"


def missing_python_problem(facts: Mapping[str, Any], venv: str | None) -> str | None:
    """The host var ``venv`` names an environment whose interpreter is not there (facts
    ``python.exists`` false), or None. A venv's ``bin/python3`` is a symlink to the interpreter it
    was made from (the venv module's docs, "How venvs work"): when that one is gone (Python
    upgraded or removed, facts ``python.dangling``: the missing path the link resolves to), the
    line names the link and its target, and says to make the venv again, not that it is missing;
    one the login user may not run (facts ``python.denied``: the folder it may not enter) is named so.
    The build's preflight refuses the host with the line and ``fleetctl facts`` warns with it."""
    py = facts.get("python") or {}
    if not venv or not isinstance(py, Mapping) or py.get("exists") is not False:
        return None
    if py.get("dangling"):
        return (f"venv {venv}: {py.get('error')}: make the venv again with a python3 that exists "
                f"(python3 -m venv --clear {venv}, then install its packages again), or point the host var "
                "'venv' at another venv")
    if py.get("denied"):  # there, but the login user may not run it (made by root from root's python)
        return (f"venv {venv}: {py.get('error')}: make the venv with a python3 the login user can run, or let "
                f"that user read and enter {py['denied']}, or point the host var 'venv' at another venv")
    return (f"venv {venv}: {py.get('error') or 'no interpreter'}: the host var venv names an environment that is not "
            "there (builds, installs and verify use it): create it, or fix the var")


def silent_python_problem(facts: Mapping[str, Any], venv: str | None) -> str | None:
    """The venv's interpreter is there but gave fleetctl's probe no answer (facts ``python.error``
    with no ``version``: it hung past the probe's timeout, or died before its first line), or None.
    The cause is the interpreter's start, never torch: a ``.pth`` file or ``sitecustomize`` in its
    site-packages runs at every start (the site module's docs), and one that waits on a dead NFS
    mount hangs every command the venv runs (operator trial 11: facts said "torch does not import
    (interpreter probe failed)" for a venv whose torch was fine). The build's preflight refuses the
    host with the line and ``fleetctl facts`` warns with it."""
    py = facts.get("python") or {}
    if not venv or not isinstance(py, Mapping) or not py.get("exists") or py.get("version") or not py.get("error"):
        return None
    exe = py.get("executable") or f"{venv}/bin/python3"
    hung = "timed out" in str(py["error"])
    return (f"venv {venv}: its python {exe} " + ("did not start" if hung else "did not answer") + f" ({py['error']}): "
            "every build, install and verify runs it; a .pth file or sitecustomize in its site-packages runs at each "
            "start (one that waits on a dead NFS mount hangs it): find the cause with "
            f"{exe} -X importtime -c pass, or point the host var 'venv' at another venv")


def not_a_venv_problem(facts: Mapping[str, Any], venv: str | None) -> str | None:
    """The host var ``venv`` names a Python installation that is no virtual environment: its
    interpreter runs with ``sys.prefix == sys.base_prefix`` (no ``pyvenv.cfg``: the venv module's
    docs, "How venvs work") and it is no conda environment (no ``conda-meta`` folder). ``venv:
    /usr`` is the case: builds and installs would write into the system's Python, which Debian's
    marks externally managed (PEP 668: an ``EXTERNALLY-MANAGED`` file in its stdlib folder), so pip
    refuses to install there. None when facts do not say (an older facts script, no interpreter).
    """
    py = facts.get("python") or {}
    if not venv or not isinstance(py, Mapping) or py.get("in_venv") is not False or py.get("conda_env"):
        return None
    managed = py.get("externally_managed")
    return (f"venv {venv} is not a virtual environment (its python runs with sys.prefix == sys.base_prefix "
            f"{py.get('prefix') or venv}, no pyvenv.cfg"
            + (f"; it is externally managed, PEP 668: {managed} exists, so pip refuses to install into it"
               if isinstance(managed, str) else "")
            + "): make one (python3 -m venv ~/venv, or uv venv ~/venv) and point the host var 'venv' at it")


def no_front_end_problem(facts: Mapping[str, Any], venv: str | None, python: str) -> str | None:
    """The venv has no pip (facts ``python.packages.pip`` is None: ``uv venv`` or ``python -m venv
    --without-pip`` made it) and the host has no uv (facts ``uv.path``), so nothing can build or
    install into it: the refusal of ``tool: auto`` (:func:`fleetctl.tasks.pytool.pick_tool`, the
    build's and the install's preflight). None when either is there or facts do not say."""
    uv = (facts.get("uv") or {}).get("path")
    if uv or venv_has_pip(facts) is not False:
        return None
    return (f"the venv {venv or python} has no pip and this host has no uv, so nothing can build or install "
            f"into it: {add_pip_hint(python, uv)}, or install uv on the host ({UV_INSTALL})")


#: The oldest pip that runs every pip command fleetctl's build gives the venv's pip: ``pip wheel
#: --config-settings=cmake.define.NAME=VALUE`` (:func:`fleetctl.build.env.config_settings_args`:
#: the CMake defines), an option pip 22.1 added (pip's changelog, 22.1 (2022-05-11): config settings
#: for PEP 517 backends; pip 22.0.4's ``pip/_internal/cli/cmdoptions.py`` has no ``--config-settings``,
#: 22.1's does, and pip 20.3.4 stops with ``no such option: --config-settings``). The other pip
#: commands fleetctl runs need no more than pip 20.3.4 gives (checked with it, Python 3.11): the
#: installs (``pip install --no-input [--force-reinstall] [--no-deps] [--constraint F] WHEEL``,
#: :func:`fleetctl.tasks.pip_install.install_argv`; ``venv_upgrade``'s and the build requirements'
#: ``pip install --no-input [--pre] [--upgrade]``), ``pip check`` and ``pip uninstall -y``, and the
#: build's other options (``--no-deps -v --wheel-dir D --no-build-isolation``): none refuses a pip.
PIP_BUILD_FLOOR = (22, 1)


def old_pip_problem(facts: Mapping[str, Any], venv: str | None, python: str, tool: str | None = None) -> str | None:
    """The venv's pip (facts ``python.packages.pip``) is older than :data:`PIP_BUILD_FLOOR`, so the
    build's ``pip wheel --config-settings`` fails (operator trial: pip 20.3.4 passed ``--plan``, then
    the build failed with ``no such option: --config-settings``). The build's preflight refuses a
    host that compiles with it (:func:`fleetctl.tasks.build_preflight.compile_problems`) and
    ``fleetctl facts`` warns with it (:func:`fleetctl.facts.venv.venv_warnings`).

    Args:
        facts: the host's facts.
        venv: the host's venv (its ``venv`` var), named in the line.
        python: the venv's interpreter, for the upgrade command.
        tool: the front end that builds (:func:`fleetctl.tasks.pytool.pick_tool`'s choice); None:
            as ``tool: auto`` picks, uv when the host has it (facts ``uv.path``). uv builds without
            the venv's pip, so a host that builds with uv is never refused for pip's version.

    Returns:
        ``"pip 20.3.4 in the venv V is too old to build: ...; upgrade pip in the venv (PY -m pip
        install -U pip), or install uv on the host (...)"``, or None (pip new enough, no pip, or
        facts do not say).
    """
    if tool is None:
        tool = "uv" if (facts.get("uv") or {}).get("path") else "pip"
    py = facts.get("python") or {}
    packages = py.get("packages") if isinstance(py, Mapping) else None
    have = packages.get("pip") if isinstance(packages, Mapping) else None
    if tool != "pip" or not isinstance(have, str):
        return None
    numbers = tuple(int(x) for x in re.findall(r"\d+", have)[:2])
    if not numbers or numbers >= PIP_BUILD_FLOOR:
        return None
    floor = ".".join(map(str, PIP_BUILD_FLOOR))
    return (f"pip {have} in the venv {venv or python} is too old to build: the build runs pip wheel "
            f"--config-settings (the CMake defines), which pip {floor} added; upgrade pip in the venv "
            f"({python} -m pip install -U pip), or install uv on the host ({UV_INSTALL})")


def build_requirements_problem(facts: Mapping[str, Any], where: str | None, python: str,
                               missing: Sequence[tuple[str, str | None]], torch_extension: bool = False) -> str:
    """The build's refusal of a venv without its build requirements (a non-isolated build runs in
    the venv): ``build requirements missing in WHERE: REQ (have V), ...; install them into the
    venv: CMD (or have the build install them: ...)``.

    Args:
        where: the venv named (the live one of a stage not made yet).
        python: the venv's interpreter, for the install command
            (:func:`fleetctl.facts.install_hint.install_command`).
        missing: ``(requirement, installed version or None)`` for each requirement not satisfied,
            torch aside (fleetctl never installs torch).
        torch_extension: the package builds against torch (its extension build tools are named).
    """
    what = ", ".join(f"{req} (have {have})" if have else req for req, have in missing)
    reqs = " ".join(shlex.quote(req) for req, _ in missing)
    return (f"build requirements missing in {where}: {what} (the package's own [build-system] requires"
            f"{' and the torch extension build tools' if torch_extension else ''}); install them into "
            f"the venv: {install_command(facts, python, reqs)} "
            "(or have the build install them: -e install_build_requirements=true with the shipped "
            "fp4-kernels playbook; install_build_requirements: true in a build_wheel task of your own)")
