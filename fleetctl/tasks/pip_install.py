"""``pip_install``: install a wheel into the host's venv with ``--force-reinstall --no-deps``.

The decision reads the host's real installed state, not only fleetctl's own record: the package's
dist-info in the venv (its ``RECORD``, hashed) must still be the one fleetctl installed, so a
package uninstalled or replaced by hand is installed again. torch's version and CUDA build are read
(from ``torch/version.py``, without importing torch) before and after: if the install changed
torch, the task FAILS (a kernel wheel must never drag in another torch). The installed wheel is
kept under ``<workdir>/installed/`` with a record of the one it replaced, so a failed verify can
roll back; installing the same wheel (same SHA-256) again is skipped unless ``--force``.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from typing import Any, Literal

from pydantic import field_validator

from ..connection.base import CommandResult
from ..status import Status
from .argtypes import ActionArgs, non_empty
from .base import Action, HostView, Plan, TaskResult, first_error_line
from .steps import Put, Run, probe

#: Reads fleetctl's install record, the installed distribution (version, location, a digest of its
#: RECORD without the installer's own files) and torch's version and CUDA build without importing
#: torch. stdlib only, Python 3.8+. argv: DIST RECORD_PATH. The distribution is found as
#: ``importlib.metadata.distribution(DIST)`` finds it (the first ``.dist-info``/``.egg-info`` of that
#: normalized name along sys.path) without importing importlib.metadata, whose import is most of
#: this probe's time; tests/test_planners.py checks both agree.
STATE_SCRIPT = r'''
import ast, hashlib, json, os, re, sys
import importlib.util
out = {"record": None, "dist": None, "torch": None, "cuda": None}
try:
    with open(sys.argv[2]) as fh:
        out["record"] = json.load(fh)
except (OSError, ValueError):
    pass


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def find_dist(name):
    for entry in sys.path:
        folder = entry or "."
        try:
            listing = os.listdir(folder)
        except OSError:
            continue
        for item in listing:
            if item.endswith((".dist-info", ".egg-info")) and norm(item.rsplit(".", 1)[0].split("-")[0]) == norm(name):
                return folder, os.path.join(folder, item)
    return None, None


def read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


try:
    location, info = find_dist(sys.argv[1])
    if info is not None:
        meta = read(os.path.join(info, "METADATA" if info.endswith(".dist-info") else "PKG-INFO")) or ""
        version = next((l.split(":", 1)[1].strip() for l in meta.split("\n\n")[0].splitlines()
                        if l.lower().startswith("version:")), None)
        skip = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
        lines = sorted(l for l in (read(os.path.join(info, "RECORD")) or "").splitlines()
                       if l and not l.split(",")[0].endswith(skip) and "__pycache__" not in l)
        out["dist"] = {"version": version, "location": location,
                       "record_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest()}
except Exception:
    pass
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin:
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as fh:
            tree = ast.parse(fh.read())
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            name = getattr(target, "id", None)
            if name in ("__version__", "cuda") and getattr(node, "value", None) is not None:
                out["torch" if name == "__version__" else "cuda"] = ast.literal_eval(node.value)
    except (OSError, SyntaxError, ValueError):
        pass
print(json.dumps(out))
'''

_MISSING = object()


class PipInstallArgs(ActionArgs):
    """``pip_install``: install a wheel into the host's venv.

    Attributes:
        wheel: remote wheel path, or a glob (``"{{ out_dir }}/fp4_kernels-*.whl"``) that must match
            exactly one file.
        force_reinstall: reinstall even when the same version is installed.
        no_deps: do not install dependencies.
        keep_previous: keep the previously installed wheel so that a failed verify can roll back.
        tool: ``"uv"``, ``"pip"``, or ``"auto"`` (uv when the host has it).
    """

    wheel: str
    force_reinstall: bool = True
    no_deps: bool = True
    keep_previous: bool = True
    tool: Literal["auto", "uv", "pip"] = "auto"

    @field_validator("wheel")
    @classmethod
    def _wheel(cls, v: str) -> str:
        return non_empty(v, "wheel")


def installed_dir(workdir: str) -> str:
    """Where install records (``<dist>.json``: sha256, kept wheel, previous) and kept wheels live."""
    return posixpath.join(workdir, "installed")


def dist_name(wheel: str) -> str:
    """The distribution name of a wheel file (``fp4_kernels-0.1.0-cp312-...whl`` -> ``fp4_kernels``)."""
    return posixpath.basename(wheel).split("-")[0]


def install_argv(tool: str, python: str, uv: str | None, wheel: str, args: PipInstallArgs) -> list[str]:
    """``uv pip install --python PY`` or ``PY -m pip install``, with the task's flags."""
    flags = (["--force-reinstall"] if args.force_reinstall else []) + (["--no-deps"] if args.no_deps else [])
    if tool == "uv":
        return [uv or "uv", "pip", "install", "--python", python, *flags, wheel]
    return [python, "-m", "pip", "install", "--no-input", *flags, wheel]


