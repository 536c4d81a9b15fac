"""The scheduled job's ``-e`` values, kept out of its unit files and crontab line.

A unit file is world-readable (``systemctl cat``), a crontab line shows in ``ps`` while cron runs
it, and both end up in backups: a ``-e hf_token=...`` there is a leaked token. So ``fleetctl
schedule`` never writes an ``-e`` value into them: every ``NAME=VALUE`` (and each var of an ``-e``
JSON/YAML mapping) goes into a YAML file only the user can read (mode 0600, in a 0700 folder),
``<FLEETCTL_HOME>/schedule/<NAME>.vars.yaml``, and the job passes ``-e @FILE`` (Ansible's syntax,
which ``fleetctl deploy`` reads). Secret-looking names (:func:`fleetctl.util.redact.is_secret_name`)
are written as ``{value: ..., secret: true}`` so the run record redacts them too. An ``-e @FILE``
the user gives is passed on as it is, after checking that a file holding secrets is private to its
owner.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import yaml

from ..util.redact import MASK, is_marked, is_secret_name

__all__ = ["has_secrets", "masked", "remove_unused", "vars_file_path", "vars_file_text"]


def vars_file_path(home: str, name: str, index: int = 0) -> str:
    """``<home>/schedule/<name>.vars.yaml``; for the job's second and later runs of ``-e`` pairs
    (pairs given between ``-e @FILE`` items keep their place: a later ``-e`` wins)
    ``<name>.vars-2.yaml``, ``<name>.vars-3.yaml``..."""
    return str(PurePosixPath(home) / "schedule" / (f"{name}.vars.yaml" if index == 0 else f"{name}.vars-{index + 1}.yaml"))


def remove_unused(home: str, name: str, used: int) -> None:
    """Remove the job's vars files past the first ``used`` (:func:`vars_file_path`): values of an
    earlier scheduling of the job that it no longer reads (they may hold secrets)."""
    import os

    index = used
    while True:
        try:
            os.unlink(vars_file_path(home, name, index))
        except FileNotFoundError:
            if index >= max(used, 1):
                return
        index += 1


def vars_file_text(pairs: dict[str, Any], job_name: str) -> str:
    """The vars file: a comment saying what it is, then the vars as YAML (a value given as JSON keeps
    its type), secret-looking names as ``{value, secret: true}`` markers (a value that is one
    already is kept as given)."""
    doc: dict[str, Any] = {k: ({"value": v, "secret": True} if is_secret_name(k) and not is_marked(v) else v)
                           for k, v in pairs.items()}
    head = (f"# -e values of the scheduled job {job_name}, written by `fleetctl schedule` (mode 0600: only its\n"
            "# owner may read it). Run `fleetctl schedule` again to change them.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def has_secrets(doc: Any) -> bool:
    """True when a vars mapping holds a secret-looking name or a ``{value, secret}`` marker."""
    return isinstance(doc, dict) and any(is_secret_name(k) or is_marked(v) for k, v in doc.items())


def masked(pairs: dict[str, Any]) -> str:
    """``NAME=VALUE`` pairs for printing (a value that is not a string as JSON), secret-looking
    names' and ``{value, secret}`` markers' values as ``********``."""
    def shown(name: str, value: Any) -> str:
        if is_secret_name(name) or is_marked(value):
            return MASK
        return value if isinstance(value, str) else json.dumps(value)

    return " ".join(f"{k}={shown(k, v)}" for k, v in pairs.items())
