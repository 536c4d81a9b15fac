"""``shell``: a command line through a named shell on the host (the user's own shell code, passed
as one argv element: ``executable -c cmd``; never re-quoted)."""

from __future__ import annotations

from pydantic import field_validator

from .argtypes import ActionArgs, non_empty
from .base import Action, HostView, Plan, result_of
from .steps import Run


class ShellArgs(ActionArgs):
    """``shell``: run a command line through a shell on the host.

    Attributes:
        cmd: the command line.
        executable: the shell, run as ``executable -c cmd``.
        cwd: remote working folder; ``None`` means the login folder.
    """

    cmd: str
    executable: str = "/bin/sh"
    cwd: str | None = None

    @field_validator("cmd", "executable")
    @classmethod
    def _nonempty(cls, v: str, info) -> str:
        return non_empty(v, info.field_name)


def plan(args: ShellArgs, host: HostView) -> Plan:
    """Run ``executable -c cmd``."""
    res = yield Run(argv=(args.executable, "-c", args.cmd), cwd=args.cwd)
    out = result_of(res)
    out.data["decision"] = {"action": "run"}
    return out


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`run`; `--dry-run` lists the argv (`executable -c cmd`)."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Count the venv's packages
  shell:
    cmd: "{{ python }} -m pip list --format=freeze | wc -l"
    executable: /bin/bash
"""

ACTION = Action(name="shell", args=ShellArgs, phase="command", timeout_s=600.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