def parse_state(res: CommandResult) -> dict[str, Any]:
    """:data:`STATE_SCRIPT`'s JSON, or ``{"error": first line}`` when it did not run."""
    try:
        return json.loads(res.stdout_text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"record": None, "dist": None, "torch": None, "cuda": None, "error": first_error_line(res)}


def plan(args: PipInstallArgs, host: HostView) -> Plan:
    """Install unless this exact wheel is what the venv holds; FAILED if torch moved."""
    wheel = args.wheel
    if any(c in wheel for c in "*?["):
        known = [p for p in host.files if fnmatch.fnmatchcase(p, wheel)]
        if len(known) == 1:
            wheel = known[0]
        else:
            found = yield probe(["/bin/sh", "-c", 'for f in $1; do [ -e "$f" ] && echo "$f"; done', "sh", wheel],
                                f"the wheel matching {wheel}")
            matches = found.stdout_text.split()
            if len(matches) != 1:
                return TaskResult(Status.FAILED, msg=f"wheel pattern {wheel} matches {len(matches)} files, expected 1")
            wheel = matches[0]
    if not host.venv:
        return TaskResult(Status.FAILED, msg="no venv for this host: set the host var 'venv'")
    uv = (host.facts.get("uv") or {}).get("path")
    tool = "uv" if args.tool == "uv" or (args.tool == "auto" and uv) else "pip"
    dist = dist_name(wheel)
    record_path = posixpath.join(installed_dir(host.workdir), f"{dist}.json")
    digest = host.files.get(wheel, _MISSING)
    if digest is _MISSING:
        res = yield probe(["sha256sum", wheel], f"the sha256 of {posixpath.basename(wheel)}")
        if res.rc != 0:
            return TaskResult(Status.FAILED, msg=f"wheel {wheel}: {first_error_line(res)}")
        digest = res.stdout_text.split()[0]
    state_res = yield probe([host.python, "-c", STATE_SCRIPT, dist, record_path],
                            f"what {host.venv} holds now (dist-info, torch)", timeout_s=300)
    before = parse_state(state_res)
    previous = before.get("record") or None
    held = before.get("dist") or {}
    same = (previous is not None and digest is not None and previous.get("sha256") == digest
            and held.get("record_sha256") and held.get("record_sha256") == previous.get("record_sha256"))
    if same and not host.force:
        return TaskResult(Status.OK, msg=f"{posixpath.basename(wheel)} already installed (same sha256)",
                          data={"wheel": previous.get("kept"), "sha256": digest, "skipped": True,
                                "decision": {"action": "skip"}})
    why = ("forced" if same else "nothing installed" if not held else
           "installed package differs from the wheel" if previous and previous.get("sha256") == digest else
           "a new wheel")
    decision = {"action": "install", "why": why}
    res = yield Run(argv=tuple(install_argv(tool, host.python, uv, wheel, args)),
                    reason=f"install {posixpath.basename(wheel)} ({why})")
    if res.rc != 0:
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"install failed ({tool}): {first_error_line(res)}",
                          data={"decision": decision})
    assume = {**before, "dist": {**held, "record_sha256": None}}
    after_res = yield Run(argv=(host.python, "-c", STATE_SCRIPT, dist, record_path), mutating=False,
                          after_change=True, quiet=True, timeout_s=300, reason="torch unchanged?",
                          assume=CommandResult(argv=[], rc=0, stdout=json.dumps(assume).encode()))
    after = parse_state(after_res)
    data: dict[str, Any] = {"wheel": wheel, "sha256": digest, "tool": tool, "previous": previous, "decision": decision,
                            "torch_before": {"torch": before.get("torch"), "cuda": before.get("cuda")},
                            "torch_after": {"torch": after.get("torch"), "cuda": after.get("cuda")}}
    if (before.get("torch"), before.get("cuda")) != (after.get("torch"), after.get("cuda")):
        return TaskResult(Status.FAILED, data=data,
                          msg=f"the install changed torch: {before.get('torch')} (cu {before.get('cuda')}) -> "
                              f"{after.get('torch')} (cu {after.get('cuda')})")
    if args.keep_previous:
        keep_dir = installed_dir(host.workdir)
        kept = posixpath.join(keep_dir, posixpath.basename(wheel))
        yield Run(argv=("mkdir", "-p", "-m", "0700", keep_dir), quiet=True)
        yield Run(argv=("cp", "-f", wheel, kept), quiet=True, reason="keep the wheel for a rollback")
        rec = {"dist": dist, "sha256": digest, "kept": kept, "previous": (previous or {}).get("kept"),
               "record_sha256": (after.get("dist") or {}).get("record_sha256")}
        yield Put(data=json.dumps(rec).encode(), remote=record_path, mode=0o600, reason="the install record")
        data["kept"] = kept
    version = re.sub(r"\.whl$", "", posixpath.basename(wheel))
    return TaskResult(Status.CHANGED, data=data,
                      msg=f"installed {version} ({tool}); torch {after.get('torch')} unchanged")


ACTION = Action(name="pip_install", args=PipInstallArgs, phase="install", timeout_s=900.0, plan=plan)
