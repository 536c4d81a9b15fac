"""Headless Chromium (Debian's ``chromium``, installed by .ci/run) for testing the HTML report.

Every run gets a fresh ``--user-data-dir``, runs as root with ``--no-sandbox``, and has every host
name resolve to nothing (``--host-resolver-rules``), so that neither the page nor the browser's own
background services can send a byte off this machine. ``--log-net-log`` records what was asked
for anyway: :func:`page_requests` lists the requests the page itself made (the browser's own have
the initiator ``not an origin``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-default-apps", "--no-pings", "--disable-domain-reliability",
         "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND")


def run_chromium(url: str, *args: str, timeout_s: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """Run Chromium once on ``url`` with ``args`` and a fresh profile; ``(result, wall seconds)``."""
    if not shutil.which(CHROMIUM):
        raise AssertionError("chromium is not installed (apt-get install chromium; .ci/run does)")
    profile = tempfile.mkdtemp(prefix="fleetctl-chromium-")
    try:
        t0 = time.monotonic()
        res = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url], capture_output=True,
                             timeout=timeout_s, stdin=subprocess.DEVNULL)
        return res, time.monotonic() - t0
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(page: Path, *, net_log: Path | None = None) -> str:
    """The DOM after the page loaded and its script ran (``--dump-dom``)."""
    extra = [f"--log-net-log={net_log}"] if net_log else []
    res, _ = run_chromium(page.resolve().as_uri(), "--dump-dom", *extra)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    return res.stdout.decode("utf-8")


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 2000) -> Path:
    """A PNG of the page (``--screenshot``) at ``width`` x ``height`` CSS pixels."""
    res, _ = run_chromium(page.resolve().as_uri(), f"--screenshot={png}", f"--window-size={width},{height}")
    assert res.returncode == 0 and png.exists(), res.stderr.decode(errors="replace")[-2000:]
    return png


def page_requests(net_log: Path) -> list[str]:
    """URLs of the requests the page started (net log ``URL_REQUEST_START_JOB`` events whose
    initiator is an origin: the browser's own requests have ``not an origin``)."""
    doc = json.loads(net_log.read_text())
    names = {v: k for k, v in doc["constants"]["logEventTypes"].items()}
    out = []
    for ev in doc["events"]:
        params = ev.get("params") or {}
        if (names.get(ev["type"]) == "URL_REQUEST_START_JOB" and "url" in params
                and params.get("initiator") != "not an origin"):
            out.append(str(params.get("url")))
    return out


def png_size(png: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = png.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
