"""Whether a host that has planned takes part in settling its arch class (pure: its plan and the
run's class coordinator), so that the runner lets a host that needs nothing from its group go on at
once (:mod:`fleetctl.engine.runner`, "Dead hosts delay no one")."""

from __future__ import annotations

from typing import Any

from .classes import ClassCoordinator


def wait_reason(grace_s: float, twins: tuple[str, ...] = ()) -> str:
    """Why a host that planned waits for its group (``class.waiting``'s ``reason``), for at most
    ``grace_s`` seconds: its arch class is settled with its group, or, for a host that needs no
    class (:func:`needs_no_class`) but has ``twins`` (:func:`fleetctl.engine.windows.machine_twins`),
    its twins may share a folder it builds or installs in (:func:`twin_settles`), named as such
    (operator trial: a twin's wait read "its arch class is settled ...")."""
    if twins:
        from ..inventory.nodeset import fold_hosts

        return (f"{fold_hosts(twins)}, another inventory name of its machine and login user, may share a folder it "
                f"builds or installs in (only their facts tell): it is settled with them, for at most {grace_s:g} s")
    return (f"its arch class is settled with the hosts of its group still gathering facts or planning (one "
            f"may hold, build or need the class's wheel), for at most {grace_s:g} s")


def needs_no_class(plan: Any, classes: ClassCoordinator, each: bool) -> bool:
    """Whether a host's first plan gives it no part in settling an arch class, so that it goes on
    at once, as a late host does (its role assigned alone), never waiting :data:`~fleetctl.engine.runner.SETTLE_GRACE_S`
    for a member stuck after connect (fresh operators' trials: an up-to-date host, a host of
    ``verify`` and a host refused while planning each waited 20 s for a host whose nvidia-smi hung):

    - a plan refused before any command would run, for a cause of its own: it is in no class
      (:func:`refused_alone`); not one that fails only the build preflight (``cannot_build``), which
      may yet receive the wheel a member builds;
    - a plan with no ``build_wheel`` to do (``verify``, a playbook that builds nothing, every
      build skipped): it builds, serves and receives nothing;
    - every build reuses the wheel the host holds or is pushed its class's wheel, with that wheel
      in the controller's cache (checked this run; not with ``--force``), so that no member needs
      this host to serve it; with ``each`` (``--build each``: no member serves another) reusing is
      enough.

    A host that builds, may serve its wheel, or may receive one waits for its group (and says for
    whom: ``class.waiting``), and so does a host another host of the batch names on one machine
    (:func:`fleetctl.engine.windows.machine_twins`) when its plan builds or installs into a folder
    (:func:`twin_settles`)."""
    if plan is None:
        return False
    if plan.blocking is not None:
        return refused_alone(plan)
    for o in plan.outcomes:
        if o.action != "build_wheel" or o.status == "skipped":
            continue
        data = o.data or {}
        action, key = (data.get("decision") or {}).get("action"), data.get("key")
        if each and action == "reuse":
            continue
        if action not in ("reuse", "push") or not isinstance(key, str) or classes.wheels.givable(key) is None:
            return False
    return True


def refused_alone(plan: Any) -> bool:
    """Whether ``plan`` failed before any command would run for a cause of the host's own: it is
    in no arch class (:meth:`ClassCoordinator.withdraw`: it would name a builder that never
    builds). A host that fails only the build preflight (``decision.cannot_build``) is not: a
    member that can build may yet hand it the wheel."""
    blocking = getattr(plan, "blocking", None)
    return blocking is not None and not ((blocking.data or {}).get("decision") or {}).get("cannot_build")


def twin_settles(host: str, classes: ClassCoordinator) -> bool:
    """Whether ``host``, when another host of the batch names its machine
    (:func:`fleetctl.engine.windows.machine_twins`), settles with its group rather than going on
    alone: only when its plan claimed a folder it builds or installs in
    (:class:`~fleetctl.engine.targets.InstallTargets`, a venv or a workdir its twin may share), so
    that whether two twins are refused for one folder never depends on which planned first. A run
    that claims none (``verify``, a playbook without ``build_wheel`` or ``pip_install``) waits for no
    twin (README, "Dead hosts delay no one": an operator's ``verify`` of gpu03 waited 20 s for its
    twin gpu04, whose nvidia-smi hung)."""
    return bool(classes.targets.claims.get(host))
