"""Task executors, one module per action; :func:`dispatch` picks one by action name."""

from __future__ import annotations

from pathlib import Path

from ..actions import ActionArgs
from ..status import Status
from .base import TaskContext, TaskResult


async def dispatch(action: str, ctx: TaskContext, args: ActionArgs, playbook_dir: Path, *, force: bool = False) -> TaskResult:
    """Run the executor of ``action`` with validated ``args``."""
    from . import build_wheel, command, copy, pip_install, verify

    if action == "copy":
        return await copy.run(ctx, args, playbook_dir)
    if action == "command":
        return await command.run_command(ctx, args)
    if action == "shell":
        return await command.run_shell(ctx, args)
    if action == "script":
        return await command.run_script(ctx, args, playbook_dir)
    if action == "build_wheel":
        return await build_wheel.run(ctx, args, force=force)
    if action == "pip_install":
        return await pip_install.run(ctx, args, force=force)
    if action == "verify":
        return await verify.run(ctx, args, playbook_dir)
    if action == "fail":
        return TaskResult(Status.FAILED, msg=str(args.msg))
    if action == "debug":
        ctx.record.event("debug.message", host=ctx.host, msg=args.msg)
        return TaskResult(Status.OK, msg=str(args.msg))
    raise ValueError(f"no executor for action {action!r}")
