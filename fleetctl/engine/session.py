"""A host session: one open connection plus the host's remote folders and what the run learnt of it.

Remote paths never collide between hosts or between concurrent runs, even when hosts share a
home folder over NFS: the working folder is per inventory host (``~/.fleetctl/<host>`` unless the
``workdir`` var says otherwise), per login user where several share one (``<workdir>/<user>`` in a
shared base, as /tmp: ``own_workdir`` in ``playbooks/scripts/session_start.py``, which makes the
folders with the host's first command, :mod:`fleetctl.engine.session_start`), and every run gets
its own sub-folder ``runs/<run_id>``, created private to the user (0700).
"""

from __future__ import annotations

import posixpath
import sys
from dataclasses import dataclass, field
from typing import Any

from ..connection.base import Connection
from ..connection.registry import HostRef
from ..errors import FleetError, TaskFailed
from ..util.paths import host_folder
from .deadlines import FACTS_TIMEOUT_S


def default_venv(host: Any) -> str | None:
    """The host's ``venv`` var; for a local host without one, the controller's own venv if any."""
    if host.venv:
        return host.venv
    if host.connection == "local" and sys.prefix != sys.base_prefix:
        return sys.prefix
    return None


def host_ref(host: Any) -> HostRef:
    """The host as its connection kind sees it (name + typed settings).

    Raises:
        InventoryError: the host's connection kind is unknown (see ``Host.problem``).
    """
    return host.ref


def unreachable_facts(scope: Any, host: Any, cause: str) -> dict[str, Any]:
    """The facts of a host that could not be reached: ``reachable: false``, the ``error`` naming
    the cause, and what its connection kind knows of it without reaching it (for a drained Slurm
    node, Slurm's view under ``slurm``: state, reason, who drained it and when)."""
    facts: dict[str, Any] = {"reachable": False, "error": cause}
    try:
        facts.update(scope.connection(host_ref(host)).extra_facts())
    except (FleetError, ValueError):  # a host whose settings cannot even make a connection
        pass
    return facts


