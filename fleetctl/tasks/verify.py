"""``verify``: run the verification script in a fresh interpreter from a neutral folder.

The script (``playbooks/scripts/verify_package.py`` unless the task names another) is uploaded into
the run folder and run there with the venv's python, so the package is imported from the venv's
site-packages, never from the source tree. See the script's docstring for the checks.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from ..actions import DEFAULT_VERIFY_SCRIPT, VerifyArgs
from ..paths import REPO_ROOT
from ..status import Status
from .base import TaskContext, TaskResult, first_error_line


def verify_argv(python: str, script: str, args: VerifyArgs, venv: str | None, sms: list[str]) -> list[str]:
    argv = [python, script, "--package", args.package]
    if venv:
        argv += ["--venv", venv]
    if args.symbols:
        argv += ["--symbols", ",".join(args.symbols)]
    if sms:
        argv += ["--sm", ",".join(sms)]
    if args.smoke:
        argv.append("--smoke")
    if args.fa3_fallback is not None:
        argv += ["--fa3-fallback", "yes" if args.fa3_fallback else "no"]
    return argv


async def run(ctx: TaskContext, args: VerifyArgs, playbook_dir: Path) -> TaskResult:
    """OK when every check passed; FAILED naming the failed checks."""
    local = Path(args.script) if args.script else REPO_ROOT / DEFAULT_VERIFY_SCRIPT
    if not local.is_absolute():
        local = (playbook_dir / local).resolve()
    neutral = posixpath.join(ctx.session.run_dir, "verify")
    remote = posixpath.join(neutral, local.name)
    await ctx.put(str(local), remote, mode=0o600)
    sms = sorted({g["compute_cap"] for g in ctx.facts.get("gpus") or [] if g.get("compute_cap")})
    res = await ctx.run(verify_argv(ctx.session.python, remote, args, ctx.session.venv, sms), cwd=neutral)
    if ctx.dry_run:
        return TaskResult(Status.OK, msg="dry run")
    summary: dict = {}
    for line in reversed(res.stdout_text.strip().splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                break
            except ValueError:
                continue
    failed = [c for c in summary.get("checks", []) if not c.get("ok")]
    if res.rc != 0 or not summary.get("ok"):
        why = "; ".join(f"{c['name']}: {c['detail']}" for c in failed) or first_error_line(res)
        return TaskResult(Status.FAILED, rc=res.rc, msg=f"verify {args.package}: {why}", data=summary,
                          stdout=res.stdout_text, stderr=res.stderr_text)
    device = "cpu"
    if summary.get("selfcheck"):
        device = summary["selfcheck"].get("device", device)
    notes = [c["detail"] for c in summary.get("checks", []) if c["name"] == "import-order" and "only after" in c["detail"]]
    return TaskResult(Status.OK, msg=f"{args.package} verified ({len(summary.get('checks', []))} checks, smoke on {device})"
                      + (f"; {notes[0]}" if notes else ""), data=summary)
