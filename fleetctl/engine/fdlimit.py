"""The open-file budget of a run: raise the soft RLIMIT_NOFILE, or say clearly that it is too low.

Each host keeps its log file open for the whole run (1 descriptor), and each host being worked on
holds a TCP socket plus transient pipes and files (counted as 4). getrlimit(2)/setrlimit(2): an
unprivileged process may raise its soft limit up to the hard limit.
"""

from __future__ import annotations

import resource

from ..errors import InputError

FDS_PER_ACTIVE_HOST = 4
FDS_PER_HOST = 1
FDS_BASE = 64


def needed_fds(hosts: int, forks: int) -> int:
    """File descriptors a run over ``hosts`` hosts, ``forks`` at a time, needs (an estimate)."""
    return FDS_BASE + hosts * FDS_PER_HOST + min(hosts, forks) * FDS_PER_ACTIVE_HOST


def ensure_fd_budget(hosts: int, forks: int) -> int:
    """Raise the soft limit to what the run needs (up to the hard limit); return the soft limit.

    Raises:
        InputError: even the hard limit is too low (names both numbers and what to do).
    """
    need = needed_fds(hosts, forks)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    target = need if hard == resource.RLIM_INFINITY else min(hard, max(need, soft))
    if target >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    raise InputError(
        f"{hosts} hosts with --forks {forks} need about {need} open files, but the limit is {soft} "
        f"(hard limit {hard}); raise it (ulimit -n, or LimitNOFILE= in a systemd unit) or lower --forks"
    )
