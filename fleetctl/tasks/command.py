"""``command`` (an argv, no shell), ``shell`` (an explicit string through a named shell) and
``script`` (a local script uploaded as a file, then run by an interpreter)."""

from __future__ import annotations

import posixpath
from pathlib import Path

from ..actions import CommandArgs, ScriptArgs, ShellArgs
from ..errors import TransferError
from ..status import Status
from .base import TaskContext, TaskResult, first_error_line


def _result(res) -> TaskResult:
    status = Status.CHANGED if res.rc == 0 else Status.FAILED
    msg = "" if res.rc == 0 else f"rc={res.rc if res.rc is not None else res.signal}: {first_error_line(res)}"
    return TaskResult(status, msg=msg, rc=res.rc, stdout=res.stdout_text, stderr=res.stderr_text)


async def run_command(ctx: TaskContext, args: CommandArgs) -> TaskResult:
    """Run the argv exactly; SKIPPED when ``creates`` already exists on the host."""
    if args.creates:
        probe = await ctx.run(["test", "-e", args.creates], quiet=True, mutating=False)
        if probe.rc == 0:
            return TaskResult(Status.SKIPPED, msg=f"{args.creates} exists")
    return _result(await ctx.run(args.argv, cwd=args.cwd))


async def run_shell(ctx: TaskContext, args: ShellArgs) -> TaskResult:
    """Run ``executable -c cmd`` (the string is the user's own shell code, passed as one argv element)."""
    return _result(await ctx.run([args.executable, "-c", args.cmd], cwd=args.cwd))


async def run_script(ctx: TaskContext, args: ScriptArgs, playbook_dir: Path) -> TaskResult:
    """Upload the script into the run folder and run it with the interpreter (default: the venv python)."""
    src = Path(args.src)
    if not src.is_absolute():
        src = (playbook_dir / src).resolve()
    if not src.is_file():
        return TaskResult(Status.FAILED, msg=f"script: local file {src} does not exist")
    remote = posixpath.join(ctx.session.run_dir, "scripts", src.name)
    try:
        await ctx.put(str(src), remote, mode=0o700)
    except TransferError as exc:
        return TaskResult(Status.FAILED, msg=str(exc))
    interpreter = args.interpreter or ctx.session.python
    return _result(await ctx.run([interpreter, remote, *args.args], env=args.env))
