"""A selection of hosts and what can be done on it: :class:`AsyncHosts` (the operations as
coroutines) and :class:`~fleetctl.api.hosts_sync.Hosts` (the same, blocking: it runs them,
:mod:`fleetctl.api.sync`; defined in :mod:`fleetctl.api.hosts_sync`, importable from here).

Every operation is one run, recorded as the CLI's are (``<state>/runs/<run_id>/``, listed by
``fleetctl runs``), and returns a :class:`~fleetctl.api.results.RunResult`. A host's failure is in
the result, never an exception; bad input raises :class:`~fleetctl.errors.InputError` before
anything connects, with the CLI's one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from .inputs import want_argv, want_bool, want_extra_vars, want_forks, want_path, want_seconds
from .results import RunResult

Observer = Any  # an observer object or a callable: see fleetctl.api.observe


class AsyncHosts:
    """The hosts a pattern selects in a :class:`~fleetctl.api.fleet.Fleet`, with coroutine
    operations (``await hosts.run([...])``). Get one from ``fleet.aselect(pattern)`` or
    ``fleet.select(pattern).aio``.

    Attributes:
        fleet: the fleet.
        pattern: the host pattern.
        limit: the ``--limit`` pattern, or None.
    """

    def __init__(self, fleet: Any, pattern: str, limit: str | None = None) -> None:
        if not isinstance(pattern, str) or not pattern.strip():
            raise InputError(f"pattern: want a host pattern such as 'all' or 'gpu-nodes:!gpu03', got {pattern!r}")
        if limit is not None and not isinstance(limit, str):
            raise InputError(f"limit: want a host pattern (a string) or None, got {limit!r}")
        self.fleet, self.pattern, self.limit = fleet, pattern, limit
        self._names: list[str] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.pattern!r}{f' limit {self.limit!r}' if self.limit else ''}: " \
               f"{len(self.names)} host(s)>"

    @property
    def names(self) -> list[str]:
        """The selected host names, in Ansible's order.

        Raises:
            InputError: the pattern matches nothing or a host's settings cannot work.
        """
        if self._names is None:
            self._names = [h.name for h in self._select()]
        return list(self._names)

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):
        return iter(self.names)

    def _select(self, *, forks: int = 50, extra_vars: Mapping[str, Any] | None = None):
        from .fleet import select_hosts

        return select_hosts(self.fleet, self.pattern, self.limit, forks=forks, extra_vars=extra_vars)[1]

    def _warn_unread(self, kind: str) -> None:
        """The fleet's extra vars that ``kind`` (run, facts, copy, fetch: no playbook, no template)
        does not read, one line each to the fleet's ``on_warning``: the lines ``fleetctl KIND -e``
        prints (:func:`fleetctl.api.playchecks.setting_var_warnings`)."""
        from .playchecks import setting_var_warnings

        for line in setting_var_warnings(self.fleet.extra_vars, kind):
            self.fleet.on_warning(line)

    def _command(self, kind: str, *rest: str) -> list[str]:
        return ["fleetctl.api", kind, "--hosts", self.pattern, *(("--limit", self.limit) if self.limit else ()), *rest]

    async def run(self, argv: Sequence[str], *, timeout: float = 600.0, forks: int = 50,
                  observers: Iterable[Observer] | None = None) -> RunResult:
        """Run ``argv`` exactly as given (no shell; for one: ``["sh", "-c", "..."]``) on every host
        at once (``forks`` at a time), as ``fleetctl run``.

        Args:
            argv: the command and its arguments (a list of strings).
            timeout: seconds the command may run on each host (then it is stopped: the host fails).
            forks: hosts worked on at once (1 to 10000).
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).

        Returns:
            The :class:`~fleetctl.api.results.RunResult`: per host ``rc``, ``stdout``, ``stderr``,
            ``status`` (``ok`` when rc is 0), ``error``.

        Raises:
            InputError: argv is not a non-empty list of strings (an iterator is read once, before
                the check), an argument holds a NUL byte (no connection can run it), a bad timeout,
                forks or observers, or the selection is invalid.
        """
        from .adhoc import run_command
        from .observe import as_observers

        argv = want_argv(argv)  # an iterator is read once, here
        timeout = want_seconds("timeout", timeout)
        hosts = self._select(forks=want_forks(forks))
        obs = as_observers(observers)
        self._warn_unread("run")
        run, record, outputs = await run_command(
            hosts, list(argv), pattern=self.pattern, command=self._command("run", "--", *argv), observers=obs,
            verbose=self.fleet.verbose, forks=forks, timeout_s=timeout, connect_timeout_s=self.fleet.connect_timeout,
            accept_new_host_keys=self.fleet.accept_new_host_keys, ssh_options=self.fleet.ssh_options)
        return RunResult(run, record.dir, outputs)

    async def facts(self, *, forks: int = 50, observers: Iterable[Observer] | None = None,
                    phase_timeout: Mapping[str, float] | Sequence[str] | str | None = None) -> RunResult:
        """Gather every host's facts (GPUs and compute capabilities, CUDA, driver, venv, Python,
        torch, cores, memory, disk), as ``fleetctl facts``.

        Args:
            forks: hosts worked on at once (1 to 10000).
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).
            phase_timeout: per-phase deadlines, seconds, as ``fleetctl facts --phase-timeout``
                (``{"facts": 60}``, ``["facts=60"]`` or ``"facts=60"``; a mapping's values are
                numbers): ``facts`` limits each host's gathering (default
                :data:`~fleetctl.engine.deadlines.FACTS_TIMEOUT_S`, 180 s), ``connect`` its connect
                and login (default the fleet's ``connect_timeout``).

        Returns:
            The :class:`~fleetctl.api.results.RunResult`; ``result.facts`` is host ->
            :class:`~fleetctl.api.facts.HostFacts`, every host included (``result["h"].facts`` for
            one host): an unreachable host's has ``status="unreachable"``, its ``error`` and no
            facts (empty ``gpus``, None elsewhere); a host refused after gathering ``"failed"``:
            a broken GPU stack, or a problem a deploy refuses the host for (a venv that is not
            there, no torch, a full or read-only site-packages: the result is not ``ok`` then).
            Each host's ``warning:`` lines go to the fleet's ``on_warning`` as ``HOST: LINE``
            and are in its :attr:`HostFacts.warnings <fleetctl.api.facts.HostFacts.warnings>`.

        Raises:
            InputError: bad forks, observers or ``phase_timeout`` (the line the CLI prints), or the
                selection is invalid.
        """
        from .adhoc import gather_facts
        from .observe import as_observers

        hosts = self._select(forks=want_forks(forks))
        obs = as_observers(observers)
        self._warn_unread("facts")
        run, record = await gather_facts(
            hosts, pattern=self.pattern, command=self._command("facts"), observers=obs,
            verbose=self.fleet.verbose, forks=forks, connect_timeout_s=self.fleet.connect_timeout,
            accept_new_host_keys=self.fleet.accept_new_host_keys, ssh_options=self.fleet.ssh_options,
            phase_timeout=phase_timeout)
        for name, out in run.hosts.items():  # as fleetctl facts prints them: a script sees them too
            for line in out.warnings or ():
                self.fleet.on_warning(f"{name}: {line}")
        return RunResult(run, record.dir)

    async def copy(self, src: str | Path, dest: str, *, timeout: float = 600.0, forks: int = 50,
                   observers: Iterable[Observer] | None = None) -> RunResult:
        """Copy ``src`` (a file, or a folder recursively) from this controller to ``dest`` on every
        host, as ``fleetctl copy``: over SFTP (exec channels on servers without it), one ``sbcast``
        per file for Slurm hosts.

        Paths follow Ansible's copy module (``ansible.builtin.copy``, its ``src`` and ``dest``
        options: "if path ends with "/", only inside contents of that directory are copied to
        destination. Otherwise ... the directory itself with all contents is copied", as rsync):

        - a folder ``src`` without a trailing ``/`` is copied itself: ``copy("kernel_src", "/tmp/x")``
          writes ``/tmp/x/kernel_src/...``, whether ``/tmp/x`` existed or not (it is made);
        - a folder ``src`` with a trailing ``/`` copies its contents: ``copy("kernel_src/", "/tmp/x")``
          writes ``/tmp/x/...``;
        - a file ``src``: ``dest`` is the file's path, unless it ends in ``/`` or is a folder
          that exists on the host; then the file goes into it under its own name.

        Args:
            src: the controller's file or folder.
            dest: the host path (see above); ``{host}`` in it is each host's name
                (``"/tmp/dst_{host}"``), so every host gets its own DEST.
            timeout: seconds one host's whole transfer may take.
            forks: hosts worked on at once.
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).

        Returns:
            The :class:`~fleetctl.api.results.RunResult`: per host ``status``, ``files``,
            ``bytes``, ``error`` (a full disk or a permission names the path and cause).

        Raises:
            InputError: ``src`` or ``dest`` is not a path (a string or ``os.PathLike``, no NUL), ``src``
                does not exist here, a bad timeout or forks, or the selection is invalid.
        """
        src, dest = want_path("src", src, "here"), want_path("dest", dest, "on the hosts")
        return await self._transfer("copy", src, dest, timeout=timeout, forks=forks, observers=observers)

    async def fetch(self, src: str, dest: str | Path, *, timeout: float = 600.0, forks: int = 50,
                    observers: Iterable[Observer] | None = None, flat: bool = False) -> RunResult:
        """Fetch ``src`` (a file or a folder) from every host to ``dest`` here, as ``fleetctl
        fetch`` and Ansible's fetch: each file at ``dest/<host>/<its path on the host>``
        (``fetch("/var/log/syslog", "out")`` -> ``out/gpu01/var/log/syslog``), so hosts never
        overwrite each other; ``dest`` holding ``{host}`` (``"out/{host}/"``) is taken as given.
        ``{host}`` in ``src`` is each host's inventory name. Symlinks are never followed.

        Args:
            src: the file or folder on each host (``{host}``: the host's inventory name).
            dest: the folder here (made when missing) that gets ``<host>/<src's path>``; see above
                for ``{host}`` in it and for ``flat``.
            timeout: seconds one host's whole transfer may take.
            forks: hosts worked on at once (1 to 10000).
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).
            flat: Ansible's ``flat: yes``: ``dest`` is the file (a folder when it ends in ``/``);
                without ``{host}`` in ``dest``, for one host only.

        Returns:
            The :class:`~fleetctl.api.results.RunResult` (``files``: the local paths written); a
            ``src`` missing on a host fails that host, naming the path.

        Raises:
            InputError: ``src`` or ``dest`` is not a path (a string or ``os.PathLike``, no NUL),
                ``flat`` is not a bool, a bad timeout or forks, the selection is invalid, or the hosts would write
                over each other or outside ``dest`` (:func:`fleetctl.engine.fetch_paths.check_fetch`).
        """
        src, dest = want_path("src", src, "on the hosts"), want_path("dest", dest, "here")
        return await self._transfer("fetch", src, dest, timeout=timeout, forks=forks, observers=observers,
                                    flat=want_bool("flat", flat))

    async def _transfer(self, kind: str, src: Any, dest: Any, *, timeout: float, forks: int,
                        observers: Iterable[Observer] | None, flat: bool = False) -> RunResult:
        from .observe import as_observers
        from .transfer import transfer_files

        timeout = want_seconds("timeout", timeout)
        hosts = self._select(forks=want_forks(forks))
        obs = as_observers(observers)
        self._warn_unread(kind)
        run, record = await transfer_files(
            kind, hosts, src, dest, pattern=self.pattern, command=self._command(kind, src, dest),
            observers=obs, verbose=self.fleet.verbose, forks=forks, timeout_s=timeout,
            connect_timeout_s=self.fleet.connect_timeout, accept_new_host_keys=self.fleet.accept_new_host_keys,
            ssh_options=self.fleet.ssh_options, flat=flat)
        return RunResult(run, record.dir)

    async def deploy(self, playbook: str | Path | None = None, *, mode: str = "apply",
                     tags: str | Sequence[str] | None = None, skip_tags: str | Sequence[str] | None = None,
                     extra_vars: Mapping[str, Any] | None = None, serial: str | int | Sequence[str | int] | None = None,
                     max_fail_percentage: float | None = None, force: bool = False, staged: bool = False,
                     build: str | None = None, phase_timeout: Mapping[str, float] | None = None, forks: int = 50,
                     observers: Iterable[Observer] | None = None) -> RunResult:
        """Run a playbook on the hosts, as ``fleetctl deploy``.

        Args:
            playbook: the playbook file (default ``playbooks/fp4-kernels.yaml``: the FP4 kernels
                built for each host's own SM). Its ``hosts`` is not used: the selection is.
            mode: ``"apply"`` (change the hosts), ``"plan"`` (each host's decisions: build, push,
                reinstall or skip, and why; ``result.plan``) or ``"dry_run"`` (the commands it
                would run, in each task's ``planned``); plan and dry run change nothing.
            tags: only the tasks with these tags.
            skip_tags: not the tasks with these tags.
            extra_vars: vars over the hosts' (``-e``), connection settings included.
            serial: rolling batches: ``"1,10%"``, an int, or a list of them.
            max_fail_percentage: stop starting batches once more than this percent of a batch failed.
            force: rebuild and reinstall even when nothing changed.
            staged: install into a new version of each host's venv, made live only when every task
                passed (docs/staged.md).
            build: ``"once"`` (one build per arch class, pushed to the others; default) or ``"each"``.
            phase_timeout: per-phase deadlines, seconds (``{"build": 3600}``, the values numbers, or
                ``["build=3600"]``; phases: connect, facts, upload, build, install, verify, command).
            forks: hosts worked on at once.
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).

        Returns:
            The :class:`~fleetctl.api.results.RunResult` (``status`` ``ok`` or ``failed``).

        Raises:
            InputError: a bad argument, a missing or invalid playbook, an unknown tag, a var the
                playbook uses that no host defines, an invalid selection: the CLI's one line.
        """
        return await self._play("deploy", playbook, mode=mode, tags=tags, skip_tags=skip_tags, extra_vars=extra_vars,
                                serial=serial, max_fail_percentage=max_fail_percentage, force=force, staged=staged,
                                build=build, phase_timeout=phase_timeout, forks=forks, observers=observers)

    async def verify(self, playbook: str | Path | None = None, *, mode: str = "apply",
                     extra_vars: Mapping[str, Any] | None = None, phase_timeout: Mapping[str, float] | None = None,
                     forks: int = 50, observers: Iterable[Observer] | None = None) -> RunResult:
        """Verify the installed kernels on each host (default ``playbooks/verify.yaml``), as
        ``fleetctl verify``: the verify playbook alone, nothing built or installed.

        Args:
            playbook: the verification playbook (default ``playbooks/verify.yaml``).
            mode: ``"apply"``, ``"plan"`` or ``"dry_run"``, as :meth:`deploy`'s.
            extra_vars: vars over the hosts' (``-e``).
            phase_timeout: per-phase deadlines, seconds (``{"verify": 600}``), as :meth:`deploy`'s.
            forks: hosts worked on at once (1 to 10000).
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).

        Returns:
            The :class:`~fleetctl.api.results.RunResult` (``kind`` ``verify``).

        Raises:
            InputError: as :meth:`deploy`'s.
        """
        return await self._play("verify", playbook, mode=mode, extra_vars=extra_vars, phase_timeout=phase_timeout,
                                forks=forks, observers=observers)

    async def rollback(self, to: str | int = "previous", *, mode: str = "apply",
                       extra_vars: Mapping[str, Any] | None = None, forks: int = 50,
                       observers: Iterable[Observer] | None = None) -> RunResult:
        """Make a kept staged environment of each host's venv live again, as ``fleetctl rollback``:
        ``"previous"`` (the one live before the current one) or a version number (``2``). Only
        the venv's symlink moves.

        Args:
            to: ``"previous"`` or a kept version's number (an int, or its digits).
            mode: ``"apply"``, ``"plan"`` or ``"dry_run"``, as :meth:`deploy`'s.
            extra_vars: vars over the hosts' (``-e``).
            forks: hosts worked on at once (1 to 10000).
            observers: callables or observer objects (:mod:`fleetctl.api.observe`).

        Returns:
            The :class:`~fleetctl.api.results.RunResult` (``kind`` ``rollback``); a host without
            such a kept environment fails, naming what it keeps.

        Raises:
            InputError: ``to`` is neither, or as :meth:`deploy`.
        """
        from .play import rollback_to

        extra = {**want_extra_vars(extra_vars), "rollback_to": rollback_to(to)}
        return await self._play("rollback", None, mode=mode, extra_vars=extra, forks=forks, observers=observers)

    async def _play(self, kind: str, playbook: str | Path | None, *, observers: Iterable[Observer] | None,
                    **kw: Any) -> RunResult:
        from .observe import as_observers
        from .play import prepare_play, run_play

        want_forks(kw.get("forks", 50))
        obs = as_observers(observers)
        prep = prepare_play(self.fleet, playbook, kind=kind, pattern=self.pattern, limit=self.limit, **kw)
        run, record = await run_play(prep, command=self._command(kind, "--playbook", prep.play_file),
                                     observers=obs, verbose=self.fleet.verbose)
        return RunResult(run, record.dir)


from .hosts_sync import Hosts  # noqa: E402  (the sync form; fleetctl.api.hosts.Hosts as before)
