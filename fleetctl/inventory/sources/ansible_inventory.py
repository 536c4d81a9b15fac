"""What only Ansible can read, read by Ansible: ``ansible-inventory --list``, when ansible-core is
installed.

fleetctl reads YAML, INI, ``--list`` JSON and scripts itself. A source that needs Ansible's own
machinery -- an inventory plugin configuration (``plugin: amazon.aws.aws_ec2``), Ansible Vault
(``!vault`` values, vault-encrypted files, in the inventory or its ``group_vars/``), TOML -- is
handed whole to ``ansible-inventory -i SOURCE --list``, and its JSON enters through
:func:`~fleetctl.inventory.sources.list_json.ingest_list_json`. Ansible has then already merged
every var (``group_vars/`` included) into each host's vars; the JSON carries no creation order,
so groups and hosts come in its (sorted) order.

The program is ``$FLEETCTL_ANSIBLE_INVENTORY`` when set (empty: never delegate), else
``ansible-inventory`` beside fleetctl's Python or on PATH, else ``python -m ansible.cli.inventory``
when the ``ansible`` package is importable. Vault passwords come the usual Ansible ways
(``ANSIBLE_VAULT_PASSWORD_FILE``, ``ansible.cfg``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

from fleetctl.errors import InventoryError

from ..data import InventoryBuilder
from .list_json import ingest_list_json

__all__ = ["ansible_inventory_command", "ingest_with_ansible", "TIMEOUT_S"]

TIMEOUT_S = 600.0
"""How long ``ansible-inventory`` may run (a cloud plugin queries an API), seconds."""


def ansible_inventory_command() -> list[str] | None:
    """The argv prefix that runs ``ansible-inventory``, or None when ansible-core is not installed."""
    override = os.environ.get("FLEETCTL_ANSIBLE_INVENTORY")
    if override is not None:
        return [override] if override.strip() else None
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    if os.access(beside, os.X_OK):
        return [beside]
    found = shutil.which("ansible-inventory")
    if found:
        return [found]
    if importlib.util.find_spec("ansible") is not None:
        return [sys.executable, "-m", "ansible.cli.inventory"]
    return None


def ingest_with_ansible(builder: InventoryBuilder, source: str, why: str) -> None:
    """Add ``source`` as ``ansible-inventory -i SOURCE --list`` reads it.

    Args:
        source: the ``-i`` value (a file or folder).
        why: what made fleetctl hand it over (``"an inventory plugin configuration"``), for the
            error when ansible-core is missing.

    Raises:
        InventoryError: ansible-core is not installed (saying why it is needed), or
            ``ansible-inventory`` fails (its last error line), runs past :data:`TIMEOUT_S`, or
            prints no JSON.
    """
    command = ansible_inventory_command()
    if command is None:
        raise InventoryError(f"{why} needs Ansible to read it, and ansible-core is not installed "
                             "(pip install ansible-core)", file=source)
    try:
        res = subprocess.run([*command, "-i", source, "--list"], capture_output=True, timeout=TIMEOUT_S,
                             stdin=subprocess.DEVNULL, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    except subprocess.TimeoutExpired:
        raise InventoryError(f"ansible-inventory ran past {TIMEOUT_S:g} s reading {why}", file=source) from None
    except OSError as exc:
        raise InventoryError(f"cannot run {command[0]}: {exc.strerror or exc}", file=source) from None
    lines = [ln.strip() for ln in res.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("[ERROR]") or "ERROR!" in ln] or lines
    if res.returncode != 0:
        cause = errors[-1] if errors else f"status {res.returncode}"
        raise InventoryError(f"ansible-inventory could not read {why}: {cause}", file=source)
    try:
        data = json.loads(res.stdout.decode("utf-8"))
    except ValueError:
        raise InventoryError(f"ansible-inventory printed no JSON for {why}", file=source) from None
    base = source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))
    ingest_list_json(builder, data, file=source, base_dir=base, check_names=False)
