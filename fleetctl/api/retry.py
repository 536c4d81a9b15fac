"""``--retry-failed``: the hosts a play's retry set (or a named run) left failed, as a selection.

Ansible's ``--limit @site.retry`` reads host names from the retry file; a name no longer in the
inventory selects nothing and the rest run. fleetctl does the same, saying so: the hosts of the
set that the inventory no longer has are one warning line (naming them and the file the set was
read from), and the others are retried; when none is left, that is one line of bad input. A gone
host must never become a pattern the operator did not type (``pattern 'x' matches no host``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ..errors import FleetError, InputError


class NothingToRetry(FleetError):
    """``retry_failed``: the run it names left no failed host (the CLI says so and exits 0)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} left no failed host: nothing to retry")


def retry_names(retry_failed: str, key: str, playbook: str, name: str = "retry_failed", *,
                inventory_hosts: Collection[str] | None = None, inventory_files: Sequence[str] = (),
                on_warning: Callable[[str], None] | None = None) -> list[str]:
    """The hosts ``retry_failed`` selects: those the run (an id, or ``"last"``: the play's last,
    read from its retry set ``<runs>/.retry-<key>.json``) left failed and ``inventory_hosts`` (the
    inventory's host names; None: not checked) still has.

    Args:
        retry_failed: a run id, or ``"last"``.
        key: the play's retry-set key (:func:`fleetctl.reporting.history.play_key`).
        playbook: the playbook's path, for messages.
        name: the argument as messages name it (the CLI's ``--retry-failed``).
        inventory_hosts: the host names the inventory has now.
        inventory_files: the inventory sources, for messages.
        on_warning: called with the one line naming failed hosts the inventory no longer has.

    Raises:
        InputError: no such run, no retry set of this play, or none of its hosts left in the
            inventory (one line naming them and the file the set came from).
        NothingToRetry: the run left no failed host.
    """
    from ..reporting.history import retry_hosts, retry_path, runs_root

    try:
        from_run, hosts = retry_hosts(None if retry_failed == "last" else retry_failed, key=key)
    except FileNotFoundError:
        what = (f"no run of {playbook} on this inventory has left a retry set" if retry_failed == "last"
                else f"no run {retry_failed!r}")
        raise InputError(f"{name}: {what} in {runs_root()}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{name}: no retry set to read ({exc})") from None
    if not hosts:
        raise NothingToRetry(from_run)
    if inventory_hosts is None:
        return hosts
    gone = [h for h in hosts if h not in inventory_hosts]
    if not gone:
        return hosts
    source = (f"retry set {retry_path(key)}" if retry_failed == "last"
              else f"run record {runs_root() / retry_failed / 'run.json'}")
    where = f"the inventory ({', '.join(inventory_files)})" if inventory_files else "the inventory"
    origin = f"run {from_run}'s failed hosts ({source})"
    left = [h for h in hosts if h in inventory_hosts]
    if not left:
        raise InputError(f"{name}: nothing to retry: none of {origin} is in {where} any more: {', '.join(gone)}")
    if on_warning is not None:
        on_warning(f"{name}: {', '.join(gone)} of {origin} no longer in {where}: not retried; "
                   f"retrying the other {len(left)} host(s)")
    return left
