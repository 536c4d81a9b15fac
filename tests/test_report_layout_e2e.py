"""The report's layout in a real headless Chromium at 1400 px (issue 24): the hosts table of a
staged deploy (every phase column, the environment, long host names and log paths) fits the
window instead of running past it. A tiny script added to a copy of the page measures the
layout after it rendered; a screenshot is kept for a person to look at (FLEETCTL_SCREENSHOT_DIR)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from fleetctl.reporting.html import write_report
from tests.support.browser import run_chromium, screenshot
from tests.support.fleet import fleetctl, last_run

PHASES = ("connect", "facts", "upload", "build", "install", "verify")
MEASURE = """<script>(() => {
  const wrap = document.getElementById("host-table").parentElement;
  document.body.setAttribute("data-measure", JSON.stringify({inner: window.innerWidth,
    page: document.documentElement.scrollWidth, table: wrap.scrollWidth, box: wrap.clientWidth}));
})();</script>"""


def _record(tmp_path: Path) -> Path:
    """A real record (a local run of three hosts, one failing), then given what a staged deploy of
    GPU hosts records: every phase and a Python environment per host."""
    inv = tmp_path / "inv.yaml"
    names = ["gpu-node-with-a-rather-long-inventory-name-01.cluster.example.com", "gpu02",
             "gpu03.rack-b.datacenter-east.example.org"]
    inv.write_text("all:\n  hosts:\n" + "".join(
        f"    {n}: {{ansible_connection: local, workdir: {tmp_path}/w{i}}}\n" for i, n in enumerate(names)))
    play = tmp_path / "play.yaml"
    play.write_text("name: p\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n"
                    "    command: {argv: [sh, -c, 'test \"$0\" != gpu02', '{{ host }}']}\n")
    fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--playbook", str(play), home=tmp_path)
    run_dir = last_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    for i, h in enumerate(record["hosts"].values()):
        h["phases"] = [{"phase": p, "start_s": 40.0 * k, "duration_s": 40.0 + i, "status": "ok"}
                       for k, p in enumerate(PHASES)]
        h["environment"] = {"state": "live", "switched": True, "previous": 2, "live": {
            "version": 3, "live_since": "2026-12-01T02:31:07+00:00", "torch": "2.12.0.dev20261128+cu130",
            "torch_cuda": "13.0", "kernels": {"fp4_kernels": {"version": "0.1.0", "wheel_sha256": "ab" * 32},
                                              "sgl_kernel": {"version": "0.3.21", "wheel_sha256": "cd" * 32}}}}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


def test_the_hosts_table_fits_a_1400_px_window(tmp_path):
    page = write_report(_record(tmp_path), tmp_path / "report.html")
    text = page.read_text()
    assert "torch 2.12.0.dev20261128+cu130" in text and "<th class=\"n\">install</th>" in text
    measured = tmp_path / "measured.html"
    # the copy only: without the page's CSP (which admits only the report's own script) and with
    # the measuring script
    measured.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
                        .replace("</body>", MEASURE + "</body>"))
    res, _ = run_chromium(measured.resolve().as_uri(), "--dump-dom", "--window-size=1400,1000")
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    m = json.loads(re.search(r'data-measure="([^"]*)"', res.stdout.decode()).group(1).replace("&quot;", '"'))
    assert m["inner"] == 1400, m
    assert m["page"] <= m["inner"], m  # the page never scrolls sideways
    assert m["table"] <= m["box"], m  # nor does the hosts table inside its box
    png = screenshot(page, tmp_path / "report-1400.png", width=1400, height=1400)
    assert png.stat().st_size > 20_000
    if os.environ.get("FLEETCTL_SCREENSHOT_DIR"):
        shutil.copy(png, Path(os.environ["FLEETCTL_SCREENSHOT_DIR"]) / "report-1400.png")
