"""Where fleetctl finds its own files: the checkout it runs from (README installs with ``pip install -e .``)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def resolve_default(path: str | Path) -> Path:
    """``path`` as given if it exists (relative to the current folder), else relative to the checkout.

    So ``fleetctl deploy`` finds ``playbooks/fp4-kernels.yaml`` and ``inventory.yaml`` from any folder.
    """
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    alt = REPO_ROOT / p
    return alt if alt.exists() else p


def state_root() -> Path:
    """Where run records, the retry set and controller-side locks live: the user's, not the
    working directory's. ``$FLEETCTL_HOME`` when set, else ``$XDG_STATE_HOME/fleetctl``, else
    ``~/.local/state/fleetctl`` (XDG Base Directory Specification)."""
    import os

    home = os.environ.get("FLEETCTL_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fleetctl"


def cache_root() -> Path:
    """The controller's wheel cache: ``$XDG_CACHE_HOME/fleetctl`` (default ``~/.cache/fleetctl``);
    wheels live under ``wheels/<key16>/``."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fleetctl"
