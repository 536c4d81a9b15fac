"""Every host var fleetctl itself reads, in one registry, so that a misspelling of any of them
(``ssh_confg``, ``venv_version_dir``, ``slurm_partiton``) is refused with a did-you-mean, whatever
connection kind the inventory's hosts use.

The names come from three places, and ``tests/test_inventory.py`` checks that each is covered:

- :class:`~fleetctl.inventory.settings.HostSettings` (fleetctl's typed host settings);
- each connection kind's ``SETTINGS`` model (:data:`fleetctl.connection.registry.KINDS`): the
  names that are not Ansible's (``ssh_config``, ``slurm_partition``...);
- the templates fleetctl ships (``{{ venv_keep | default(3) }}`` in ``playbooks/`` and in
  ``--staged``'s tasks), which read a host var when the inventory sets it.

Kind models are listed here by name rather than imported, so loading an inventory does not import
every connection kind (the Slurm module is not needed by an SSH run); the test compares this list
with the models.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["OWN_VARS", "PLAY_TEMPLATE_VARS", "own_var_names"]

OWN_VARS: Mapping[str, str] = MappingProxyType({
    # HostSettings (fleetctl/inventory/settings.py)
    "venv": "the Python environment builds and installs use, on the host (absolute path)",
    "cuda_home": "the CUDA toolkit folder on the host (absolute path)",
    "workdir": "the working folder on the host",
    "known_hosts": "a known_hosts file on the controller (ssh)",
    "fallback_archs": "the arch list built when the host has no NVIDIA driver",
    "build_host": "the host that builds for this host's arch class",
    "max_jobs": "parallel compile jobs",
    "keepalive_interval": "seconds between SSH keepalives",
    "deploy_lock": "the deploy lock file on the host",
    "verify_device": "where verify works: auto, cuda or cpu",
    "gpu_probe_timeout_s": "seconds nvidia-smi may take in facts",
    "keep_runs": "how many per-run folders a deploy keeps on the host",
    "keep_days": "for how many days a deploy keeps per-run folders on the host",
    # ssh kind (fleetctl/connection/ssh_kind.py SSHSettings)
    "ssh_config": "the ssh_config file read instead of ~/.ssh/config (ssh -F)",
    # slurm kind (fleetctl/connection/slurm_settings.py SlurmSettings)
    "slurm_node": "the Slurm node name",
    "slurm_partition": "the allocation's partition",
    "slurm_account": "the allocation's account",
    "slurm_qos": "the allocation's QOS",
    "slurm_time": "the allocation's time limit",
    "slurm_reservation": "the allocation's reservation",
    "slurm_exclusive": "whole nodes (default true)",
    "slurm_launcher": "a command prefix for the Slurm client tools",
    # templates fleetctl ships (playbooks/*.yaml, fleetctl/playbook/staged.py)
    "venv_versions_dir": "where staged venv versions are kept (--staged, nightly)",
    "venv_keep": "how many venv versions are kept (--staged, rollback)",
    "archs": "the arch list fp4-kernels builds for instead of the host's GPUs (-e archs='9.0a;10.0a')",
    "install_build_requirements": "the build installs missing build requirements into the venv first "
                                  "(fp4-kernels' build_wheel task; -e install_build_requirements=true)",
    "fetch_mirror": "the controller's folder of bare git repositories (or git URL prefix) CMake FetchContent "
                    "dependencies and submodules come from (sgl-kernel play; nodes need no internet)",
})
"""Var name -> what it is, for every host var fleetctl reads."""


#: Of :data:`OWN_VARS`, the names only the templates of the plays fleetctl ships read (``{{ archs |
#: default(none) }}`` in fp4-kernels.yaml...), not fleetctl's code: a play that does not template
#: one does not read it, so ``-e archs=...`` given to verify.yaml or nightly.yaml is unread
#: (:func:`fleetctl.api.playchecks.extra_var_warnings`).
PLAY_TEMPLATE_VARS = frozenset({"venv_versions_dir", "venv_keep", "archs", "fetch_mirror"})


def own_var_names() -> frozenset[str]:
    """The names of :data:`OWN_VARS`."""
    return _NAMES


_NAMES = frozenset(OWN_VARS)
