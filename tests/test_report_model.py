"""The report's summary, metrics and terminal tables as data: no hosts, no browser (fast)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from fleetctl.engine.model import HostOutcome, PhaseSpan, RunModel, TaskOutcome
from fleetctl.reporting.html import render
from fleetctl.reporting.logscan import first_error_line, read_tail
from fleetctl.reporting.metrics import registry_for, write_metrics
from fleetctl.reporting.identity import without_identity
from fleetctl.reporting.report_model import load_report
from fleetctl.reporting.timeaxis import nice_ticks
from fleetctl.reporting.tables import folded_notes, print_facts, print_summary


def build_task(key: str, action: str, status: str = "changed", pushed_from: str | None = None) -> TaskOutcome:
    data = {"key": key, "archs": "9.0a", "sha256": "ab" * 32, "wheel": "/w/toy-0.1-py3-none-any.whl",
            "decision": {"action": action, "key": key}}
    if pushed_from:
        data["pushed_from"] = pushed_from
    return TaskOutcome(name="build", action="build_wheel", phase="build", status=status, data=data)


def write_record(tmp: Path, run: RunModel, logs: dict[str, bytes]) -> Path:
    d = tmp / run.run_id
    (d / "logs").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(run.as_json()))
    (d / "events.jsonl").write_text(
        json.dumps({"event": "note.added", "host": "gpu01", "message": "max_jobs 2 = min(cpus 2, memory 9000 MiB // "
                    "6144 MiB per job), at least 1"}) + "\n"
        + json.dumps({"event": "note.added", "host": "gpu02", "message": "max_jobs 2 = min(cpus 2, memory 9100 MiB "
                      "// 6144 MiB per job), at least 1"}) + "\n")
    for h, data in logs.items():
        (d / "logs" / f"{h}.log").write_bytes(data)
    return d


def sample_run() -> RunModel:
    run = RunModel(kind="deploy", command=["fleetctl", "deploy", "--hosts", "gpus"], user="ops", controller="ctl",
                   playbook="/p/nightly.yaml", started="2026-12-01T02:30:00+00:00",
                   finished="2026-12-01T02:40:00+00:00", status="failed")
    run.inventory = {"hosts": {f"gpu0{i}": {"ansible_host": f"10.0.0.{i}", "ansible_port": 22} for i in range(1, 6)}}
    ok_spans = [PhaseSpan(phase="connect", start_s=0, duration_s=0.2, status="ok"),
                PhaseSpan(phase="build", start_s=1, duration_s=300, status="changed")]
    run.hosts["gpu01"] = HostOutcome(status="ok", duration_s=301, phases=ok_spans, tasks=[build_task("k1", "build")])
    run.hosts["gpu02"] = HostOutcome(status="ok", duration_s=20, phases=ok_spans[:1],
                                     tasks=[build_task("k1", "push", pushed_from="gpu01")])
    run.hosts["gpu03"] = HostOutcome(status="failed", error="build: build failed (pip): kernel.cu(3): error: oops",
                                     phases=ok_spans[:1], tasks=[build_task("k2", "build", status="failed")])
    for h in ("gpu04", "gpu05"):
        run.hosts[h] = HostOutcome(status="unreachable", started="2026-12-01T02:30:01+00:00", duration_s=3,
                                   error=f"connection refused by 10.0.0.{h[-1]}:22")
    return run


def test_report_folds_causes_classes_tails_and_notes(tmp_path):
    logs = {"gpu01": b"==> task 1/1: build\nout| [1/1] ok\n", "gpu02": b"==> task 1/1: build\nout| [1/1] ok\n",
            "gpu03": b"==> task 1/1: build\nerr| kernel.cu(3): error: oops <b>\nerr| kernel.cu(9): error: two\n"}
    r = load_report(write_record(tmp_path, sample_run(), logs))
    assert r.exit_status == 1 and dict(r.host_counts) == {"ok": 2, "failed": 1, "unreachable": 2}
    causes = {c.folded: (c.status, c.text, c.first_error) for c in r.causes}
    assert causes["gpu[04-05]"] == ("unreachable", "connection refused by <host>", None)
    assert causes["gpu03"][2] == "kernel.cu(3): error: oops <b>"
    (k1,) = [c for c in r.classes if c.key == "k1"]
    assert k1.built_on == ["gpu01"] and k1.pushed == "gpu02"
    assert [t.folded for t in r.tails if len(t.hosts) > 1] == ["gpu[01-02]"]
    assert [n.text for n in r.notes] == ["max_jobs 2 = min(cpus 2, memory \u2026 MiB // 6144 MiB per job), at least 1"]
    unreachable = next(h for h in r.hosts if h.name == "gpu04")
    assert [b.phase for b in unreachable.bars] == ["connect"]  # one bar, from its start and duration
    page = render(r)
    assert "kernel.cu(3): error: oops &lt;b&gt;" in page and "<b>\n" not in page


def test_identity_is_taken_out_only_as_a_whole_name():
    assert without_identity("gpu1 and gpu10 at 10.0.0.1:22", ["10.0.0.1:22", "gpu1"]) == "<host> and gpu10 at <host>"


def test_ticks_cover_the_axis():
    ticks = nice_ticks(600)
    assert ticks[0] == (0.0, "0 min") and ticks[-1][0] <= 100 and len(ticks) <= 7


def test_log_tail_reads_only_the_end_and_first_error_of_the_last_task(tmp_path):
    log = tmp_path / "h.log"
    log.write_bytes(b"==> task 1/2: a\nerr| old.c:1:1: error: from an earlier task\n==> task 2/2: b\n"
                    + b"out| x\n" * 100_000 + b"err| nvcc fatal   : Unsupported gpu architecture 'compute_99'\n")
    lines, cut, size = read_tail(log, 3)
    assert cut and size == log.stat().st_size and lines[-1].startswith("nvcc fatal")
    assert first_error_line(log) == "nvcc fatal   : Unsupported gpu architecture 'compute_99'"


def test_metrics_keep_the_last_success_and_label_each_host(tmp_path):
    run = sample_run()
    prom = tmp_path / "fleetctl.prom"
    ok = RunModel.model_validate(run.as_json())
    ok.status = "ok"
    write_metrics(ok.as_json(), prom)
    t_ok = [s.value for f in text_string_to_metric_families(prom.read_text()) for s in f.samples
            if s.name == "fleetctl_last_success_timestamp_seconds"]
    write_metrics(run.as_json(), prom)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
    assert samples[("fleetctl_last_success_timestamp_seconds", (("file", "fleetctl.prom"), ("playbook", "nightly")))] == t_ok[0]
    assert samples[("fleetctl_run_success", (("file", "fleetctl.prom"), ("playbook", "nightly")))] == 0
    assert samples[("fleetctl_host_status", (("file", "fleetctl.prom"), ("host", "gpu04"), ("playbook", "nightly"),
                                        ("status", "unreachable")))] == 1
    assert samples[("fleetctl_host_phase_duration_seconds", (("file", "fleetctl.prom"), ("host", "gpu01"),
                                                               ("phase", "build"), ("playbook", "nightly")))] == 300
    # a dry run never counts as a success
    dry = RunModel.model_validate(ok.as_json())
    dry.mode = "dry-run"
    reg = registry_for(dry.as_json())
    assert reg.get_sample_value("fleetctl_run_success", {"playbook": "nightly"}) == 0


def test_two_jobs_of_one_playbook_write_no_series_twice_into_one_textfile_folder(tmp_path):
    """Operator trial: two scheduled jobs of one playbook (hello-a to h1, hello-b to d1), each with its own
    file now, wrote series with the same names and labels; node_exporter serves a series once and
    errors on the second file's ("was collected before with the same name and label values",
    prometheus/node_exporter#753). Each series carries its file's name: none is in both files."""
    run = sample_run()
    seen: dict[tuple, str] = {}
    twice = []
    for name in ("hello-a.prom", "hello-b.prom"):
        write_metrics(run.as_json(), tmp_path / name)
        for f in text_string_to_metric_families((tmp_path / name).read_text()):
            for s in f.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                if key in seen:
                    twice.append(key)
                seen[key] = name
                assert s.labels.get("file") == name
    assert twice == []


