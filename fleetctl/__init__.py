"""fleetctl: provision GPU hosts over SSH.

Gathers facts, builds CUDA FP4 kernels for exactly each host's SM, installs and verifies them,
streaming every line back. As a library::

    from fleetctl import Fleet

    result = Fleet.from_inventory("inventory.yaml").select("gpu-nodes").run(["nvidia-smi", "-L"])

The public names are :data:`__all__` (the API: :mod:`fleetctl.api`; the errors:
:mod:`fleetctl.errors`); everything else is internal. The contracts (CLI, inventory, facts, run
record) are in docs/contracts.md. The API is imported on first use, so
``import fleetctl`` (and the CLI) stay light.
"""

from __future__ import annotations

from typing import Any

from .errors import FleetError, HostsFailed, HostUnreachable, InputError, InventoryError, PlaybookError

__version__ = "0.1.0"

__all__ = ["AsyncHosts", "Fleet", "FleetError", "HostFacts", "HostResult", "Hosts", "HostsFailed",
           "HostUnreachable", "InputError", "InventoryError", "PlaybookError", "RunResult", "__version__"]

_API = {"AsyncHosts", "Fleet", "HostFacts", "HostResult", "Hosts", "RunResult"}


def __getattr__(name: str) -> Any:  # PEP 562: the API's modules load when first named
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'fleetctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
