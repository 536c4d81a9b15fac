"""``pip_install``: install a wheel into the host's venv with ``--force-reinstall --no-deps``.

torch's version and CUDA build are read before and after: if the install changed torch, the task
FAILS (a kernel wheel must never drag in another torch). The installed wheel is kept under
``<workdir>/installed/`` with a record of the one it replaced, so a failed verify can roll back;
installing the same wheel (same SHA-256) again is skipped unless ``--force``.
"""

from __future__ import annotations

import json
import posixpath
import re

from ..actions import PipInstallArgs
from ..status import Status
from .base import TaskContext, TaskResult, first_error_line

_TORCH = (
    "import json\n"
    "try:\n"
    "    import torch\n"
    "    print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda}))\n"
    "except Exception as exc:\n"
    "    print(json.dumps({'torch': None, 'cuda': None, 'error': repr(exc)}))\n"
)


def installed_dir(workdir: str) -> str:
    """Where install records (``<dist>.json``: sha256, kept wheel, previous) and kept wheels live."""
    return posixpath.join(workdir, "installed")


def dist_name(wheel: str) -> str:
    """The distribution name of a wheel file (``fp4_kernels-0.1.0-cp312-...whl`` -> ``fp4_kernels``)."""
    return posixpath.basename(wheel).split("-")[0]


def install_argv(tool: str, python: str, uv: str | None, wheel: str, args: PipInstallArgs) -> list[str]:
    flags = (["--force-reinstall"] if args.force_reinstall else []) + (["--no-deps"] if args.no_deps else [])
    if tool == "uv":
        return [uv or "uv", "pip", "install", "--python", python, *flags, wheel]
    return [python, "-m", "pip", "install", "--no-input", *flags, wheel]


async def torch_state(ctx: TaskContext) -> dict:
    res = await ctx.run([ctx.session.python, "-c", _TORCH], quiet=True, mutating=False, timeout_s=300)
    try:
        return json.loads(res.stdout_text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"torch": None, "cuda": None, "error": first_error_line(res)}


async def run(ctx: TaskContext, args: PipInstallArgs, *, force: bool = False) -> TaskResult:
    """Install; CHANGED on install, OK when this exact wheel is already installed, FAILED if torch moved."""
    wheel = args.wheel
    if any(c in wheel for c in "*?["):
        found = await ctx.run(["/bin/sh", "-c", 'for f in $1; do [ -e "$f" ] && echo "$f"; done', "sh", wheel],
                              quiet=True, mutating=False)
        matches = found.stdout_text.split()
        if len(matches) != 1:
            return TaskResult(Status.FAILED, msg=f"wheel pattern {wheel} matches {len(matches)} files, expected 1")
        wheel = matches[0]
    if not ctx.session.venv:
        return TaskResult(Status.FAILED, msg="no venv for this host: set the host var 'venv'")
    tool, uv = ctx.build_tool(args.tool)
    if ctx.dry_run:  # the wheel may not exist yet: plan the install command only
        await ctx.run(install_argv(tool, ctx.session.python, uv, wheel, args))
        return TaskResult(Status.CHANGED, msg=f"dry run: would install {posixpath.basename(wheel)} ({tool})")
    dist = dist_name(wheel)
    keep_dir = installed_dir(ctx.session.workdir)
    record_path = posixpath.join(keep_dir, f"{dist}.json")
    digest_res = await ctx.run(["sha256sum", wheel], quiet=True, mutating=False)
    if digest_res.rc != 0:
        return TaskResult(Status.FAILED, msg=f"wheel {wheel}: {first_error_line(digest_res)}")
    digest = digest_res.stdout_text.split()[0] if digest_res.stdout_text else ""
    old = await ctx.run(["cat", record_path], quiet=True, mutating=False)
    previous = None
    if old.rc == 0:
        try:
            previous = json.loads(old.stdout_text)
        except ValueError:
            previous = None
    python = ctx.session.python
    if previous and previous.get("sha256") == digest and not force and not ctx.dry_run:
        present = await ctx.run([python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                                quiet=True, mutating=False)
        if present.rc == 0:
            return TaskResult(Status.OK, msg=f"{posixpath.basename(wheel)} already installed (same sha256)",
                              data={"wheel": previous.get("kept"), "sha256": digest, "skipped": True})

    before = await torch_state(ctx)
    res = await ctx.run(install_argv(tool, python, uv, wheel, args))
    if res.rc != 0:
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"install failed ({tool}): {first_error_line(res)}")
    after = await torch_state(ctx) if not ctx.dry_run else before
    data = {"wheel": wheel, "sha256": digest, "tool": tool, "torch_before": before, "torch_after": after,
            "previous": previous}
    if (before.get("torch"), before.get("cuda")) != (after.get("torch"), after.get("cuda")):
        return TaskResult(Status.FAILED, msg=f"the install changed torch: {before.get('torch')} (cu {before.get('cuda')})"
                          f" -> {after.get('torch')} (cu {after.get('cuda')})", data=data)
    if args.keep_previous and not ctx.dry_run:
        kept = posixpath.join(keep_dir, posixpath.basename(wheel))
        await ctx.run(["mkdir", "-p", "-m", "0700", keep_dir], quiet=True)
        await ctx.run(["cp", "-f", wheel, kept], quiet=True)
        rec = {"dist": dist, "sha256": digest, "kept": kept, "previous": (previous or {}).get("kept")}
        await ctx.put_json(record_path, rec)
        data["kept"] = kept
    version = re.sub(r"\.whl$", "", posixpath.basename(wheel))
    return TaskResult(Status.CHANGED, msg=f"installed {version} ({tool}); torch {after.get('torch')} unchanged",
                      data=data)
