"""The build preflight's probe of the venv's python: each question in its own interpreter.

A question a probe asks can change the answer to the next one when both run in one process.
The case that happened: on Python <= 3.11, ``import pip`` (for its vendored ``packaging``) makes
setuptools' distutils shim (``_distutils_hack``, installed by setuptools >= 60 as
``distutils-precedence.pth``) step aside for the rest of the process (``spec_for_pip``:
pypa/pip#8761), so a later ``import torch.utils.cpp_extension`` (which imports setuptools) dies
with ``AssertionError: .../distutils/core.py``: every setuptools torch extension was refused on a
venv made by ``python -m venv``, although the build, a fresh process, would have succeeded.

So :data:`VENV_PROBE` is a small parent (``json``, ``os``, ``subprocess``, ``sys`` only) that
runs each question (:data:`QUESTIONS`) as a child of the same interpreter (``sys.executable``),
all at once, and merges their answers; the requirements question with no requirement to read
(only setuptools' version, found without importing anything but ``os`` and ``re``) runs in the
parent itself: one interpreter start per host for the common build, not two. A question that crashes or prints no answer is named in
``probe_errors`` (``{question: "exit 1: last line of its stderr"}``): fleetctl's fault, which
:func:`probe_fault_problems` reports as such, never as the host's.

Output (stdout): the line :data:`STARTED` first (the interpreter ran fleetctl's code: a missing
answer after it is the probe's fault, not the host's), then one JSON object on the last line:
``executable``, ``prefix``, ``missing`` (import names not found), ``requirements`` (``{req:
{name, installed, ok}}``, specifiers checked with pip's vendored ``packaging``, else
``packaging``, else only presence), ``setuptools`` (version), ``torch_archs`` (``{token: {"ok",
"flags" | "error"}}`` from ``torch.utils.cpp_extension._get_cuda_arch_flags``, only when tokens
are given), ``torch_archs_error``, ``tmp`` (``{path, free_mib, noexec, writable}``) and
``probe_errors``. Any Python >= 3.8, stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..connection.base import CommandResult
from .steps import Run, probe

#: Unset for every command that runs the venv's python: a login environment's PYTHONPATH (a source
#: checkout) or another environment's markers must not change what it imports.
CLEAN_PYTHON_ENV: dict[str, str | None] = {"PYTHONPATH": None, "PYTHONHOME": None, "VIRTUAL_ENV": None,
                                           "CONDA_PREFIX": None, "CONDA_DEFAULT_ENV": None}

#: The environment of every ``pip install`` into the venv: :data:`CLEAN_PYTHON_ENV` with pip's
#: user-site install switched off. A per-user ``[install] user = true`` in pip.conf
#: (``~/.config/pip/pip.conf``) or ``PIP_USER=1`` in the login environment otherwise sends the
#: install to ``~/.local/lib/pythonX.Y/site-packages`` (visible to a venv made with
#: ``--system-site-packages``, so pip accepts it) instead of the venv, or fails an install over a
#: copy the venv already holds ("Will not install to the user site because it will lack sys.path
#: precedence"). pip's ``--no-user`` is hidden (``SUPPRESS_HELP``: not in ``pip install --help``),
#: so the documented way is taken: an environment variable overrides every configuration file (pip's
#: docs, "Configuration": command line, then ``PIP_<NAME>`` environment variables, then the files),
#: and this one replaces a login's ``PIP_USER=1``. uv never reads pip.conf.
PIP_INSTALL_ENV: dict[str, str | None] = {**CLEAN_PYTHON_ENV, "PIP_USER": "0"}

#: The first line the parent prints: the venv's python started and runs fleetctl's probe.
STARTED = "@@FLEETCTL_PROBE_STARTED@@"

#: Import names the venv lacks (``importlib.util.find_spec``; a dotted name imports its parents).
_IMPORTS_Q = r'''
import importlib.util, json, sys
a = json.loads(sys.argv[1])
missing = []
for m in a.get("imports", []):
    try:
        found = importlib.util.find_spec(m) is not None
    except Exception:
        found = False
    if not found:
        missing.append(m)
print(json.dumps({"missing": missing}))
'''

#: Each requirement's installed version and whether it satisfies its specifier and marker;
#: setuptools' version. A distribution is found as ``importlib.metadata.version(NAME)`` finds it
#: (the first ``.dist-info``/``.egg-info`` of that normalized name along sys.path, its METADATA or
#: PKG-INFO ``Version:`` header; PEP 376, PEP 503) without importing importlib.metadata, and
#: packaging's ``Requirement`` is imported only when there is a requirement to read: those two
#: imports were most of this probe's host CPU on every host of every deploy (0.17 of 0.2 CPU-s
#: with pip 23's vendored pyparsing); tests/test_probe_scripts.py checks both ways agree.
_REQUIREMENTS_Q = r'''
import json, os, re, sys
a = json.loads(sys.argv[1])
def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
found = {}
for entry in sys.path:
    try:
        listing = sorted(os.listdir(entry or "."))
    except OSError:
        continue
    for item in listing:
        if item.endswith((".dist-info", ".egg-info")):
            found.setdefault(norm(item.rsplit(".", 1)[0].split("-")[0]), os.path.join(entry or ".", item))
def version_of(name):
    info = found.get(norm(name))
    if info is None:
        return None
    meta = os.path.join(info, "METADATA" if info.endswith(".dist-info") else "PKG-INFO") if os.path.isdir(info) else info
    try:
        with open(meta, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    return None
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None
Requirement = None
for mod in ("pip._vendor.packaging.requirements", "packaging.requirements") if a.get("requirements") else ():
    try:
        Requirement = __import__(mod, fromlist=["Requirement"]).Requirement
        break
    except Exception:
        pass
out = {"requirements": {}, "setuptools": version_of("setuptools")}
for req in a.get("requirements", []):
    name, spec, applies = req.split(";")[0].split("[")[0].strip(), None, True
    if Requirement is not None:
        try:
            r = Requirement(req)
            name, spec = r.name, r.specifier
            applies = r.marker is None or r.marker.evaluate()
        except Exception:
            pass
    for sep in "<>=!~ (":
        name = name.split(sep)[0]
    have = version_of(name)
    ok = have is not None and (spec is None or not str(spec) or spec.contains(have, prereleases=True))
    out["requirements"][req] = {"name": name, "installed": have, "ok": ok or not applies}
print(json.dumps(out))
'''

#: What ``torch.utils.cpp_extension`` makes of each arch token, imported in a fresh process as
#: the build's ``setup.py`` imports it.
_TORCH_ARCHS_Q = r'''
import json, os, sys
a = json.loads(sys.argv[1])
out = {"torch_archs": None, "torch_archs_error": None}
try:
    import torch.utils.cpp_extension as ce
except Exception as exc:
    out["torch_archs_error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
else:
    res = {}
    for tok in a["tokens"]:
        os.environ["TORCH_CUDA_ARCH_LIST"] = tok
        try:
            res[tok] = {"ok": True, "flags": ce._get_cuda_arch_flags()}
        except Exception as exc:
            res[tok] = {"ok": False, "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    out["torch_archs"] = res
print(json.dumps(out))
'''

#: The questions, by name, each run in its own child interpreter (see the module docstring).
QUESTIONS: dict[str, str] = {"imports": _IMPORTS_Q, "requirements": _REQUIREMENTS_Q, "torch_archs": _TORCH_ARCHS_Q}

_PARENT = r'''
import json, os, subprocess, sys
QUESTIONS = %(questions)s
sys.stdout.write(%(started)r + "\n")
sys.stdout.flush()
a = json.loads(sys.argv[1])
out = {"executable": sys.executable, "prefix": sys.prefix, "missing": [], "requirements": {}, "setuptools": None,
       "torch_archs": None, "torch_archs_error": None, "tmp": None, "probe_errors": {}}
asked = (["requirements"] if a.get("requirements") else []) + (["imports"] if a.get("imports") else []) + (
    ["torch_archs"] if a.get("tokens") is not None else [])
procs = {}
for q in asked:
    try:
        procs[q] = subprocess.Popen([sys.executable or "python3", "-c", QUESTIONS[q], sys.argv[1]],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        out["probe_errors"][q] = "cannot start %%s: %%s" %% (sys.executable, exc)
if a.get("tmp"):
    p = os.path.abspath(a["tmp"])
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    st = os.statvfs(p)
    out["tmp"] = {"path": p, "free_mib": st.f_bavail * st.f_frsize // 1048576, "noexec": bool(st.f_flag & 8),
                  "writable": os.access(p, os.W_OK | os.X_OK)}
if "requirements" not in asked:  # no requirement: nothing but the stdlib to import, so in this process
    import io
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        exec(QUESTIONS["requirements"], {"__name__": "fleetctl_requirements"})
        answer = json.loads(sys.stdout.getvalue().strip().splitlines()[-1])
    except Exception as exc:
        answer = None
        out["probe_errors"]["requirements"] = "%%s: %%s" %% (type(exc).__name__, exc)
    finally:
        sys.stdout = saved
    if isinstance(answer, dict):
        out.update(answer)
for q, proc in procs.items():
    o, e = proc.communicate()
    lines = [ln for ln in o.decode("utf-8", "replace").splitlines() if ln.strip()]
    try:
        answer = json.loads(lines[-1])
        if not isinstance(answer, dict):
            raise ValueError("not an object")
    except (ValueError, IndexError):
        err = [ln.strip() for ln in e.decode("utf-8", "replace").splitlines() if ln.strip()]
        rc = proc.returncode
        out["probe_errors"][q] = "%%s: %%s" %% ("killed by signal %%d" %% -rc if rc < 0 else "exit %%d" %% rc,
                                              err[-1] if err else "no answer")
        continue
    out.update(answer)
print(json.dumps(out))
'''

#: Runs in the venv's python with one JSON argument ``{"imports", "requirements", "tokens",
#: "tmp"}`` (see the module docstring).
VENV_PROBE = _PARENT % {"questions": repr(QUESTIONS), "started": STARTED}

#: What each question is about, for the operator (``probe_errors`` keys).
_ABOUT = {"venv": "the probe of the venv's python", "imports": "the build's import names", "requirements": "the build requirements' versions",
          "torch_archs": "which arch names torch.utils.cpp_extension accepts"}


def venv_probe(python: str, imports: Sequence[str], requirements: Sequence[str], tokens: Sequence[str] | None,
               tmp: str | None) -> Run:
    """The read-only probe of the venv's python (cwd ``/``: nothing in a source folder can shadow
    what the venv holds; :data:`CLEAN_PYTHON_ENV` unset)."""
    arg = json.dumps({"imports": list(imports), "requirements": list(requirements), "tokens": tokens, "tmp": tmp},
                     sort_keys=True)
    return probe([python, "-c", VENV_PROBE, arg], f"check {python}, the build requirements and the arch list",
                 env=CLEAN_PYTHON_ENV, cwd="/")


def parse_venv_probe(res: CommandResult) -> dict[str, Any] | None:
    """The probe's JSON answer, or ``None`` when its last line is none."""
    try:
        info = json.loads(res.stdout_text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return info if isinstance(info, dict) else None


def probe_started(res: CommandResult) -> bool:
    """The venv's python ran fleetctl's probe (so a missing answer is the probe's fault)."""
    return STARTED in res.stdout_text.splitlines()


def probe_fault_problems(info: Mapping[str, Any]) -> list[str]:
    """One line per question that crashed (``probe_errors``), said as fleetctl's fault."""
    return [f"fleetctl's probe {q} ({_ABOUT.get(q, q)}) failed on this host: {err}; this is a fault of fleetctl, "
            "not of the host (please report it with the host's log: fleetctl logs RUN_ID HOST)"
            for q, err in sorted((info.get("probe_errors") or {}).items())]


def torch_probe_problem(error: str) -> str:
    """The preflight's line when facts could not read the venv's torch (``python.torch_probe_error``
    of ``facts.py``): fleetctl's reader failed, which says nothing about the host's torch."""
    return (f"{error}: fleetctl could not read the venv's torch, a fault of fleetctl, not of the host (its torch "
            "may be fine); please report it with the host's log (fleetctl logs RUN_ID HOST)")
