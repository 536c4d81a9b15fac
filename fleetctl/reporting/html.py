"""The HTML report of a run: one self-contained file (inline CSS, SVG and JS; nothing fetched).

:func:`render` turns a :class:`~fleetctl.reporting.report_model.Report` into HTML with jinja2 and
the package's templates (``templates/report.html.j2``, ``report.css``, ``report.js``). Autoescape
is on for every value: host output, causes and host names are hostile text. The page carries a
Content-Security-Policy that forbids every fetch (``default-src 'none'``) and allows only its own
stylesheet and script, by their SHA-256 (CSP Level 2 hash sources), so that nothing a host printed
could run or load anything even if escaping failed.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import re
import tempfile
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from ..util.paths import safe_name
from .report_model import Report, load_report


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def secs(value: float | None) -> str:
    """Seconds as people read them: ``0.42 s``, ``12.3 s``, ``7 min 05 s``, ``2 h 03 min``."""
    if value is None:
        return "-"
    v = float(value)
    if v < 10:
        return f"{v:.2f} s"
    if v < 120:
        return f"{v:.1f} s"
    if v < 7200:
        return f"{int(v // 60)} min {int(v % 60):02d} s"
    return f"{int(v // 3600)} h {int(v % 3600 // 60):02d} min"


def num(value: float | None) -> str:
    """Seconds as a bare number for table cells: ``0.42``, ``12.3``, ``2400``."""
    if value is None:
        return ""
    v = float(value)
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def size(value: int) -> str:
    """Bytes as ``512 B``, ``3.4 KiB``, ``21.0 MiB``."""
    v = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{int(v)} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} GiB"


def when(value: str | None) -> str:
    """An ISO 8601 time as ``2026-12-01 04:27:04 UTC``."""
    try:
        t = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def environment() -> jinja2.Environment:
    """The jinja2 environment of the report: autoescape on, undefined names are errors."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("fleetctl.reporting", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(
        secs=secs, num=num, size=size, when=when, safe_name=safe_name,
        short=lambda s: str(s or "")[:12],
        cls=lambda s: re.sub(r"[^a-z0-9]+", "-", str(s).lower()).strip("-") or "x",
    )
    return env


def render(report: Report) -> str:
    """The report as one HTML document (str)."""
    css, js = _asset("report.css"), _asset("report.js")
    csp = (f"default-src 'none'; style-src {_csp_hash(css)}; script-src {_csp_hash(js)}; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    template = environment().get_template("report.html.j2")
    return template.render(r=report, css=Markup(css), js=Markup(js), csp=csp)


def write_report(run_dir: Path, out: Path, *, version: str = "") -> Path:
    """Summarise the run record in ``run_dir`` and write its HTML report to ``out`` atomically
    (a temporary file in the same folder, then renamed), mode 0600: the report holds host output.

    Raises:
        FileNotFoundError / ValueError: the record cannot be read (see
            :func:`~fleetctl.reporting.report_model.load_report`).
        OSError: ``out`` cannot be written.
    """
    html = render(load_report(run_dir, version=version))
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
