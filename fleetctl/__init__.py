"""fleetctl: provision GPU hosts over SSH.

Gathers facts, builds CUDA FP4 kernels for exactly each host's SM, installs and verifies them,
streaming every line back. The contracts (CLI, inventory, facts, run record) are in docs/contracts.md.
"""

__version__ = "0.1.0"
