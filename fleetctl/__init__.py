"""fleetctl: provision GPU hosts over SSH.

Gathers facts, builds CUDA FP4 kernels for exactly each host's SM, installs and verifies them,
streaming every line back. See DESIGN.md in the repository for the contracts.
"""

__version__ = "0.1.0"
