"""``fleetctl report``: a run record as one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import click

from .app import fail_input, main


@main.command()
@click.argument("run_id", required=False)
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report here [default: report.html in the run's record folder].")
@click.option("--open", "open_it", is_flag=True, help="Open the report in the web browser.")
def report(run_id: str | None, html_path: str | None, open_it: bool) -> None:
    """An HTML report of run RUN_ID (default: the newest run): summary, failures folded by cause,
    arch classes, a per-host timeline of phases, every host's status and log tail.

    \b
    One self-contained file (inline CSS, SVG and JS; nothing is fetched), readable for 1 or
    1,000 hosts. Example:
      fleetctl report --html nightly.html
    """
    from .. import __version__
    from ..reporting.history import runs_root, valid_run_id
    from ..reporting.html import write_report

    root = runs_root()
    if run_id is None:
        from ..reporting.history import newest_run

        found = newest_run()  # the run made last (reporting.order), not the latest clock
        if found is None:
            raise fail_input(f"no runs yet in {root}: nothing to report")
        run_id = found
    if not valid_run_id(run_id) or not (root / run_id / "run.json").is_file():
        raise fail_input(f"no run {run_id!r} in {root} (fleetctl runs lists them)")
    out = Path(html_path) if html_path else root / run_id / "report.html"
    if not out.parent.is_dir():
        raise fail_input(f"--html {out}: folder {out.parent} does not exist")
    try:
        write_report(root / run_id, out, version=__version__)
    except (OSError, ValueError) as exc:
        raise fail_input(f"report of run {run_id}: {exc}") from None
    click.echo(f"report of run {run_id}: {out.resolve()}")
    if open_it:
        import webbrowser

        if not webbrowser.open(out.resolve().as_uri()):
            click.echo(f"fleetctl: no web browser found; open {out.resolve().as_uri()}", err=True)
