"""What the API's operations return: :class:`RunResult` (one run: a mapping host name ->
:class:`HostResult`) over the run model the CLI records (:class:`~fleetctl.engine.model.RunModel`).

Host failures are never exceptions: they are results with ``status`` ``"failed"`` or
``"unreachable"``; :meth:`RunResult.raise_for_status` turns them into one when wanted.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HostsFailed
from .facts import HostFacts


@dataclass(frozen=True)
class HostResult:
    """One host's part of a run.

    Attributes:
        host: the inventory name.
        status: the host's status as run.json and ``--json`` hold it
            (:data:`fleetctl.engine.model.HostStatus`, docs/contracts.md): ``"ok"``,
            ``"failed"``, ``"unreachable"``, ``"not started"`` (an earlier batch failed past
            ``max_fail_percentage``, or the run was interrupted before it) or ``"interrupted"``
            (stopped by Ctrl-C/SIGTERM while in progress).
        error: for a failure, one line (the failing task and its cause); else None.
        rc: ``run``: the command's exit status (None when it did not exit: a signal, a timeout,
            unreachable).
        signal: ``run``: the signal that ended the command (``"TERM"``), if one did.
        stdout, stderr: ``run``: the command's output as text (the last MiB of each stream; the
            run record's log keeps every byte), secrets redacted; ``""`` otherwise.
        duration_s: seconds the host took.
        facts: the host's typed facts (:class:`~fleetctl.api.facts.HostFacts`): in a ``facts``
            run every host has them (an unreachable one ``status="unreachable"``, no facts); in a
            play, a host that gathered them; else None (``run``, ``copy``, ``fetch``).
        files: ``copy``/``fetch``: one ``{"src", "dest", "bytes"}`` per file moved (``dest`` on the
            host for copy, here for fetch).
        bytes: ``copy``/``fetch``: the bytes moved.
        outcome: the host's :class:`~fleetctl.engine.model.HostOutcome` as recorded (tasks,
            phases, environment...).
    """

    host: str
    status: str
    error: str | None = None
    rc: int | None = None
    signal: str | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    facts: HostFacts | None = None
    files: tuple[dict[str, Any], ...] = ()
    bytes: int = 0
    outcome: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the host succeeded."""
        return self.status == "ok"

    @property
    def tasks(self) -> list[Any]:
        """The host's :class:`~fleetctl.engine.model.TaskOutcome` list, in the order they ran."""
        return list(self.outcome.tasks) if self.outcome is not None else []


