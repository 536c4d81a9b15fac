"""How a command's run ends, finished or interrupted: the engine runs under :func:`run_async`, and
the command's ``--json`` document is written here, at its one place, whichever way the run ended
(a command gives it as its :class:`RunEnd`'s ``document``).

Exit status (docs/contracts.md): SIGINT (Ctrl-C) exits 130, SIGTERM 143, after the run was wound
down (remote commands stopped, hosts marked ``interrupted`` or ``not started``, the record closed)
and, with ``--json``, its document printed on stdout: the nightly job (``fleetctl schedule``'s
``timeout``, which ends it with SIGTERM) still leaves the summary that an alert reads (operator
trial: stdout was 0 bytes).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Any

import click

from .app import collect_as_usual

#: ``document(run, result)``: writes the command's one JSON document on stdout; ``result`` is what
#: the run's coroutine returned, None when the run was interrupted (the hosts' statuses say which).
Document = Callable[[Any, Any], None]


class RunEnd:
    """An observer keeping the run it is told about, so that an interrupted command can still end
    with the counts line and its ``--json`` document (:func:`run_async`).

    Args:
        document: with ``--json``, the command's document writer (:data:`Document`); None without.
    """

    def __init__(self, document: Document | None = None) -> None:
        self.run = None
        self.document = document

    def event(self, run, event) -> None:
        self.run = run

    def write(self, result: Any) -> None:
        """The ``--json`` document, when the command asked for one and a run began."""
        if self.document is not None and self.run is not None:
            self.document(self.run, result)


def run_async(coro, ends: RunEnd | None = None):
    """Run the engine and return what ``coro`` returned, after writing ``ends``' ``--json``
    document. SIGINT (Ctrl-C) exits 130, SIGTERM 143: both cancel the run, which stops the remote
    commands (their channels close, see fleetctl.connection.command) and marks the run record
    interrupted before exiting. With ``ends`` (a :class:`RunEnd` among the run's observers), an
    interrupted command ends as a finished one does (README): ``fleetctl: interrupted (SIGINT)``,
    then the counts line on stderr, ``ok N, failed N, unreachable N`` (then ``not started N``,
    ``interrupted N``: :func:`fleetctl.reporting.gathered.summary_line`), then, with ``--json``,
    its document on stdout (each host's status; a playbook run's ``status`` is ``interrupted``).

    A second signal while the run winds down hastens it as before (SIGTERM cancels the run again,
    a second SIGINT is asyncio's KeyboardInterrupt); the document is still written after it. A
    signal while the document is written ends at once: SIGINT exits 130, SIGTERM kills the process
    (its default action, 143 to a shell), the document cut short."""
    collect_as_usual()
    terminated = False

    def mark(name: str) -> None:
        """Say in the run's record which signal stopped it (``interrupted_by``): the exit status a
        report shows. SIGINT wins (any Ctrl-C ends it 130), SIGTERM only when no SIGINT came first."""
        run = ends.run if ends is not None else None
        if run is not None and (name == "SIGINT" or run.interrupted_by is None):
            run.interrupted_by = name

    async def main():
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def on_term() -> None:
            nonlocal terminated
            terminated = True
            mark("SIGTERM")
            task.cancel()

        # asyncio.run's own SIGINT handler (it cancels this task) stays in charge; this one only
        # notes the signal first, and is put back before asyncio.run restores the default
        runner_int = signal.getsignal(signal.SIGINT)
        on_int = None
        if callable(runner_int) and threading.current_thread() is threading.main_thread():
            def on_int(signum, frame):
                mark("SIGINT")
                return runner_int(signum, frame)

            signal.signal(signal.SIGINT, on_int)
        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            return await coro
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            if on_int is not None and signal.getsignal(signal.SIGINT) is on_int:
                signal.signal(signal.SIGINT, runner_int)

    def stopped(line: str, code: int) -> "click.exceptions.Exit":
        click.echo(line, err=True)
        if ends is not None and ends.run is not None:
            from ..reporting.gathered import summary_line

            click.echo(summary_line(ends.run.hosts, ends.run.record_cut), err=True)
            try:
                ends.write(None)
            except KeyboardInterrupt:  # the operator insists: the document stays cut short
                pass
        return click.exceptions.Exit(code)

    try:
        result = asyncio.run(main())
    except KeyboardInterrupt:
        raise stopped("fleetctl: interrupted (SIGINT)", 130) from None
    except asyncio.CancelledError:
        if terminated:
            raise stopped("fleetctl: terminated (SIGTERM)", 143) from None
        raise
    if ends is not None:
        ends.write(result)
    return result


def record_cut(record) -> bool:
    """Whether ``record`` (the run's :class:`~fleetctl.reporting.record.RunRecord`) could not be
    written in full (a full disk: :mod:`fleetctl.reporting.recordcut`); if so, its one error line
    on stderr, naming the runs folder, its free space and the cut logs. The command then exits
    non-zero whatever its hosts did: a run that lost its record is never ok (operator trial: rc 0)."""
    message = record.cut.message(record.dir.parent) if record is not None else None
    if message:
        click.echo(f"fleetctl: error: {message}", err=True)
    return message is not None