def console(width: int = 80) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None), buf


FACTS = {
    "localhost-with-a-long-name-01": {
        "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "compute_cap": "12.0"}],
        "cuda": {"version": "13.0", "home": "/usr/local/cuda-13.0"},
        "python": {"version": "3.12.3", "torch": "2.13.0.dev20261130+cu130", "torch_cuda": "13.0"},
        "build": {"torch_cuda_arch_list": "9.0a;10.0a;12.0a", "max_jobs": 8,
                  "notes": ["max_jobs 8 = min(cpus 64, memory 52000 MiB // 6144 MiB per job), at least 1"]},
        "cpu_count": 64, "mem_total_mib": 515000, "disk_free_mib": 900000},
    "localhost-with-a-long-name-02": {"reachable": False, "error": "connection refused by 10.1.2.3:22 " + "x" * 120},
}


def test_facts_at_80_columns_cut_nothing_that_identifies_a_host():
    c, buf = console(80)
    print_facts(c, FACTS)
    out = buf.getvalue()
    for whole in ("localhost-with-a-long-name-01", "9.0a;10.0a;12.0a", "2.13.0.dev20261130+cu130",
                  "localhost-with-a-long-name-02: UNREACHABLE: connection refused by 10.1.2.3:22 " + "x" * 120):
        assert whole in out.replace("\n", "") if whole.endswith("x") else whole in out, whole
    assert "\u2026" not in out
    c, buf = console(250)
    print_facts(c, FACTS)
    assert "┃ host" in buf.getvalue()  # wide enough: a table
    # each host's line already shown (fleetctl facts): no block repeats its cells; failures still said
    c, buf = console(80)
    print_facts(c, FACTS, lines_shown=True)
    assert "localhost-with-a-long-name-01" not in buf.getvalue(), buf.getvalue()
    assert "localhost-with-a-long-name-02: UNREACHABLE: connection refused" in buf.getvalue()
    c, buf = console(250)
    print_facts(c, FACTS, lines_shown=True)
    assert "┃ host" in buf.getvalue()


