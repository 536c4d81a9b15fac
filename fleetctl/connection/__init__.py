"""Connections to hosts: the :class:`Connection` seam, and the registry of connection kinds
(:mod:`fleetctl.connection.registry`) that hands out one per host."""

from __future__ import annotations

from .base import CommandResult, Connection, LineCallback, OutputLine

__all__ = ["CommandResult", "Connection", "LineCallback", "OutputLine"]