@dataclass
class HostSession:
    """Everything fleetctl knows about one host during one run.

    Attributes:
        host: the inventory host.
        conn: its open connection.
        run_id: this run's id.
        workdir: absolute remote working folder (per host).
        run_dir: absolute remote folder for this run (``<workdir>/runs/<run_id>``).
        facts: gathered facts (empty until gathered).
        registered: results registered by tasks (``register:``).
        files: remote path -> sha256 of what this run's tasks left there (see ``TaskResult.files``).
        stamps: remote wheel path -> its build stamp, from this run's tasks (see ``TaskResult.stamps``).
        trees: remote folder -> tree hash of what this run's ``copy`` tasks put there.
        sources: remote folder -> the controller folder this run's ``copy`` tasks put there.
        probes: read-only command results, reused until the host is first changed.
        prefetched: read-only command results the run's first command got on the host (see
            :mod:`fleetctl.engine.session_start`), keyed as :attr:`probes`; each is reported (its
            lines to the log) when a planner first asks it, then kept in :attr:`probes`.
        asked: the probes' keys asked this run, in order, with their deadlines (seconds), but
            those asked after a simulated change of the same pass: what the next run's first
            command answers ahead.
        changed: a step changed the host (the probe caches were cleared).
        told: the notes told for this host this run: a note its planner gives in the planning
            pass and again in the apply pass (or the dry run's shown pass) is told once.
        simulated: a step that would change the host was simulated in the current pass.
    """

    host: Any
    conn: Connection
    run_id: str
    workdir: str = ""
    run_dir: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    registered: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    stamps: dict[str, dict[str, Any]] = field(default_factory=dict)
    trees: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    probes: dict[tuple, Any] = field(default_factory=dict)
    prefetched: dict[tuple, Any] = field(default_factory=dict)
    asked: dict[tuple, float | None] = field(default_factory=dict)
    changed: bool = False
    simulated: bool = False
    told: set[str] = field(default_factory=set)
    #: async callables run before the connection closes (the deploy lock's release)
    cleanups: list[Any] = field(default_factory=list)
    #: the deploy lock this run holds on the host (:class:`~fleetctl.engine.session_start.Started`),
    #: and once known, how it was lost (:func:`fleetctl.engine.lockwatch.lock_loss`)
    lock: Any = None
    lock_loss: Any = None
    #: the venv this pass's later tasks use instead of the inventory's (a staged version, see
    #: ``TaskResult.venv``), and the gathered facts while later tasks see replaced keys
    venv_in_use: str | None = None
    gathered_facts: dict[str, Any] | None = None
    #: the host's planned pass changes nothing between its venv_stage and venv_switch: the stage
    #: and the switch keep the live venv (set by the planning passes, see
    #: :func:`fleetctl.engine.host.nothing_to_stage`; the apply pass uses the same verdict)
    keep_live: bool = False
    #: ``(venv, folder)`` while planning after a dry run's stage (``TaskResult.stand_in``): the
    #: probes of later tasks naming ``venv`` (not made yet) are asked of ``folder``, the live venv
    stand_in: tuple[str, str] | None = None

    def use_venv(self, venv: str | None, facts: dict[str, Any]) -> None:
        """From now on in this pass, tasks use ``venv`` (when given) and see ``facts``' keys
        replaced (a key set to ``None`` is removed); the recorded facts stay as gathered."""
        if self.gathered_facts is None:
            self.gathered_facts = self.facts
        if venv:
            self.venv_in_use = venv
        merged = {**self.facts, **facts}
        self.facts = {k: v for k, v in merged.items() if v is not None}

    def reset_venv(self) -> None:
        """Back to the inventory's venv and the gathered facts (each pass starts there)."""
        if self.gathered_facts is not None:
            self.facts = self.gathered_facts
        self.gathered_facts = self.venv_in_use = self.stand_in = None

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def venv(self) -> str | None:
        return self.venv_in_use or default_venv(self.host)

    @property
    def python(self) -> str:
        """The interpreter builds and installs use: ``<venv>/bin/python3`` (``python3`` without a venv)."""
        venv = self.venv
        return posixpath.join(venv, "bin", "python3") if venv else "python3"

    def base_workdir(self) -> str:
        """The workdir as the inventory gives it: absolute, or relative to the home folder
        (``~/x``; a bare relative one is refused at load); ``.fleetctl/<host>`` by default (the name
        made one folder name: :func:`~fleetctl.util.paths.host_folder`)."""
        base = self.host.workdir or posixpath.join(".fleetctl", host_folder(self.host.name))
        if base == "~":
            return "."
        return base[2:] if base.startswith("~/") else base

    def set_folders(self, workdir: str) -> None:
        """``workdir`` (absolute) and this run's folder under it."""
        self.workdir = workdir
        self.run_dir = posixpath.join(workdir, "runs", self.run_id)

    def folder_error(self, what: str) -> TaskFailed:
        """The run folder could not be made: ``what`` plus a hint (a missing home folder named),
        unless ``what`` names the fix itself (a read-only or full workdir)."""
        hint = ""
        if "set the host var workdir" in what:
            pass
        elif not self.host.workdir and getattr(self.conn, "home_missing", False):
            hint = (f" (the home folder {self.conn.home} of the login user does not exist on the host: set the "
                    f"workdir var to a folder the user can write, e.g. workdir: /tmp/fleetctl)")
        elif not self.host.workdir:
            hint = " (set the host var 'workdir' to a folder the login user can write)"
        return TaskFailed(self.host.name, f"{what}{hint}")

    async def gather_facts(self, *, timeout_s: float = FACTS_TIMEOUT_S, read_only: bool = False) -> dict[str, Any]:
        """Gather the host's facts (one upload, one command), store and return them; ``read_only``:
        leave nothing on the host (:func:`fleetctl.facts.gather.gather_facts`).

        The ``fallback_archs`` var (default ``9.0a;12.0a``) is the arch list of a host without an
        NVIDIA driver; a host whose driver is broken fails (:mod:`fleetctl.build.gpustack`).

        Raises:
            TaskFailed, TransferError, CommandTimeout, HostUnreachable: see
            :func:`fleetctl.facts.gather.gather_facts`.
        """
        from ..facts.gather import gather_facts
        from ..facts.venv import installs_build_requirements
        from .wheelcache import class_wheel_like

        settings = self.host.settings
        facts = await gather_facts(
            self.conn, venv=self.venv, cuda_home=settings.cuda_home, workdir=self.run_dir,
            fallback_archs=settings.fallback_archs, timeout_s=timeout_s, max_jobs=settings.max_jobs,
            gpu_timeout_s=settings.gpu_probe_timeout_s, verify_device=settings.verify_device, read_only=read_only,
            install_requirements=installs_build_requirements(self.host.vars), class_wheel=class_wheel_like,
        )
        return self.finish_facts(facts)

    def finish_facts(self, facts: dict[str, Any]) -> dict[str, Any]:
        """Facts as the run keeps them: the connection's own view added, a ``cuda_home`` var the
        host does not honour noted; stored and returned."""
        facts.update(self.conn.extra_facts())
        from ..facts.refusals import cuda_home_problem, warning

        problem = cuda_home_problem(facts, self.host.cuda_home, self.host.var_origin("cuda_home"))
        if problem:  # a warning, as every problem a deploy refuses (facts reads WARNING, not ok)
            found = (facts.get("cuda") or {}).get("home") or "no toolkit"
            facts.setdefault("build", {}).setdefault("notes", []).insert(0, warning(f"{problem}; found {found} instead"))
        from ..util.shared import share

        self.facts = share(facts)  # the run keeps every host's facts: equal strings kept once
        return facts


async def close_session(session: HostSession) -> None:
    """Run the session's cleanups (never raising), then close its connection: a command the
    closing cuts off is an interruption (:attr:`Connection.closed_here`,
    :class:`~fleetctl.errors.ClosedHere`), never the host unreachable: the host is let go of
    because the run is done with it or ending, not because it failed."""
    for fn in reversed(session.cleanups):
        try:
            await fn()
        except Exception:  # noqa: BLE001 - closing must go on
            pass
    session.cleanups.clear()
    session.conn.closed_here = True  # whatever the kind's close does (a no-op for local)
    await session.conn.close()
