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

Modules: :mod:`~fleetctl.api.fleet` (:class:`Fleet`), :mod:`~fleetctl.api.hosts` (:class:`Hosts`,
:class:`AsyncHosts`), :mod:`~fleetctl.api.results`, :mod:`~fleetctl.api.facts`,
:mod:`~fleetctl.api.observe` (observers and event names). The rest of :mod:`fleetctl.api`
(``play``, ``adhoc``, ``lifecycle``, ``sync``) is the CLI's and the API's shared plumbing.
"""

from .facts import Gpu, HostFacts
from .fleet import Fleet
from .hosts import AsyncHosts, Hosts
from .results import HostResult, RunResult

__all__ = ["AsyncHosts", "Fleet", "Gpu", "HostFacts", "HostResult", "Hosts", "RunResult"]
