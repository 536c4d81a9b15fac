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
