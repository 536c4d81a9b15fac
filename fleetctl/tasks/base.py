"""What a task executor gets (:class:`TaskContext`) and returns (:class:`TaskResult`).

Task executors never print: every line a command prints goes to the run record and to the live
display through the context, and the result carries the status.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..connection import CommandResult, OutputLine
from ..runrecord import RunRecord
from ..session import HostSession
from ..status import Status

_NINJA = re.compile(rb"^\[(\d+)/(\d+)\]")


@dataclass
class TaskResult:
    """A task's outcome on one host.

    Attributes:
        status: OK / CHANGED / FAILED / SKIPPED / UNREACHABLE.
        msg: one line for the summary (the first error line of a failure).
        rc: the exit status of the decisive command, if any.
        data: action-specific results (``wheel``, ``archs``...), visible to later tasks via ``register``.
    """

    status: Status
    msg: str = ""
    rc: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""

    def as_registered(self) -> dict[str, Any]:
        """The value ``register:`` stores: status, rc, msg, stdout, stderr, data, and the flags
        ``changed``, ``failed``, ``skipped`` (Ansible's names)."""
        return {
            "status": self.status.value, "rc": self.rc, "msg": self.msg, "stdout": self.stdout,
            "stderr": self.stderr, "data": self.data, "changed": self.status is Status.CHANGED,
            "failed": self.status.is_failure, "skipped": self.status is Status.SKIPPED,
        }


@dataclass
class TaskContext:
    """A running task's view of its host.

    Attributes:
        session: the host session (connection, folders, facts, registered results).
        record: the run record (lines and events are written there).
        task_label: the task's display name, for log markers.
        timeout_s: the task's deadline in seconds; commands get what is left of it.
        env: the task's ``env`` (rendered), added to every command it runs.
        become: run the task's commands through ``sudo -n`` (see :meth:`Connection.run`).
        dry_run: record commands instead of running them.
        on_line: live display of output lines.
        on_progress: ``(host, done, total)`` for ninja's ``[k/N]`` lines.
        playbook_dir: local folder the playbook's relative paths resolve against.
    """

    session: HostSession
    record: RunRecord
    task_label: str
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    become: bool = False
    dry_run: bool = False
    on_line: Callable[[str, OutputLine], None] | None = None
    on_progress: Callable[[str, int, int], None] | None = None
    playbook_dir: str = "."
    planned: list[dict[str, Any]] = field(default_factory=list)
    coordinator: Any = None  # fleetctl.buildclass.BuildCoordinator of the run, for build: once

    @property
    def host(self) -> str:
        return self.session.host.name

    @property
    def facts(self) -> dict[str, Any]:
        return self.session.facts

    def _line(self, line: OutputLine) -> None:
        self.record.line(self.host, line)
        if self.on_line:
            self.on_line(self.host, line)
        if self.on_progress:
            m = _NINJA.match(line.data)
            if m:
                self.on_progress(self.host, int(m.group(1)), int(m.group(2)))

    async def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                  timeout_s: float | None = None, quiet: bool = False, mutating: bool = True) -> CommandResult:
        """Run a command on the host with the task's env added, streaming its lines.

        ``quiet`` keeps lines out of the live display (they still go to the host log).
        ``mutating=False`` marks a read-only probe, which runs even in dry-run mode.
        """
        full_env = {**self.env, **(env or {})}
        if self.dry_run and mutating:
            self.planned.append({"argv": list(argv), "env": full_env, "cwd": cwd, "become": self.become})
            return CommandResult(argv=list(argv), rc=0)
        self.record.event("command.started", host=self.host, argv=list(argv), cwd=cwd)
        saved = self.on_line
        if quiet:
            self.on_line = None
        try:
            res = await self.session.conn.run(argv, env=full_env or None, cwd=cwd, become=self.become,
                                              timeout_s=timeout_s or self.timeout_s, on_line=self._line)
        finally:
            self.on_line = saved
        self.record.event("command.finished", host=self.host, argv0=argv[0], rc=res.rc, signal=res.signal,
                          duration_s=round(res.duration_s, 3))
        return res

    async def put(self, local: str, remote: str, *, mode: int | None = None) -> None:
        """Upload a file (recorded, not done, in dry-run mode)."""
        if self.dry_run:
            self.planned.append({"upload": local, "to": remote})
            return
        await self.session.conn.put(local, remote, mode=mode)

    async def put_json(self, remote: str, data: Any) -> None:
        """Write a small JSON document (stamps, install records) to the host, mode 0600."""
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(data, fh)
        try:
            await self.put(fh.name, remote, mode=0o600)
        finally:
            os.unlink(fh.name)

    def build_tool(self, requested: str) -> tuple[str, str | None]:
        """``("uv", path)`` when ``requested`` is ``uv``, or ``auto`` and the host has uv; else
        ``("pip", path-or-None)``. The path is uv's, from facts."""
        uv = (self.facts.get("uv") or {}).get("path")
        return ("uv" if requested == "uv" or (requested == "auto" and uv) else "pip"), uv


def first_error_line(res: CommandResult) -> str:
    """The most telling line of a failed command: the last ``error``-looking line, else the last line."""
    text = (res.stderr_text + "\n" + res.stdout_text).strip().splitlines()
    for line in reversed(text):
        if re.search(r"error|fatal|failed|not found|killed|Traceback", line, re.I):
            return line.strip()[:300]
    return text[-1].strip()[:300] if text else f"exit status {res.rc}"