def test_max_jobs_note_folds_and_hides_behind_verbose():
    facts = {f"gpu0{i}": {"build": {"notes": [f"max_jobs 2 = min(cpus 2, memory {9000 + i} MiB // 6144 MiB per "
                                              "job), at least 1", "no GPU found"]}} for i in range(1, 4)}
    assert folded_notes(facts) == ["gpu[01-03]: no GPU found"]
    assert folded_notes(facts, verbose=True)[0] == ("gpu[01-03]: max_jobs 2 = min(cpus 2, memory \u2026 MiB // 6144 "
                                                    "MiB per job), at least 1")


def test_summary_puts_causes_on_lines_of_their_own():
    results = {"a-very-long-host-name-number-0001": {"status": "failed", "duration_s": 3, "error": "E " * 60,
                                                     "tasks": [{"status": "ok"}, {"status": "failed"}]},
               "gpu02": {"status": "unreachable", "duration_s": 0, "error": "connection refused",
                         "tasks": [{"status": "unreachable"}] * 4}}
    c, buf = console(80)
    print_summary(c, results, "RUN")
    out = buf.getvalue()
    assert "a-very-long-host-name-number-0001" in out and "\u2026" not in out
    assert "gpu02: UNREACHABLE: connection refused" in out and "UUUU" not in out


def test_ticks_are_at_a_clocks_nice_steps_and_read_as_people_read_time():
    """No ``0.833333 min``: steps of 30 s, 1, 5, 15 min, 1 h...; a unit only where the ticks are
    whole or half units of it (issue 24)."""
    assert [label for _, label in nice_ticks(130)] == ["0 s", "30 s", "1 min", "1.5 min", "2 min"]
    assert [label for _, label in nice_ticks(50)] == ["0 s", "10 s", "20 s", "30 s", "40 s", "50 s"]
    assert [label for _, label in nice_ticks(9000)] == ["0 min", "30 min", "1 h", "1.5 h", "2 h", "2.5 h"]
    for axis in (0.7, 3, 59, 61, 100, 130, 200, 333, 400, 1000, 4000, 9000, 50000, 400000):
        ticks = nice_ticks(axis)
        assert 3 <= len(ticks) <= 7 and ticks[0][0] == 0.0 and ticks[-1][0] <= 100.0, (axis, ticks)
        for _, label in ticks:
            number = label.split()[0]
            assert len(number.split(".")[-1]) <= 1 if "." in number else True, (axis, label)


def test_an_interrupted_runs_exit_status_is_its_signals_and_older_records_keep_the_old_words(tmp_path):
    """Fresh trial: a SIGTERM'd run exits 143, the report said 130 for every interrupted run; now the
    record's ``interrupted_by`` decides, and a record without it reads as before."""
    shown = {}
    for by in ("SIGTERM", "SIGINT", None):
        run = sample_run()
        run.status, run.interrupted_by = "interrupted", by
        doc = run.as_json()
        if by is None:
            del doc["interrupted_by"]  # written before the field was kept
        d = tmp_path / str(by)
        (d / "logs").mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(doc))
        r = load_report(d)
        shown[by] = (r.exit_status, r.exit_meaning)
    assert shown == {"SIGTERM": (143, "interrupted (SIGTERM)"), "SIGINT": (130, "interrupted (SIGINT)"),
                     None: (130, "interrupted (SIGINT 130 / SIGTERM 143)")}


def test_a_cpu_torch_reads_cpu_in_the_environment_column_never_cuda_none():
    """Fresh trial: the report's environment column read ``torch 2.13.0+cpu (CUDA None)``."""
    from fleetctl.reporting.environments import contents

    assert contents({"torch": "2.13.0+cpu", "torch_cuda": None}) == "torch 2.13.0+cpu (CPU)"
    assert contents({"torch": "2.13.0+cpu", "torch_cuda": "None"}) == "torch 2.13.0+cpu (CPU)"  # as printed
    assert contents({"torch": "2.11.0+cu130", "torch_cuda": "13.0"}) == "torch 2.11.0+cu130 (CUDA 13.0)"
