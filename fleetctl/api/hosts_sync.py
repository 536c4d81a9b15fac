"""The blocking form of a selection of hosts: :class:`Hosts`, each operation
:class:`~fleetctl.api.hosts.AsyncHosts`' coroutine run to its end (:func:`fleetctl.api.sync.run_sync`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .results import RunResult
from .sync import run_sync

Observer = Any  # an observer object or a callable: see fleetctl.api.observe


class Hosts:
    """The hosts a pattern selects in a :class:`~fleetctl.api.fleet.Fleet` (``fleet.select(...)``),
    with blocking operations: each is :class:`AsyncHosts`' coroutine run to its end
    (:func:`fleetctl.api.sync.run_sync`; inside a running event loop, e.g. Jupyter, it runs in a
    worker thread and blocks that loop until done: use :attr:`aio` there instead).

    Example::

        nodes = fleet.select("gpu-nodes:!gpu03")
        result = nodes.run(["nvidia-smi", "-L"], timeout=30)
        for host, r in result.items():
            print(host, r.status, r.stdout)
    """

    def __init__(self, fleet: Any, pattern: str, limit: str | None = None) -> None:
        from .hosts import AsyncHosts

        self.aio = AsyncHosts(fleet, pattern, limit)
        """The same selection with the operations as coroutines (:class:`~fleetctl.api.hosts.AsyncHosts`)."""

    # real ``def``s, not ``property(lambda ..., doc=...)``: the API page (mkdocstrings) shows only these
    @property
    def fleet(self) -> Any:
        """The fleet (:class:`~fleetctl.api.fleet.Fleet`)."""
        return self.aio.fleet

    @property
    def pattern(self) -> str:
        """The host pattern (Ansible's patterns and node sets: ``"gpu-nodes:!gpu03"``)."""
        return self.aio.pattern

    @property
    def limit(self) -> str | None:
        """The ``--limit`` pattern, or None."""
        return self.aio.limit

    @property
    def names(self) -> list[str]:
        """The selected host names, in Ansible's order (a new list each time).

        Raises:
            InputError: the pattern matches nothing or a host's settings cannot work.
        """
        return self.aio.names

    def __repr__(self) -> str:
        return repr(self.aio).replace("AsyncHosts", "Hosts", 1)

    def __len__(self) -> int:
        return len(self.aio)

    def __iter__(self):
        return iter(self.aio)

    def _sync(self, method: Callable[..., Any], *args: Any, **kw: Any) -> RunResult:
        return run_sync(lambda: method(*args, **kw))

    def run(self, argv: Sequence[str], *, timeout: float = 600.0, forks: int = 50,
            observers: Iterable[Observer] | None = None) -> RunResult:
        """Run ``argv`` on every host and wait for the result: :meth:`~fleetctl.api.hosts.AsyncHosts.run` (arguments,
        return value and errors are its)."""
        return self._sync(self.aio.run, argv, timeout=timeout, forks=forks, observers=observers)

    def facts(self, *, forks: int = 50, observers: Iterable[Observer] | None = None,
              phase_timeout: Mapping[str, float] | Sequence[str] | str | None = None) -> RunResult:
        """Gather every host's facts and wait: :meth:`~fleetctl.api.hosts.AsyncHosts.facts`."""
        return self._sync(self.aio.facts, forks=forks, observers=observers, phase_timeout=phase_timeout)

    def copy(self, src: str | Path, dest: str, *, timeout: float = 600.0, forks: int = 50,
             observers: Iterable[Observer] | None = None) -> RunResult:
        """Copy a file or folder to every host and wait: :meth:`~fleetctl.api.hosts.AsyncHosts.copy`."""
        return self._sync(self.aio.copy, src, dest, timeout=timeout, forks=forks, observers=observers)

    def fetch(self, src: str, dest: str | Path, *, timeout: float = 600.0, forks: int = 50,
              observers: Iterable[Observer] | None = None, flat: bool = False) -> RunResult:
        """Fetch a file or folder from every host and wait: :meth:`~fleetctl.api.hosts.AsyncHosts.fetch`."""
        return self._sync(self.aio.fetch, src, dest, timeout=timeout, forks=forks, observers=observers, flat=flat)

    def deploy(self, playbook: str | Path | None = None, *, mode: str = "apply",
               tags: str | Sequence[str] | None = None, skip_tags: str | Sequence[str] | None = None,
               extra_vars: Mapping[str, Any] | None = None, serial: str | int | Sequence[str | int] | None = None,
               max_fail_percentage: float | None = None, force: bool = False, staged: bool = False,
               build: str | None = None, phase_timeout: Mapping[str, float] | None = None, forks: int = 50,
               observers: Iterable[Observer] | None = None) -> RunResult:
        """Run a playbook on the hosts and wait: :meth:`~fleetctl.api.hosts.AsyncHosts.deploy` (``mode``: ``"apply"``,
        ``"plan"`` or ``"dry_run"``)."""
        return self._sync(self.aio.deploy, playbook, mode=mode, tags=tags, skip_tags=skip_tags, extra_vars=extra_vars,
                          serial=serial, max_fail_percentage=max_fail_percentage, force=force, staged=staged,
                          build=build, phase_timeout=phase_timeout, forks=forks, observers=observers)

    def verify(self, playbook: str | Path | None = None, *, mode: str = "apply",
               extra_vars: Mapping[str, Any] | None = None, phase_timeout: Mapping[str, float] | None = None,
               forks: int = 50, observers: Iterable[Observer] | None = None) -> RunResult:
        """Verify the installed kernels and wait: :meth:`~fleetctl.api.hosts.AsyncHosts.verify`."""
        return self._sync(self.aio.verify, playbook, mode=mode, extra_vars=extra_vars, phase_timeout=phase_timeout,
                          forks=forks, observers=observers)

    def rollback(self, to: str | int = "previous", *, mode: str = "apply",
                 extra_vars: Mapping[str, Any] | None = None, forks: int = 50,
                 observers: Iterable[Observer] | None = None) -> RunResult:
        """Make a kept staged environment live again and wait: :meth:`~fleetctl.api.hosts.AsyncHosts.rollback`."""
        return self._sync(self.aio.rollback, to, mode=mode, extra_vars=extra_vars, forks=forks, observers=observers)
