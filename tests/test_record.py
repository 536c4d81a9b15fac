"""The run record as an observer: every byte kept across its timer flushes, run.json rewritten
from cached host parts yet always equal to the whole run serialized at once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from fleetctl.connection.base import OutputLine
from fleetctl.engine.model import Event, RunModel, TaskOutcome
from fleetctl.reporting.record import RunRecord


def _finish(record: RunRecord, run: RunModel, host: str, **fields) -> None:
    out = run.host(host)
    out.status = "ok"
    out.tasks.append(TaskOutcome(name="t", action="command", phase="command", status="ok"))
    for k, v in fields.items():
        setattr(out, k, v)
    record.event(run, Event(name="host.finished", host=host, data={"status": "ok"}))


def test_run_json_from_cached_host_parts_equals_the_whole_run(tmp_path):
    run = RunModel(kind="deploy")
    record = RunRecord(run, root=tmp_path)
    path = tmp_path / run.run_id / "run.json"

    def whole() -> str:
        return json.dumps(run.as_json(), indent=2, default=str) + "\n"

    for i in range(5):
        _finish(record, run, f"h{i}", facts={"gpus": [], "note": f"token-value-{i}"}, error=None)
    run.host("h5").status = "running"  # not finished: never cached
    record.save(force=True)
    assert path.read_text() == whole()
    run.host("h5").error = "changed while running"
    record.save(force=True)
    assert path.read_text() == whole()
    # a secret learnt later is masked in hosts already written too
    run.redactor.add({"token-value-3"})
    record.save(force=True)
    assert "token-value-3" not in path.read_text() and path.read_text() == whole()
    record.close(run)
    assert path.read_text() == whole()
    assert json.loads(path.read_text())["hosts"]["h1"]["facts"]["note"] == "token-value-1"


def test_no_byte_is_lost_between_flushes_on_a_normal_exit_or_ctrl_c(tmp_path):
    # a process that writes lines and events, then exits without closing the record, or is
    # interrupted: everything it wrote is in the files
    code = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from fleetctl.connection.base import OutputLine
        from fleetctl.engine.model import Event, RunModel
        from fleetctl.reporting.record import RunRecord
        run = RunModel(kind="run", run_id=sys.argv[1])
        record = RunRecord(run, root=Path({str(tmp_path)!r}))
        for i in range(2000):
            record.line(run, "h", OutputLine("stdout", b"line %d\\n" % i))
            record.event(run, Event(name="note.added", host="h", data={{"message": str(i)}}))
        if sys.argv[2] == "ctrl-c":
            os.kill(os.getpid(), signal.SIGINT)
    """)
    for how in ("exit", "ctrl-c"):
        run_id = f"r-{how}"
        proc = subprocess.run([sys.executable, "-c", code, run_id, how], capture_output=True, text=True)
        assert proc.returncode == (0 if how == "exit" else -2), proc.stderr  # -SIGINT: KeyboardInterrupt
        log = (tmp_path / run_id / "logs" / "h.log").read_bytes().splitlines()
        assert log == [b"out| line %d" % i for i in range(2000)]
        events = (tmp_path / run_id / "events.jsonl").read_text().splitlines()
        assert [json.loads(e)["message"] for e in events] == [str(i) for i in range(2000)]


def test_lines_written_then_closed_are_all_there(tmp_path):
    run = RunModel(kind="run")
    record = RunRecord(run, root=tmp_path)
    for i in range(100):
        record.line(run, "h", OutputLine("stderr" if i % 2 else "stdout", b"x%d\n" % i))
    record.close(run)
    log = (tmp_path / run.run_id / "logs" / "h.log").read_bytes()
    assert log.count(b"\n") == 100 and log.startswith(b"out| x0\nerr| x1\n")


def test_what_a_host_says_after_the_record_closed_is_written_all_the_same(tmp_path):
    """Ctrl-C: a host's cancellation may finish (its running task marked interrupted) after the run
    was closed; its event, its log marker, its last lines and its task in run.json are kept."""
    run = RunModel(kind="deploy")
    record = RunRecord(run, root=tmp_path)
    folder = tmp_path / run.run_id
    _finish(record, run, "h1")
    run.host("h2").status = "running"
    record.close(run)
    run.host("h2").tasks.append(TaskOutcome(name="Build", action="build_wheel", phase="build", status="interrupted"))
    record.line(run, "h2", OutputLine("stdout", b"[42/97] nvcc kernel.cu\n"))
    record.event(run, Event(name="task.finished", host="h2", data={"task": "Build", "status": "interrupted"}))
    events = [json.loads(ln) for ln in (folder / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "task.finished" and events[-1]["host"] == "h2"
    log = (folder / "logs" / "h2.log").read_bytes()
    assert b"out| [42/97] nvcc kernel.cu\n" in log and b"==> Build: INTERRUPTED" in log
    saved = json.loads((folder / "run.json").read_text())
    assert [t["status"] for t in saved["hosts"]["h2"]["tasks"]] == ["interrupted"]
    record.close(run)  # closing again is harmless
