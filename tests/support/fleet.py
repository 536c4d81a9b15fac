"""Helpers for end-to-end tests: write an inventory for sshd test hosts and run the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]

#: A command prefix running root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (``setpriv(1)``
#: drops them from the bounding set before exec): a mode-000 file is then unreadable to it, as to
#: any other controller user (capabilities(7)); root reads one otherwise.
NO_READ_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


def write_inventory(path: Path, groups: dict[str, dict[str, dict[str, Any]]], all_vars: dict | None = None) -> Path:
    """Write an Ansible YAML inventory: ``{group: {host: vars}}``."""
    doc = {"all": {"vars": all_vars or {}, "children": {g: {"hosts": hosts} for g, hosts in groups.items()}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def fleetctl(*args: str, home: Path, timeout_s: float = 900, env: dict | None = None,
             prefix: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run ``python -m fleetctl.cli ARGS`` (the real CLI) with FLEETCTL_HOME=home and the wheel cache
    under it (nothing in the real ``~``); never through a shell. A None value in ``env`` unsets that
    variable (e.g. FLEETCTL_HOME, so that XDG_STATE_HOME decides: set but empty is refused).
    ``prefix`` runs it under a command (:data:`NO_READ_OVERRIDE`: root that reads only what its
    file modes let it)."""
    return subprocess.run([*prefix, sys.executable, "-m", "fleetctl", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=fleetctl_env(home, env), cwd=REPO)


def fleetctl_env(home: Path, env: dict | None = None) -> dict[str, str]:
    """The environment :func:`fleetctl` runs the CLI in: this one, FLEETCTL_HOME=home, the wheel
    cache under it, then ``env`` (a None value unsets that variable)."""
    full = {**os.environ, "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(Path(home) / "cache"), **(env or {})}
    return {k: v for k, v in full.items() if v is not None}


def fleetctl_read_late(*args: str, home: Path, timeout_s: float = 120,
                       env: dict | None = None) -> subprocess.CompletedProcess:
    """:func:`fleetctl` with a stdout nobody reads until the run has ended (its newest run.json
    says a status other than ``running``): a pipe whose reader stopped reading, as ``less`` at a
    full screen, which then reads it all. Polls every 50 ms; TimeoutError after ``timeout_s``."""
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=fleetctl_env(home, env), cwd=REPO)
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None and not _run_ended(Path(home)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no run ended in {timeout_s} s: {args}")
            time.sleep(0.05)
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _run_ended(home: Path) -> bool:
    """Whether the newest run under ``home`` wrote its final run.json."""
    try:
        return json.loads((last_run(home) / "run.json").read_text()).get("status") != "running"
    except (OSError, ValueError, IndexError):
        return False


def last_run(home: Path) -> Path:
    runs = sorted(p for p in (home / "runs").iterdir() if p.is_dir())
    return runs[-1]


def load_json(text: str) -> Any:
    return json.loads(text)


def unwrap_modes(argv: Sequence[str]) -> list[str]:
    """An install command as pip/uv gets it: ``argv`` less the venv-modes wrapper
    (:func:`fleetctl.tasks.venv_modes.in_venv_modes`: ``PYTHON -I -c SCRIPT CMD...``) when it has it."""
    from fleetctl.tasks.venv_modes import VENV_MODES_SCRIPT

    argv = list(argv)
    return argv[4:] if argv[1:4] == ["-I", "-c", VENV_MODES_SCRIPT] else argv
