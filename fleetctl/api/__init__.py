"""fleetctl's Python API: the same engine, records and messages as the CLI (which calls it).

Example::

    from fleetctl import Fleet

    fleet = Fleet.from_inventory("inventory.yaml")
    nodes = fleet.select("gpu-nodes:!gpu03")
    result = nodes.run(["nvidia-smi", "-L"], timeout=30)      # RunResult: host -> HostResult
    plan = nodes.deploy(mode="plan")                            # plan / dry_run / apply
    facts = nodes.facts().facts                                 # host -> HostFacts

    async def main():
        result = await fleet.aselect("all").run(["uname", "-r"])   # the async form

Modules: :mod:`~fleetctl.api.fleet` (:class:`Fleet`), :mod:`~fleetctl.api.hosts` (:class:`AsyncHosts`;
:class:`Hosts`, its blocking form, in :mod:`~fleetctl.api.hosts_sync`), :mod:`~fleetctl.api.results`, :mod:`~fleetctl.api.facts`,
:mod:`~fleetctl.api.observe` (observers and event names). The rest of :mod:`fleetctl.api`
(``play``, ``adhoc``, ``lifecycle``, ``sync``) is the CLI's and the API's shared plumbing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AsyncHosts", "Fleet", "Gpu", "HostFacts", "HostResult", "Hosts", "RunResult"]

#: name -> the module that defines it, imported on first use (PEP 562), so that the CLI, which
#: uses only the run paths (``fleetctl.api.play``, ``.adhoc``, ``.fleet``), does not load the
#: result and facts models at start-up.
_WHERE = {"AsyncHosts": "hosts", "Fleet": "fleet", "Gpu": "facts", "HostFacts": "facts", "HostResult": "results",
          "Hosts": "hosts_sync", "RunResult": "results"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fleetctl.api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
