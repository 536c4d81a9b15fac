"""What only Ansible can read, read by Ansible: ``ansible-inventory --list``, when ansible-core is
installed.

fleetctl reads YAML, INI, ``--list`` JSON and scripts itself. A source that needs Ansible's own
machinery -- an inventory plugin configuration (``plugin: amazon.aws.aws_ec2``), Ansible Vault
(``!vault`` values, vault-encrypted files, in the inventory or its ``group_vars/``), TOML -- is
handed whole to ``ansible-inventory -i SOURCE --list``, and its JSON enters through
:func:`~fleetctl.inventory.sources.list_json.ingest_list_json`. Ansible has then already merged
every var (``group_vars/`` included) into each host's vars; the JSON carries no creation order,
so groups and hosts come in its (sorted) order. ``ansible-inventory`` never decrypts vaulted
values (it prints ``{"__ansible_vault": CIPHERTEXT}``): fleetctl decrypts them all with one
``ansible-vault decrypt`` and keeps each as a secret (``{value: ..., secret: true}``, redacted
wherever fleetctl writes or prints).

The program is ``$FLEETCTL_ANSIBLE_INVENTORY`` when set (empty: never delegate), else
``ansible-inventory`` beside fleetctl's Python or on PATH, else ``python -m ansible.cli.inventory``
when the ``ansible`` package is importable. Vault passwords come the usual Ansible ways
(``ANSIBLE_VAULT_PASSWORD_FILE``, ``ansible.cfg``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

from fleetctl.errors import InventoryError
from fleetctl.util.envvars import ansible_inventory_program

from ..data import InventoryBuilder
from .list_json import ingest_list_json

__all__ = ["ansible_inventory_command", "ingest_with_ansible", "TIMEOUT_S"]

TIMEOUT_S = 600.0
"""How long ``ansible-inventory`` may run (a cloud plugin queries an API), seconds."""


def ansible_inventory_command() -> list[str] | None:
    """The argv prefix that runs ``ansible-inventory``, or None when ansible-core is not installed.

    Raises:
        InputError: ``FLEETCTL_ANSIBLE_INVENTORY`` names no program
            (:func:`fleetctl.util.envvars.ansible_inventory_program`).
    """
    override = ansible_inventory_program()  # one naming no program is refused (util.envvars)
    if override is not None:
        return [override] if override else None
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    if os.access(beside, os.X_OK):
        return [beside]
    import shutil

    found = shutil.which("ansible-inventory")
    if found:
        return [found]
    if importlib.util.find_spec("ansible") is not None:
        return [sys.executable, "-m", "ansible.cli.inventory"]
    return None


def _run(argv: list[str], source: str, what: str) -> subprocess.CompletedProcess[bytes]:
    """Run an Ansible program without a terminal (it must never wait for a password prompt)."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
                              start_new_session=True, env={**os.environ, "ANSIBLE_NOCOLOR": "1",
                                                           "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "1"})
    except subprocess.TimeoutExpired:
        raise InventoryError(f"{os.path.basename(argv[0])} ran past {TIMEOUT_S:g} s reading {what}",
                             file=source) from None
    except OSError as exc:
        raise InventoryError(f"cannot run {argv[0]}: {exc.strerror or exc}", file=source) from None


def _last_error(res: subprocess.CompletedProcess[bytes]) -> str:
    lines = [ln.strip() for ln in res.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("[ERROR]") or "ERROR!" in ln] or lines
    text = errors[-1] if errors else f"status {res.returncode}"
    for prefix in ("[ERROR]: ", "ERROR! "):
        text = text.removeprefix(prefix)
    if "EOFError" in text or "no vault secrets" in text:
        text += "; give Ansible the vault password (ANSIBLE_VAULT_PASSWORD_FILE, or vault_password_file in ansible.cfg)"
    return text


def _vault_command(inventory_command: list[str]) -> list[str]:
    if inventory_command[-1] == "ansible.cli.inventory":
        return [*inventory_command[:-1], "ansible.cli.vault"]
    return [os.path.join(os.path.dirname(inventory_command[0]), "ansible-vault")]


def _ciphertexts(value: Any, found: dict[str, None]) -> None:
    if isinstance(value, dict):
        if set(value) == {"__ansible_vault"} and isinstance(value["__ansible_vault"], str):
            found[value["__ansible_vault"]] = None
            return
        for v in value.values():
            _ciphertexts(v, found)
    elif isinstance(value, list):
        for v in value:
            _ciphertexts(v, found)


def _replace_vaulted(value: Any, plain: dict[str, str]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__ansible_vault"} and value["__ansible_vault"] in plain:
            return {"value": plain[value["__ansible_vault"]], "secret": True}
        return {k: _replace_vaulted(v, plain) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_vaulted(v, plain) for v in value]
    return value


def decrypt_vaulted(data: Any, command: list[str], source: str) -> Any:
    """``data`` with every ``{"__ansible_vault": CIPHERTEXT}`` decrypted by one ``ansible-vault decrypt``
    (vault passwords as Ansible finds them) and marked secret.

    Raises:
        InventoryError: ``ansible-vault`` cannot decrypt them (no or a wrong vault password).
    """
    found: dict[str, None] = {}
    _ciphertexts(data, found)
    if not found:
        return data
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fleetctl-vault-") as tmp:
        os.chmod(tmp, 0o700)
        paths = []
        for i, text in enumerate(found):
            path = os.path.join(tmp, f"v{i}")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            paths.append(path)
        res = _run([*_vault_command(command), "decrypt", *paths], source, "vaulted values")
        if res.returncode != 0:
            raise InventoryError(f"ansible-vault could not decrypt the vaulted values: {_last_error(res)}",
                                 file=source)
        plain = {}
        for text, path in zip(found, paths):
            with open(path, encoding="utf-8", errors="surrogateescape") as fh:
                plain[text] = fh.read()
    return _replace_vaulted(data, plain)


def ingest_with_ansible(builder: InventoryBuilder, source: str, why: str, *, file: str | None = None,
                        line: int | None = None, key: str | None = None) -> None:
    """Add ``source`` as ``ansible-inventory -i SOURCE --list`` reads it.

    Args:
        source: the ``-i`` value (a file or folder).
        why: what made fleetctl hand it over (``"an inventory plugin configuration"``), for the
            error when ansible-core is missing.
        file, line, key: where that is, for the same error.

    Raises:
        InventoryError: ansible-core is not installed (saying why it is needed), or
            ``ansible-inventory`` fails (its last error line), runs past :data:`TIMEOUT_S`, or
            prints no JSON.
    """
    command = ansible_inventory_command()
    if command is None:
        raise InventoryError(f"{why} needs Ansible to read it, and ansible-core is not installed "
                             "(pip install ansible-core)", file=file or source, line=line, key=key)
    res = _run([*command, "-i", source, "--list"], source, why)
    if res.returncode != 0:
        raise InventoryError(f"ansible-inventory could not read {why}: {_last_error(res)}", file=source)
    try:
        data = json.loads(res.stdout.decode("utf-8"))
    except ValueError:
        raise InventoryError(f"ansible-inventory printed no JSON for {why}", file=source) from None
    data = decrypt_vaulted(data, command, source)
    base = source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))
    ingest_list_json(builder, data, file=source, base_dir=base, check_names=False)