class RunResult(Mapping[str, HostResult]):
    """One run: ``result["gpu01"]`` is that host's :class:`HostResult`, in inventory order.

    Attributes:
        run_id: the run's id; its record is ``<state>/runs/<run_id>/`` (``fleetctl runs show``).
        kind: ``run``, ``facts``, ``deploy``, ``verify``, ``rollback``, ``copy`` or ``fetch``.
        mode: ``apply``, ``plan`` or ``dry-run``.
        status: ``ok`` (every host ok), ``failed`` or ``interrupted``.
        record_dir: the run record's folder.
        model: the whole :class:`~fleetctl.engine.model.RunModel`.
    """

    def __init__(self, model: Any, record_dir: Path, outputs: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.model = model
        self.record_dir = Path(record_dir)
        redact = model.redactor.text
        self._hosts: dict[str, HostResult] = {}
        for name, out in model.hosts.items():
            stdout, stderr = (outputs or {}).get(name, ("", ""))
            facts = HostFacts.from_outcome(name, out) if out.facts is not None else None
            self._hosts[name] = HostResult(
                host=name, status=out.status, error=redact(out.error) if out.error else None,
                rc=out.rc, signal=out.signal, stdout=redact(stdout), stderr=redact(stderr),
                duration_s=out.duration_s, facts=facts, files=tuple(getattr(out, "files", None) or ()),
                bytes=int(getattr(out, "bytes", None) or 0), outcome=out)

    run_id = property(lambda self: self.model.run_id, doc="The run's id.")
    kind = property(lambda self: self.model.kind, doc="The run's kind: ``run``, ``facts``, ``deploy``, ``verify``, "
                    "``rollback``, ``copy`` or ``fetch``.")
    mode = property(lambda self: self.model.mode, doc="``apply``, ``plan`` or ``dry-run``.")
    status = property(lambda self: self.model.status, doc="``ok``, ``failed`` or ``interrupted``.")

    def __getitem__(self, host: str) -> HostResult:
        return self._hosts[host]

    def __iter__(self) -> Iterator[str]:
        return iter(self._hosts)

    def __len__(self) -> int:
        return len(self._hosts)

    @property
    def ok(self) -> bool:
        """True when every host succeeded (and the run was not stopped)."""
        return self.model.status == "ok" and all(h.ok for h in self._hosts.values())

    @property
    def succeeded(self) -> list[str]:
        """Hosts that succeeded, in order."""
        return [h for h, r in self._hosts.items() if r.status == "ok"]

    @property
    def failed(self) -> list[str]:
        """Hosts that failed (reached, then a task or the command failed), in order; hosts not
        started or interrupted are apart (:attr:`not_started`, :attr:`interrupted`)."""
        return [h for h, r in self._hosts.items() if r.status == "failed"]

    @property
    def not_started(self) -> list[str]:
        """Hosts the run never started on (a failed batch stopped the later ones; an interrupted
        run had not reached them), in order."""
        return [h for h, r in self._hosts.items() if r.status == "not started"]

    @property
    def interrupted(self) -> list[str]:
        """Hosts a Ctrl-C or SIGTERM stopped while they were in progress, in order."""
        return [h for h, r in self._hosts.items() if r.status == "interrupted"]

    @property
    def unreachable(self) -> list[str]:
        """Hosts that could not be reached or logged in to, in order."""
        return [h for h, r in self._hosts.items() if r.status == "unreachable"]

    @property
    def plan(self) -> dict[str, dict[str, Any]]:
        """``mode="plan"``: per host what ``fleetctl deploy --plan --json`` prints: ``status``,
        ``error``, ``builds`` (each ``action``: ``build``, ``push``, ``reinstall``, ``skip``, and
        the ``changed`` inputs) and ``tasks``. Empty for other runs."""
        if self.model.mode != "plan":
            return {}
        from ..reporting.plan_table import plan_rows

        return plan_rows(self.model.as_json()["hosts"])

    @property
    def facts(self) -> dict[str, HostFacts]:
        """host -> its typed facts, for the hosts that have them."""
        return {h: r.facts for h, r in self._hosts.items() if r.facts is not None}

    def raise_for_status(self) -> "RunResult":
        """Raise when any host failed or was unreachable; else return this result.

        Raises:
            HostsFailed: naming the counts by status and each bad host's error (``run R: 1 of 4
                host(s) failed, 3 not started: gpu03: unreachable: connection refused; ...``):
                failed and unreachable hosts count as failed, ``interrupted`` and ``not
                started`` ones each by their own status, never as failed (operator trial: "4 of
                4 host(s) failed" for 1 failed and 3 not started).
        """
        bad = [r for r in self._hosts.values() if not r.ok]
        if not bad and self.model.status == "ok":
            return self
        lines = "; ".join(f"{r.host}: {r.status}: {r.error}" if r.error else f"{r.host}: {r.status}" for r in bad)
        raise HostsFailed(f"run {self.run_id}: {_bad_counts(bad, len(self)) if bad else f'run {self.model.status}'}"
                          + (f": {lines}" if lines else ""), self)

    def summary(self) -> str:
        """``ok N, failed N, unreachable N`` (then ``not started N``, ``interrupted N`` when
        any): the CLI's summary line (:func:`fleetctl.reporting.gathered.summary_line`)."""
        from ..reporting.gathered import summary_line

        return summary_line(self.model.hosts, self.model.record_cut)

    def __repr__(self) -> str:
        return f"<RunResult {self.run_id} {self.kind} {self.mode} {self.status}: {self.summary()}>"

    def _lines(self) -> list[str]:
        rows = []
        for r in self._hosts.values():
            detail = f" rc={r.rc}" if r.rc is not None else ""
            rows.append(f"  {r.host}: {r.status}{detail}" + (f": {r.error}" if r.error and not r.ok else ""))
        return rows

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython
        p.text(repr(self) if cycle else "\n".join([repr(self), *self._lines()]))

    def _repr_html_(self) -> str:  # Jupyter
        e = html.escape
        head = (f"<p><b>run {e(self.run_id)}</b> {e(self.kind)} ({e(self.mode)}): {e(self.status)}; "
                f"{e(self.summary())}</p>")
        rows = "".join(
            f"<tr><td>{e(r.host)}</td><td>{e(r.status)}</td><td>{'' if r.rc is None else r.rc}</td>"
            f"<td>{e(r.error or '')}</td><td><pre>{e(r.stdout[-2000:])}</pre></td></tr>" for r in self._hosts.values())
        return (head + "<table><thead><tr><th>host</th><th>status</th><th>rc</th><th>error</th><th>stdout</th>"
                f"</tr></thead><tbody>{rows}</tbody></table>")


def _bad_counts(bad: list[HostResult], total: int) -> str:
    """``1 of 4 host(s) failed, 3 not started``: the hosts of ``bad`` counted by status (failed
    and unreachable together as failed, then interrupted, not started, any other), the first of
    ``total``."""
    counts: dict[str, int] = {}
    for r in bad:
        key = "failed" if r.status in ("failed", "unreachable") else r.status
        counts[key] = counts.get(key, 0) + 1
    order = ["failed", "interrupted", "not started"]
    parts = sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    first, *rest = parts
    return ", ".join([f"{first[1]} of {total} host(s) {first[0]}", *(f"{n} {status}" for status, n in rest)])
