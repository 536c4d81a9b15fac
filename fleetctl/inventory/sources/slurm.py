"""The ``slurm:`` inventory source: the nodes Slurm knows, grouped as an operator thinks of them.

``-i slurm:`` lists every node ``sinfo`` shows; ``-i slurm:PARTITION`` the nodes of one partition.
The result is what Ansible's ``ansible-inventory --list`` prints (the dynamic-inventory JSON
format: ``_meta.hostvars`` plus one object per group with ``hosts``, ``children``, ``vars``), so
the inventory loader treats it like any other source and later ``-i`` sources add vars to it.

Groups:

- one per partition, named as the partition (``gpu``);
- one per feature, named as the feature (``sm_90``, ``h200``); a feature named like a partition
  becomes ``feature_<name>`` so the two never merge;
- one per GRES type, named ``<gres>_<type>`` (``gpu:h200:8`` -> ``gpu_h200``);
- ``slurm``: every node of the source (the parent of all the above).

Characters that would break a host pattern (``: , & ! [ ] * ~`` and spaces) become ``_`` in
group names. Vars: ``all.vars.ansible_connection: slurm`` (a later source may set ``ssh`` for
clusters whose nodes accept SSH), ``slurm_partition`` (in ``all.vars`` for ``slurm:PARTITION``;
as a host var for a node outside the default partition) and ``slurm_launcher`` when
``$FLEETCTL_SLURM_LAUNCHER`` names one. Sources are read once: a node's state is not an inventory
property (a drained node is listed, and reported unreachable with its reason when a run reaches it).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from typing import Any

from ...connection.slurm_client import LAUNCHER_ENV, SlurmClient, client_env, last_line, parse_launcher
from ...connection.slurm_nodes import gres_type, parse_sinfo, sinfo_argv
from ...errors import InputError, InventoryError
from ...util.envvars import slurm_launcher

#: The source scheme: ``-i slurm:`` / ``-i slurm:PARTITION``.
SCHEME = "slurm"

_UNSAFE = re.compile(r"[:,&!\[\]*~\s]")


def parse_spec(spec: str) -> str | None:
    """``"slurm:"`` -> ``None`` (all partitions), ``"slurm:gpu"`` -> ``"gpu"``.

    Raises:
        InventoryError: not a ``slurm:`` source, or a partition name with characters Slurm
            does not allow (``,`` or spaces).
    """
    scheme, sep, partition = spec.partition(":")
    if scheme != SCHEME or not sep:
        raise InventoryError(f"not a {SCHEME}: inventory source (expected slurm: or slurm:PARTITION)", file=spec)
    if partition and (_UNSAFE.search(partition) or "/" in partition):
        raise InventoryError(f"invalid partition name {partition!r}", file=spec)
    return partition or None


def _group_name(name: str) -> str:
    return _UNSAFE.sub("_", name)


def inventory_from_sinfo(text: str, *, partition: str | None = None,
                         launcher: str | None = None) -> dict[str, Any]:
    """Build the ``ansible-inventory --list`` JSON of a ``slurm:`` source from ``sinfo`` output
    (pure).

    Args:
        text: output of :func:`~fleetctl.connection.slurm_nodes.sinfo_argv` (``sinfo -N -h -o ...``).
        partition: the partition the source was limited to (``slurm:PARTITION``), if any.
        launcher: the ``slurm_launcher`` to record in ``all.vars``, if any.

    Returns:
        ``{"_meta": {"hostvars": {...}}, "all": {"children": [...], "vars": {...}}, GROUP: {"hosts":
        [...]}, ...}``; hosts in sinfo's order, group names sorted.
    """
    nodes = parse_sinfo(text)
    partitions = {p for n in nodes.values() for p in n.partitions}
    groups: dict[str, list[str]] = {}
    hostvars: dict[str, dict[str, Any]] = {}
    for node in nodes.values():
        hv: dict[str, Any] = {}
        if partition is None and node.partitions and node.default_partition is None:
            hv["slurm_partition"] = node.partitions[0]
        hostvars[node.name] = hv
        names = [_group_name(p) for p in node.partitions]
        for feature in node.features:
            g = _group_name(feature)
            names.append(f"feature_{g}" if feature in partitions else g)
        for gres in node.gres:
            t = gres_type(gres)
            if t:
                names.append(_group_name(t))
        for g in dict.fromkeys(names):
            groups.setdefault(g, []).append(node.name)
    all_vars: dict[str, Any] = {"ansible_connection": "slurm"}
    if partition:
        all_vars["slurm_partition"] = partition
    if launcher:
        all_vars["slurm_launcher"] = launcher
    children = sorted(groups)
    out: dict[str, Any] = {
        "_meta": {"hostvars": hostvars},
        "all": {"children": ["slurm", "ungrouped"], "vars": all_vars},
        "slurm": {"hosts": list(nodes), "children": [c for c in children if c != "slurm"]},
        "ungrouped": {"hosts": []},
    }
    for g in children:
        if g == "slurm":
            continue
        out[g] = {"hosts": groups[g]}
    return out


def load_slurm_inventory(spec: str, *, env: Mapping[str, str] | None = None,
                         timeout_s: float = 60.0) -> dict[str, Any]:
    """Run ``sinfo`` (through ``$FLEETCTL_SLURM_LAUNCHER`` when set) and build the source's JSON.

    Args:
        spec: ``"slurm:"`` or ``"slurm:PARTITION"``.
        env: the environment to read the launcher from (default ``os.environ``).
        timeout_s: deadline for sinfo, seconds.

    Raises:
        InventoryError: (exit 2, one line naming the source) a bad spec or launcher, sinfo missing,
            failing or silent past the deadline, or no node in the partition.
    """
    env = os.environ if env is None else env
    partition = parse_spec(spec)
    try:
        launcher_text = slurm_launcher(env)  # set but empty, or naming no program: refused (util.envvars)
    except InputError as exc:
        raise InventoryError(str(exc), file=spec) from None
    client = SlurmClient(parse_launcher(launcher_text))
    argv = client.command(sinfo_argv(partition=partition))
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=client_env(env),
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise InventoryError(f"cannot run {argv[0]}: not found (install slurm-client, or set {LAUNCHER_ENV} "
                             f"to reach a login node)", file=spec) from None
    except subprocess.TimeoutExpired:
        raise InventoryError(f"sinfo did not answer within {timeout_s:g} s (launcher: {client.describe()})",
                             file=spec) from None
    if res.returncode != 0:
        raise InventoryError(f"sinfo failed (exit {res.returncode}): {last_line(res.stderr) or 'no output'}",
                             file=spec)
    inventory = inventory_from_sinfo(res.stdout, partition=partition, launcher=launcher_text)
    if not inventory["slurm"]["hosts"]:
        what = f"partition {partition}" if partition else "the cluster"
        raise InventoryError(f"sinfo lists no node in {what}", file=spec)
    return inventory


def list_json(argument: str) -> dict[str, Any]:
    """The ``slurm:`` scheme's function for :data:`fleetctl.inventory.sources.SCHEMES`:
    ``-i slurm:`` (argument ``""``) or ``-i slurm:PARTITION``."""
    return load_slurm_inventory(f"slurm:{argument}")
