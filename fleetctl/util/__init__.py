"""Leaf helpers every layer may use: where fleetctl keeps files, secret redaction, run retention, YAML with positions. They import nothing of fleetctl but :mod:`fleetctl.errors`."""
