"""Arch classes: build once per class of hosts that would build the same wheel, push it to the rest.

Hosts whose build inputs are identical (see :func:`fleetctl.tasks.build_keys.build_inputs`) form
one class, named by its build key. Who does what is decided from the batch's plan, before
anything is built, so that ``--plan``, ``--dry-run`` and the deploy agree:

- a wheel for the key already in the controller's cache (an earlier batch or run built it):
  every member lacking it gets it pushed (``push``); members holding it ``reuse`` it;
- with ``--force`` (a class asked with ``force``), no wheel built before this run counts, not the
  cache's and not a member's: the builder builds, its wheel replaces the cached one (same key) and
  is pushed to every other member; a later batch of the same run reuses the wheel built in it;
- else a member already holding the wheel ``serve``\\ s it (fetched into the cache, pushed to the
  others);
- else one member builds (``build``): the one named by the class's ``build_host`` var when it is
  a member, else the first member in inventory order, among those that passed the build
  preflight; the others ``push``; when no member passed it, every member is its own ``build``er
  and fails with its own preflight's line (``--plan`` says so per host, never ``push``);
- a builder that does not reach what CMake downloads (no ``fetch_mirror``) receives the wheel
  instead; the group's other members that may build are then asked at once and the first that
  reaches builds; when none does, each fails with its own cause (:meth:`ClassCoordinator.cannot_reach`);
- but a host is never pushed a wheel it built: a member lacking the wheel that built the one the
  class would hand it (the cache's record, or the serving member's stamp, says so) builds again,
  and the members lacking the wheel get this run's (:meth:`ClassCoordinator.lost_own`).

Roles are assigned to the hosts of a batch that planned in time together (a batch larger than
``forks``: each group of hosts at work, see :mod:`fleetctl.engine.runner`); a host that connects
late is assigned on its own when it has planned: it gets the wheel when its class has one
(cached, published, or being built or served by a member assigned before), else it builds (or
serves) it itself. A later group is assigned as such a host is.

Once the roles are assigned, the wheel's hand-off from builder to members (a builder that goes
away hands the build to the next member still waiting; a build that fails is tried once more by
the next member that can build, and when that fails too its whole class fails with the builders'
errors) and this run's view of the controller's content-addressed cache
(``<cache_dir>/wheels/<key16>/``: a cached wheel that is not the wheel its record describes is never
pushed, and the run says why in one line) are :mod:`fleetctl.engine.class_wheels`'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from .class_wheels import ClassBuildFailed, ClassWheels
from .targets import InstallTargets
from .wheelcache import BuiltWheel, store_wheel, wheels_root

__all__ = ["BuiltWheel", "ClassBuildFailed", "ClassCoordinator", "store_wheel",
           "wheels_root"]


@dataclass
class _Request:
    key: str
    holds: bool
    build_host: str | None
    can_build: bool = True
    origin: str | None = None


class ClassCoordinator:
    """One per run: collects each host's class request while the batch is planned and assigns
    roles; the wheel's hand-off from builder to members while the batch is applied is
    :attr:`wheels`' (:class:`~fleetctl.engine.class_wheels.ClassWheels`).

    Args:
        order: every host of the run, in inventory order (ties are broken by it).
    """

    def __init__(self, order: list[str]) -> None:
        self.order = {h: i for i, h in enumerate(order)}
        self.requests: dict[str, _Request] = {}
        self.answered: dict[str, str] = {}
        self.assigned: dict[str, tuple[str, str]] = {}
        #: each class's wheel, its builder now, and the members waiting for it (applying)
        self.wheels = ClassWheels(self.order, self._successors, self._can_build)
        #: host -> its connection kind's run scope (set by the runner), for one-to-many fan-out
        self.scope_of: dict[str, Any] = {}
        self.run_id = "run"
        #: (key, id(scope)) -> the one-to-many send of the class's wheel to that scope's members
        #: (:func:`fleetctl.engine.class_fanout.broadcast_once`: a task the members share)
        self.fanouts: dict[tuple[str, int], asyncio.Task] = {}
        #: key -> the member that builds its class again because it lost the wheel it built
        self.rebuilds: dict[str, str] = {}
        #: class key -> its members when more than one and none passed the build preflight
        self.unbuildable: dict[str, list[str]] = {}
        #: the folders hosts build and install in, to find two hosts sharing one
        self.targets = InstallTargets(self.order)
        #: host -> its interpreter's platform facts: a one-to-many send skips a member it does not fit
        self.platforms: dict[str, Any] = {}
        #: key -> the wheel file name a builder's planned (dry-run) pass would hand out, when known
        self.planned_wheels: dict[str, str] = {}
        #: hosts whose plan failed before any command would run: in no class
        self.withdrawn: set[str] = set()
        #: hosts whose builder-only question (:class:`~fleetctl.tasks.steps.BuilderProbe`) waited
        #: for their role: planned again when it makes them the builder
        self._deferred: set[str] = set()
        #: (host, key) -> why the host, its class's builder, does not reach what CMake downloads: it
        #: receives the class's wheel, or fails with that cause when no member can build it
        self.unreached: dict[tuple[str, str], str] = {}
        #: hosts to ask their builder-only question now (:meth:`asking`), and the classes whose
        #: members that may build were all asked at once (:meth:`cannot_reach`)
        self._asking: set[str] = set()
        self._rounds: set[str] = set()
        #: key -> the members its latest :meth:`assign` gave roles (the group being planned)
        self._members: dict[str, list[str]] = {}

    def builder_of(self, key: str) -> str | None:
        """The member that builds (or serves) class ``key``'s wheel, once the class is assigned."""
        return self.wheels.builders.get(key)

    def known_wheel(self, key: str) -> tuple[str | None, str | None]:
        """``(wheel file name, builder)`` as far as they are known before anything is built: what a
        builder's planned pass would publish (its wheel from an earlier run), else the controller's
        cache (unless ``--force``), and the assigned builder (for ``--dry-run``)."""
        builder = self.wheels.builders.get(key)
        name = self.planned_wheels.get(key)
        if name is None and key not in self.wheels.fresh:
            cached = self.wheels.givable(key)
            if cached is not None:
                name, builder = cached.name, builder or cached.builder
        return name, builder

    def role(self, host: str, key: str, holds: bool, once: bool, build_host: str | None, *,
             force: bool = False, can_build: bool = True, origin: str | None = None) -> str:
        """The role of ``host`` for class ``key`` (see the module docstring). Before the batch's
        roles are assigned the answer is provisional; :meth:`assign` says which answers changed.
        ``force``: nothing built before this run is reused (``holds`` is then ``False``).
        ``can_build``: the host passed the build preflight; the builder is a member that did,
        when one did. ``origin``: the host that built the wheel ``host`` holds (see :meth:`lost_own`)."""
        if force:
            holds = False
        if not once:
            return "reuse" if holds else "build"
        if host in self.withdrawn:  # failed while planning: in no class (see withdraw)
            return "reuse" if holds else "push" if self.wheels.givable(key) is not None else "build"
        if force:
            self.wheels.fresh.add(key)
        can_build = can_build and (host, key) not in self.unreached
        self.requests[host] = _Request(key, holds, build_host, can_build, origin if holds else None)
        got = self.assigned.get(host)
        cached = self.wheels.givable(key)
        if got is not None and got[0] == key:
            answer = got[1]
        elif cached is not None:  # never pushed a wheel it built itself (lost_own)
            answer = "reuse" if holds else "build" if cached.builder == host else "push"
        else:
            answer = "serve" if holds else "build"
        self.answered[host] = answer
        return answer

    def defer(self, host: str, key: str) -> bool:
        """Whether ``host`` may ask its class's builder-only question now, while planning: its
        role in class ``key`` is assigned (it is asked only when that role is ``build``). Else it
        is noted, and :meth:`assign` plans the host again if it makes it the builder."""
        if self.assigned.get(host, ("", ""))[0] == key:
            return True
        self._deferred.add(host)
        return False

    def cannot_reach(self, host: str, key: str, why: str) -> str:
        """``host``, planned as class ``key``'s builder, does not reach what CMake would download
        (no ``fetch_mirror``; ``why``: one line naming each dependency): it cannot build, but may
        receive the wheel another member builds, as a member that fails the build preflight does
        (the warning line is told when it is given the role ``push``). The first time in a class,
        every other member of its group that may build is made a provisional builder and asked at
        once (:meth:`asking`: one round of probes, up to :data:`fleetctl.util.reachprobe.TIMEOUT_S`
        seconds, not one per member in turn); :meth:`assign` then picks the builder among those
        that reach. Returns ``host``'s
        role for now: ``"push"`` while a member may build, else ``"build"`` (it fails with its
        own cause; with other members, each does: the class's "no host ... can build" line)."""
        self.unreached[(host, key)] = why
        if host in self.requests:
            self.requests[host].can_build = False
        able = [h for h in self._members.get(key, ())  # of the group planned with it, still at work
                if h != host and not self.wheels.gone(h) and (h, key) not in self.unreached and self._can_build(h)]
        if key not in self._rounds:
            self._rounds.add(key)
            for h in able:
                self.assigned[h] = (key, "build")
            self._asking.update(able)
        return "push" if able else "build"

    def asking(self, hosts: list[str]) -> set[str]:
        """The hosts of ``hosts`` to plan again before the group's plans are final, all at once:
        builders whose builder-only question waited for their role, and the members asked after
        their class's builder could not reach (:meth:`cannot_reach`)."""
        now = {h for h in hosts if h in self._asking}
        self._asking -= now
        return now

    def due(self, hosts: list[str]) -> bool:
        """Whether hosts of ``hosts`` are still to be asked (:meth:`asking`)."""
        return any(h in self._asking for h in hosts)

    def withdraw(self, host: str) -> None:
        """``host``'s plan failed before any command would run (a preflight of another task): it
        builds, serves and receives nothing, so the roles are assigned without it (a host that
        cannot build but may receive the class's wheel is not withdrawn: see ``can_build``)."""
        self.withdrawn.add(host)
        self.requests.pop(host, None)
        self.answered.pop(host, None)

    def assign(self, hosts: list[str]) -> set[str]:
        """Assign roles for the requests of ``hosts`` (one batch, or the part of it that planned
        in time, or one host that connected late); return the hosts whose answer during planning
        differs from their role (they are planned again). A class already given a builder or
        server that is still at work is not given another: its wheel reaches these hosts too."""
        for h in self.targets.refused(hosts):  # refused for a shared folder: in no class
            self.requests.pop(h, None)
        by_key: dict[str, list[str]] = {}
        for h in sorted((h for h in hosts if h in self.requests), key=lambda h: self.order.get(h, 1 << 30)):
            by_key.setdefault(self.requests[h].key, []).append(h)
        for key, members in by_key.items():
            self._members[key] = members
            holders = [h for h in members if self.requests[h].holds]
            lacking = [h for h in members if not self.requests[h].holds]
            building = self.wheels.builders.get(key)
            lost = self.lost_own(key, members, holders, lacking)
            if lost is not None:  # it builds again; members lacking the wheel get this run's
                able = [h for h in lacking if self.requests[h].can_build]
                builder = lost if lost in able or not able else able[0]
                roles = {h: "reuse" for h in holders} | {h: "push" for h in lacking} | {builder: "build"}
                self.wheels.builders[key] = builder
                self.wheels.fresh.add(key)
                self.rebuilds[key] = lost
            elif self.wheels.givable(key) is not None or self.wheels.settled(key):
                roles = {h: "reuse" for h in holders} | {h: "push" for h in lacking}
            elif building is not None and building not in members and not self.wheels.gone(building):
                # a host that connected late (see fleetctl.engine.runner) or a later batch: a member
                # assigned before builds or serves the wheel, and it reaches this host as well
                roles = {h: "reuse" for h in holders} | {h: "push" for h in lacking}
            elif holders:
                roles = {h: "reuse" for h in holders} | {h: "push" for h in lacking}
                if lacking:
                    roles[holders[0]] = "serve"
                    self.wheels.builders[key] = holders[0]
            elif not any(self.requests[h].can_build for h in members):
                # no member can build it: none is told "push" (a wheel no one will build); each
                # is its own builder and fails with its own preflight's line (new-user trial)
                roles = {h: "build" for h in members}
                self.wheels.builders[key] = members[0]
                if len(members) > 1:
                    self.unbuildable[key] = list(members)
            else:
                able = [h for h in members if self.requests[h].can_build]
                wanted = next((self.requests[h].build_host for h in members if self.requests[h].build_host), None)
                builder = wanted if wanted in able else able[0]
                roles = {h: "push" for h in members} | {builder: "build"}
                self.wheels.builders[key] = builder
            for h, r in roles.items():
                self.assigned[h] = (key, r)
        deferred = {h for h in hosts if h in self._deferred and self.assigned.get(h, ("", ""))[1] == "build"}
        self._deferred -= set(hosts)
        self._asking |= deferred
        return ({h for h in hosts if h in self.assigned and self.answered.get(h) != self.assigned[h][1]}
                | deferred | self.targets.changed(hosts))

    def lost_own(self, key: str, members: list[str], holders: list[str], lacking: list[str]) -> str | None:
        """The member of ``members`` lacking class ``key``'s wheel that built the very wheel the
        class would hand it (the controller cache's, by its record's builder; else the wheel of
        the holder that would serve it, by that holder's stamp's ``pushed_from``), or ``None``.

        Such a host is never pushed its own wheel back: it builds again, and the members lacking
        the wheel get the one built in this run. It lost the wheel it built: a ``--force`` build
        stopped by Ctrl-C had emptied its build folder (the cache still held its earlier wheel),
        its wheel was cut short or changed and its stamp removed (pip_install promises that the
        next run rebuilds it). Pushing the cache's copy back would hide that under "pushed ...
        (built once for this arch class on n1)" on n1 itself (new-user trial), and after a
        stopped ``--force`` would quietly undo what the operator asked for."""
        if not lacking or key in self.wheels.fresh:
            return None
        cached = self.wheels.givable(key)
        if cached is not None:
            origin = cached.builder
        elif self.wheels.settled(key):  # built in this run: not lost
            return None
        elif (b := self.wheels.builders.get(key)) is not None and b not in members and not self.wheels.gone(b):
            return None  # being built or served by a member assigned before
        elif holders:
            origin = self.requests[holders[0]].origin or holders[0]
        else:
            return None
        return origin if origin in lacking else None

    def _can_build(self, host: str) -> bool:
        req = self.requests.get(host)
        return req is None or req.can_build

    def _successors(self, key: str) -> list[str]:
        """The members assigned to class ``key`` still at work, in the order they take over its
        build (:meth:`~fleetctl.engine.class_wheels.ClassWheels.fail`): those that passed the build
        preflight first, then inventory order."""
        return sorted((h for h, (k, _) in self.assigned.items() if k == key and not self.wheels.gone(h)),
                      key=lambda h: (not self._can_build(h), self.order.get(h, 1 << 30)))
