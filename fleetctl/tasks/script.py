"""``script``: a local script uploaded as a file into the run's folder, then run by an interpreter
(never typed through a remote shell, whose quoting broke the seeds' inline patches)."""

from __future__ import annotations

import posixpath

from pydantic import Field, field_validator

from ..status import Status
from .argtypes import ActionArgs, argv_list, env_mapping, non_empty
from .base import Action, HostView, Plan, TaskResult, result_of
from .steps import Local, Put, Run


class ScriptArgs(ActionArgs):
    """``script``: upload a local script and run it on the host.

    Attributes:
        src: local script path, relative to the playbook file's folder.
        args: arguments passed after the script path (numbers become strings).
        interpreter: program that runs the script; ``None`` means the host's venv Python.
        env: extra environment variables for the script (over the task's ``env``).
        check_args: arguments for a read-only run of the same script (its ``--dry-run``, say),
            asked in every mode before the upload (the script fed on stdin: ``INTERPRETER -
            CHECK_ARGS``): a non-zero exit fails the task with the script's own line, so ``--plan``
            and ``--dry-run`` fail where the real run would, instead of assuming the script
            succeeds. ``None``: no such run (a dry run cannot know how the script will end).
    """

    src: str
    args: list[str] = Field(default_factory=list)
    interpreter: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    check_args: list[str] | None = None

    @field_validator("src")
    @classmethod
    def _src(cls, v: str) -> str:
        return non_empty(v, "src")

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, v: object) -> object:
        return argv_list(v, "args")

    @field_validator("check_args", mode="before")
    @classmethod
    def _check_args(cls, v: object) -> object:
        return None if v is None else argv_list(v, "check_args")

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: object) -> object:
        return env_mapping(v)


def _read_bytes(path: str) -> bytes:
    """The file's bytes (raises ``OSError`` when it cannot be read)."""
    with open(path, "rb") as fh:
        return fh.read()


def plan(args: ScriptArgs, host: HostView) -> Plan:
    """Upload the script (mode 0700) into ``<run_dir>/scripts/`` and run it; with ``check_args``,
    first run it read-only (fed on stdin, in every mode) and fail with its line if that fails."""
    src = host.local_path(args.src)
    interpreter = args.interpreter or host.python
    if args.check_args is not None:
        text = yield Local(fn=_read_bytes, args=(str(src),), reason="the script, fed to its read-only check")
        if isinstance(text, BaseException):
            return TaskResult(Status.FAILED, msg=f"script: cannot read {src}: {text}")
        checked = yield Run(argv=(interpreter, "-", *args.check_args), env=args.env, stdin=text, mutating=False,
                            quiet=True, answer_ahead=False, timeout_s=120.0,
                            reason="the script's read-only check (what the real run would refuse)")
        if checked.rc != 0:
            out = result_of(checked)  # the real run's words: it would fail the same way
            out.data["decision"] = {"action": "fail", "why": "the script's read-only check failed"}
            return out
    remote = host.remote_script(posixpath.basename(str(src)))
    err = yield Put(local=str(src), remote=remote, mode=0o700, reason="the script travels as a file")
    if err is not None:
        return TaskResult(Status.FAILED, msg=f"script: {err}")
    res = yield Run(argv=(interpreter, remote, *args.args), env=args.env)
    out = result_of(res)
    out.data["decision"] = {"action": "run"}
    return out


#: What ``--plan`` shows for the task (the playbook reference prints it).
PLAN_SHOWS = (
    "`run`: the script is uploaded and run on apply; `--dry-run` lists the upload and the argv. With "
    "`check_args`, `fail` with the script's own line when its read-only run (asked in every mode) fails."
)

#: An example task (the playbook reference prints it; a test parses it).
EXAMPLE = """\
- name: Check the host's GPUs with a local script
  script:
    src: scripts/check_gpus.py
    args: [--min-memory-mib, 40000]
  register: gpu_check
"""

ACTION = Action(name="script", args=ScriptArgs, phase="command", timeout_s=600.0, plan=plan,
                plan_shows=PLAN_SHOWS, example=EXAMPLE)
