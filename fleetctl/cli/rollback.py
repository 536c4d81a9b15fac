"""``fleetctl rollback --hosts PATTERN [--to N]``: switch each host's venv back to a kept staged
environment (the one live before the current one, or version N). It runs
``playbooks/rollback.yaml`` (one ``venv_switch`` task) through the engine like any deploy: the
deploy lock, the run record, ``--dry-run``, ``--json``, the exit status. Only the symlink moves."""

from __future__ import annotations

import re
from typing import Any

import click

from ..errors import InputError
from .app import main, pass_ctx
from .play import _common, _options, _run_play


@main.command()
@click.option("--to", "to", default="previous", show_default=True, metavar="previous|N",
              help="The environment to make live: the one live before the current one, or its version number.")
@click.option("--playbook", "playbook_path", default="playbooks/rollback.yaml", show_default=True, hidden=True)
@_options(_common)
@pass_ctx
def rollback(obj, to: str, playbook_path: str, extra: tuple[str, ...] = (), **kw: Any) -> None:
    """Switch each host's venv back to a previous staged environment (kept: the last 3)."""
    to = to.strip()
    if not re.fullmatch(r"previous|v?[0-9]+", to):
        raise InputError(f"--to: want 'previous' or a version number such as 2, got {to!r}")
    _run_play(obj, playbook_path, kind="rollback", extra=(*extra, f"rollback_to={to}"), **kw)
