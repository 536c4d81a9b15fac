"""How big the HTML report gets and how long it takes to make and to render, for 1 to 1,000+ hosts.

    .venv/bin/python bench/report_bench.py [--record RUN_DIR] [--hosts 1,200,1000] [--repeat 3]

Each size is a run record of N hosts: with ``--record``, a real record aliased N times by the
engine's own model (tests/support/records.py); otherwise a synthetic one of the same shape (one
arch class per 16 hosts, 5% failed builds with an nvcc error, 2% unreachable, a 60-line log per
host, every tail different: the worst case for the report's folding). Measured, medians of
``--repeat`` runs:

- ``summary_s``: reading the record and summarising it (report_model), ``render_s``: jinja2;
- ``bytes``: the HTML file's size;
- ``chromium_s``: wall time of headless Chromium's ``--dump-dom`` of the page, and
  ``baseline_s`` the same for an empty page in the same run (the browser's own start-up), so
  ``chromium_s - baseline_s`` is the page's cost; ``ready_ms``: the page's own clock from
  navigation start to the page laid out after its load event (``data-ready-ms``).

Results go to bench/results/report.json; bench/README.md records them.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetctl.engine.model import HostOutcome, PhaseSpan, RunModel, TaskOutcome  # noqa: E402
from fleetctl.reporting.html import render  # noqa: E402
from fleetctl.reporting.report_model import load_report  # noqa: E402
from tests.support.browser import run_chromium  # noqa: E402
from tests.support.records import alias_record  # noqa: E402


def synthetic_record(dest: Path, n: int) -> Path:
    """A record of ``n`` hosts shaped like a nightly over a mixed fleet (see the module docstring)."""
    run = RunModel(kind="deploy", command=["fleetctl", "deploy", "--hosts", "gpu-nodes", "--metrics-file",
                                           "/var/lib/node_exporter/fleetctl.prom"], user="ops", controller="ctl01",
                   playbook="/srv/fleet/playbooks/nightly.yaml", started="2026-12-01T02:30:00+00:00",
                   finished="2026-12-01T03:41:12+00:00")
    names = [f"gpu{i:04d}" for i in range(1, n + 1)]
    run.inventory = {"path": "/srv/fleet/inventory.yaml",
                     "hosts": {h: {"ansible_host": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", "ansible_port": 22}
                               for i, h in enumerate(names)}}
    (dest / "logs").mkdir(parents=True)
    events = []
    for i, h in enumerate(names):
        cls = i // 16
        builder = names[cls * 16]
        unreachable = i % 50 == 7
        failed = not unreachable and i % 20 == 3
        t = 0.5 + (i % 13) * 0.1
        spans = [PhaseSpan(phase="connect", start_s=t, duration_s=0.3, status="unreachable" if unreachable else "ok")]
        tasks = []
        if not unreachable:
            spans.append(PhaseSpan(phase="facts", start_s=t + 0.3, duration_s=4.2, status="ok"))
            spans.append(PhaseSpan(phase="upload", start_s=t + 4.5, duration_s=2.0, status="changed"))
            build_s = 2400.0 + (i % 7) * 60 if h == builder else 30.0
            role = "build" if h == builder else "push"
            spans.append(PhaseSpan(phase="build", start_s=t + 6.5, duration_s=build_s,
                                   status="failed" if failed else "changed"))
            data = {"key": f"{cls:016x}", "archs": "12.0a" if cls % 2 else "9.0a", "sha256": f"{cls:064x}",
                    "wheel": f"/var/tmp/fleetctl/wheels/{cls:016x}/sgl_kernel-0.3.21-cp312-abi3-linux_x86_64.whl",
                    "decision": {"action": role, "key": f"{cls:016x}"}}
            if role == "push":
                data["pushed_from"] = builder
            tasks.append(TaskOutcome(name="Build sgl-kernel", action="build_wheel", phase="build",
                                     status="failed" if failed else "changed", data=data))
            if not failed:
                spans.append(PhaseSpan(phase="install", start_s=t + 6.5 + build_s, duration_s=12.0, status="changed"))
                spans.append(PhaseSpan(phase="verify", start_s=t + 18.5 + build_s, duration_s=9.0, status="ok"))
                tasks.append(TaskOutcome(name="Install", action="pip_install", phase="install", status="changed",
                                         data={"sha256": f"{cls:064x}", "wheel": data["wheel"]}))
        status = "unreachable" if unreachable else "failed" if failed else "ok"
        error = (f"connection refused by 10.{i // 65536}.{i // 256 % 256}.{i % 256}:22" if unreachable else
                 "Build sgl-kernel: build failed (pip): csrc/gemm/nvfp4_scaled_mm.cu(212): error: identifier "
                 "\"__nv_fp4x2_e2m1\" is undefined" if failed else None)
        run.hosts[h] = HostOutcome(status=status, error=error, duration_s=sum(s.duration_s for s in spans),
                                   started=run.started, phases=spans, tasks=tasks)
        lines = [f"out| [{k}/60] Building CUDA object CMakeFiles/common_ops.dir/csrc/gemm/kernel_{k}.cu.o"
                 for k in range(1, 58)]
        if failed:
            lines += ["err| csrc/gemm/nvfp4_scaled_mm.cu(212): error: identifier \"__nv_fp4x2_e2m1\" is undefined",
                      "err| ninja: build stopped: subcommand failed."]
        lines.append(f"out| host {h}: done in {1000 + i * 7919 % 997} s")
        (dest / "logs" / f"{h}.log").write_text("==> task 1/3: Build sgl-kernel\n" + "\n".join(lines) + "\n")
        events.append({"event": "note.added", "host": h, "message": f"max_jobs 8 = min(cpus 64, memory {500000 + i} "
                                                                     "MiB // 6144 MiB per job), at least 1"})
    run.status = "failed" if any(o.status != "ok" for o in run.hosts.values()) else "ok"
    run.failed_hosts = [h for h, o in run.hosts.items() if o.status != "ok"]
    (dest / "run.json").write_text(json.dumps(run.as_json()))
    (dest / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return dest


def chromium_dump(page: Path) -> tuple[float, float | None]:
    """(wall seconds of --dump-dom, the page's data-ready-ms)."""
    res, wall = run_chromium(page.resolve().as_uri(), "--dump-dom")
    if res.returncode != 0:
        raise RuntimeError(res.stderr.decode(errors="replace")[-1000:])
    m = re.search(rb'data-ready-ms="([0-9.]+)"', res.stdout)
    return wall, float(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, help="a real run record folder to alias N times")
    ap.add_argument("--hosts", default="1,200,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "report.json")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="fleetctl-report-bench-") as tmp:
        empty = Path(tmp) / "empty.html"
        empty.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'><title>empty</title></head><body></body></html>")
        for n in [int(x) for x in args.hosts.split(",")]:
            rec = Path(tmp) / f"run-{n}"
            if args.record:
                alias_record(args.record, rec, n, vary_logs=True)
            else:
                synthetic_record(rec, n)
            summary_s, render_s, chrome_s, base_s, ready = [], [], [], [], []
            page = Path(tmp) / f"report-{n}.html"
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                report = load_report(rec)
                t1 = time.perf_counter()
                text = render(report)
                t2 = time.perf_counter()
                page.write_text(text)
                summary_s.append(t1 - t0)
                render_s.append(t2 - t1)
                base_s.append(chromium_dump(empty)[0])
                wall, ms = chromium_dump(page)
                chrome_s.append(wall)
                if ms is not None:
                    ready.append(ms)
            row = {"hosts": n, "bytes": page.stat().st_size, "summary_s": statistics.median(summary_s),
                   "render_s": statistics.median(render_s), "chromium_s": statistics.median(chrome_s),
                   "baseline_s": statistics.median(base_s), "ready_ms": statistics.median(ready) if ready else None,
                   "source": str(args.record) if args.record else "synthetic"}
            results.append(row)
            print(f"{n:6d} hosts  {row['bytes'] / 1024:8.1f} KiB  summary {row['summary_s']:.3f} s  "
                  f"render {row['render_s']:.3f} s  chromium {row['chromium_s']:.2f} s (empty page "
                  f"{row['baseline_s']:.2f} s)  page ready {row['ready_ms']} ms", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
