"""``fleetctl rollback --hosts PATTERN [--to N]``: switch each host's venv back to a kept staged
environment (the one live before the current one, or version N). It runs
``playbooks/rollback.yaml`` (one ``venv_switch`` task) through the engine like any deploy: the
deploy lock, the run record, ``--dry-run``, ``--json``, the exit status. Only the symlink moves."""

from __future__ import annotations

from typing import Any

import click

from ..api.play import rollback_to
from .app import main, pass_ctx
from .play import COMMON_OPTIONS, run_play_command, with_options


@main.command()
@click.option("--to", "to", default="previous", show_default=True, metavar="previous|N",
              help="The environment to make live: the one live before the current one, or its version number.")
@click.option("--playbook", "playbook_path", default="playbooks/rollback.yaml", show_default=True, hidden=True)
@with_options(COMMON_OPTIONS)
@pass_ctx
def rollback(obj, to: str, playbook_path: str, extra: tuple[str, ...] = (), **kw: Any) -> None:
    """Switch each host's venv back to a previous staged environment (kept: the last 3)."""
    target = rollback_to(to, "--to")  # the flag, as the message names it (the API: ``to``)
    run_play_command(obj, playbook_path, kind="rollback", extra=(*extra, f"rollback_to={target}"), **kw)
