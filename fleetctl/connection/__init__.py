"""Connections to hosts: the :class:`Connection` seam, and the registry of connection kinds
(:mod:`fleetctl.connection.registry`) that hands out one per host."""

from __future__ import annotations

import warnings

from .base import CommandResult, Connection, LineCallback, OutputLine

# cryptography 51 deprecates DSA, and asyncssh (2.24) names DSA's key classes while it imports, so
# every `import asyncssh` warned on stderr ("CryptographyDeprecationWarning: DSA is deprecated"),
# on every SSH command of a fresh install, and failed under `-W error`. The warning is about
# asyncssh's own import, not about a key the operator uses: hidden where asyncssh's modules raise it
# (the module a warning is attributed to), set here, before any of them is imported (lazily).
warnings.filterwarnings("ignore", message=r"DSA is deprecated", module=r"asyncssh(\.|$)")

__all__ = ["CommandResult", "Connection", "LineCallback", "OutputLine"]
