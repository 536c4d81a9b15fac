"""How many past runs are kept: the policy, and which runs it removes (pure).

Runs are counted per class (:func:`run_class`): ad-hoc runs (``run``, ``facts``, ``copy``,
``fetch``) apart from playbook runs (``deploy``, ``verify``, ``rollback``, a schedule's), so a
notebook loop of quick ``fleetctl run`` calls never pushes a failed deploy's record (and its build
log) out. A run is kept while it is one of the newest ``keep_runs`` ENDED runs OF ITS CLASS and not
older than ``keep_days`` days; the others are pruned, except a run still in progress (never
pruned, and not counted among the ``keep_runs``), the runs named in
``pinned`` (the runs the retry sets point to: ``--retry-failed`` reads them) and, per play (its
kind, playbook and inventory), the newest run that succeeded and the newest run that failed (a
deploy's last good state is never lost to a burst of failed retries, and the failure a retry
set or a ``fleetctl logs RUN HOST`` hint names is never lost to a burst of other runs). The same policy prunes the run records on the controller
(:mod:`fleetctl.reporting.prune`, at the end of every run and with ``fleetctl runs prune``) and the
per-run folders fleetctl leaves on a host (``<workdir>/runs/<run_id>``, pruned by the first command
of a deploy: ``playbooks/scripts/session_start.py``; there a folder changed within the last hour is
kept too, since ``verify`` and ``run`` take no deploy lock and may be using it).

"Newest" is by when a run ENDED, not when it started (:func:`end_order`): each run prunes when
it ends, and the run that just ended is then the newest of its class, so it never removes its own
record. Ranked by start, a one-hour burn-in ``fleetctl run`` beside a script calling
``nodes.run(...)`` every minute was kept while it ran, then removed by its own prune at its end as
"older" than the ``keep_runs`` quick runs started after it (operator trial: ``fleetctl runs``
lacked it, ``fleetctl logs --host`` found no log, ``RunResult.record_dir`` named a removed folder).
Runs in progress are not counted, so any number of them never pushes out the run that just ended.

A wrong controller clock removes no record (operator trial: a clock a year ahead pruned real
records, one 400 days behind had its run's record pruned by the next normal run). The order of
ends is the order of numbers the runs took when they ended from the counter that numbers the
records as they are made (``ended``, else ``seq`` for a record without one,
:mod:`fleetctl.reporting.order`), not their ids' times;
the newest :data:`KEEP_MIN` runs of each class (at most ``keep_runs``) are never removed for their
age, as restic's ``forget --keep-last n`` never deletes the n latest snapshots whatever the
other rules say (a clock set ahead makes every record look old); and while any record is dated
later than now (by more than :data:`CLOCK_SLACK_S`: the clock went back, or that record was made
under a clock set ahead) no record is removed for its age at all, since ages measured from such a
clock mean nothing. :func:`clock_disagrees` words the warning.

Defaults: ``FLEETCTL_KEEP_RUNS`` (50 per class) and ``FLEETCTL_KEEP_DAYS`` (30) in the controller's
environment; per host, the host vars ``keep_runs`` and ``keep_days`` win for its folders.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import InputError
from .envvars import check_count

DEFAULT_KEEP_RUNS = 50
DEFAULT_KEEP_DAYS = 30.0
#: Run kinds that are ad-hoc commands (counted apart from playbook runs).
AD_HOC_KINDS = frozenset({"run", "facts", "copy", "fetch"})
RUN_ID_TIME = "%Y%m%dT%H%M%S.%fZ"
#: The newest runs of each class (in the order made) never removed for their age.
KEEP_MIN = 10
#: Seconds a record may be dated later than now before the clock is taken to disagree with it
#: (clocks of one controller step by less after NTP's first sync; a minute of slack).
CLOCK_SLACK_S = 60.0


@dataclass(frozen=True)
class RetentionPolicy:
    """Keep at most ``keep_runs`` runs (>= 1) of each class (:func:`run_class`), none older than
    ``keep_days`` days (> 0)."""

    keep_runs: int = DEFAULT_KEEP_RUNS
    keep_days: float = DEFAULT_KEEP_DAYS

    def as_job(self) -> dict[str, float]:
        """The policy as the host script reads it (JSON)."""
        return {"keep_runs": self.keep_runs, "keep_days": self.keep_days}


def check_keep_runs(value: object, what: str) -> int:
    """``value`` as a run count >= 1 (:func:`fleetctl.util.envvars.check_count`).

    Raises:
        InputError: naming ``what`` (the variable or option) and the value.
    """
    return check_count(value, what, "runs")


def check_keep_days(value: object, what: str) -> float:
    """``value`` as a positive, finite number of days.

    Raises:
        InputError: naming ``what`` and the value.
    """
    try:
        days = float(str(value).strip())
    except ValueError:
        days = -1.0
    if not math.isfinite(days) or days <= 0:
        raise InputError(f"{what}: want a positive number of days, got {value!r}")
    return days


def policy_from_env(environ: Mapping[str, str] | None = None) -> RetentionPolicy:
    """The policy the controller's environment sets (``FLEETCTL_KEEP_RUNS``, ``FLEETCTL_KEEP_DAYS``).

    Raises:
        InputError: a variable that is not a valid count or number of days (exit 2, naming it).
    """
    env = os.environ if environ is None else environ
    runs = env.get("FLEETCTL_KEEP_RUNS", "").strip()
    days = env.get("FLEETCTL_KEEP_DAYS", "").strip()
    return RetentionPolicy(keep_runs=check_keep_runs(runs, "FLEETCTL_KEEP_RUNS") if runs else DEFAULT_KEEP_RUNS,
                           keep_days=check_keep_days(days, "FLEETCTL_KEEP_DAYS") if days else DEFAULT_KEEP_DAYS)


def run_time(run_id: str) -> datetime | None:
    """When a run started, read from its id (``20261201T224422.962Z-e1a0cd``), or None."""
    text = run_id.split("-", 1)[0]
    if len(text) == 20 and text[8] == "T" and text[15] == "." and text[19] == "Z" and text[:8].isdigit() \
            and text[9:15].isdigit() and text[16:19].isdigit() and text.isascii():
        try:  # the form fleetctl writes (fleetctl.engine.model.new_run_id), without strptime's import
            return datetime(int(text[:4]), int(text[4:6]), int(text[6:8]), int(text[9:11]), int(text[11:13]),
                            int(text[13:15]), int(text[16:19]) * 1000, tzinfo=timezone.utc)
        except ValueError:
            return None
    try:
        return datetime.strptime(text, RUN_ID_TIME).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def run_class(kind: object) -> str:
    """The class a run is counted in: ``"ad-hoc"`` for :data:`AD_HOC_KINDS`, ``"play"`` for any
    other known kind (deploy, verify, rollback, a schedule's), ``"unknown"`` for a record that
    does not say."""
    if not kind:
        return "unknown"
    return "ad-hoc" if str(kind) in AD_HOC_KINDS else "play"


@dataclass(frozen=True)
class RunEntry:
    """What the policy knows of one run: its id, start, whether it is in progress, succeeded or
    failed (an applied run, not a plan), its play (``(kind, playbook, inventory)``; None when
    unknown), its kind (``run``, ``deploy``...; None when unknown) and its place in the order
    records were made (``seq``, :mod:`fleetctl.reporting.order`; None for a record made before it)
    and in the order runs ended (``ended``: the number it took from the same counter when it ended;
    None while in progress, for a run whose controller was killed, or a record made before it)."""

    run_id: str
    started: datetime | None
    in_progress: bool = False
    succeeded: bool = False
    play: tuple | None = None
    kind: str | None = None
    failed: bool = False
    seq: int | None = None
    ended: int | None = None


def made_order(r: RunEntry) -> tuple[int, int, str]:
    """Sort key: the order runs were made in (``seq``; runs without one first, by id)."""
    return (0, 0, r.run_id) if r.seq is None else (1, r.seq, r.run_id)


def end_order(r: RunEntry) -> tuple[int, int, str]:
    """Sort key: the order runs ended in (``ended``; a run without one ended, as far as is known,
    when it was made: ``seq``; runs with neither first, by id). Both numbers come from one counter
    (:mod:`fleetctl.reporting.order`), so they compare."""
    n = r.ended if r.ended is not None else r.seq
    return (0, 0, r.run_id) if n is None else (1, n, r.run_id)


def clock_disagrees(runs: Sequence[RunEntry], policy: RetentionPolicy, now: datetime) -> str | None:
    """One line saying how the clock ``now`` disagrees with the records, or None: a record dated
    later than now (the clock went back, or that run was made under a clock set ahead), else the
    newest run dated more than ``keep_days`` after the one made before it (the clock jumped
    ahead, or nothing ran for that long)."""
    dated = [r for r in runs if r.started is not None]
    if not dated:
        return None
    late = max(dated, key=lambda r: r.started)
    if (late.started - now).total_seconds() > CLOCK_SLACK_S:
        return (f"the controller's clock says {_utc(now)}, earlier than run record {late.run_id} "
                f"(made at {_utc(late.started)} by the clock of then): the clock went back, or that run "
                f"was made under a clock set ahead; no run record is removed for its age until they agree")
    made = sorted(dated, key=made_order)
    if len(made) >= 2 and (made[-1].started - made[-2].started).total_seconds() > policy.keep_days * 86400:
        return (f"run {made[-1].run_id} is dated {_utc(made[-1].started)}, over {policy.keep_days:g} days after "
                f"the run made before it ({made[-2].run_id}, {_utc(made[-2].started)}): if the controller's clock "
                f"is set ahead, set it right; the newest {min(KEEP_MIN, policy.keep_runs)} runs of each class are "
                f"kept whatever their age")
    return None


def _utc(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def runs_to_prune(runs: Sequence[RunEntry], policy: RetentionPolicy, now: datetime,
                  pinned: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The ids of ``runs`` the policy removes, oldest first (in the order made; see the module
    docstring): each class (:func:`run_class`) keeps its newest ``policy.keep_runs`` ended runs (in
    the order they ended, :func:`end_order`; runs in progress are not counted); never one in
    progress, in ``pinned``, or a play's newest (by end) success or failure; none for its age among
    its class's newest :data:`KEEP_MIN`, nor at all while a run is dated later than ``now`` (by
    over :data:`CLOCK_SLACK_S`). A run whose start is unknown counts as new (it is never removed
    for its age)."""
    newest_first = sorted((r for r in runs if not r.in_progress), key=end_order, reverse=True)
    floor = min(KEEP_MIN, policy.keep_runs)
    ages_count = all((r.started - now).total_seconds() <= CLOCK_SLACK_S for r in runs if r.started is not None)
    keep: set[str] = set(pinned)
    seen: set[tuple] = set()
    for r in newest_first:
        if r.play is None:
            continue
        for outcome, hit in (("ok", r.succeeded), ("failed", r.failed)):
            if hit and (outcome, r.play) not in seen:
                seen.add((outcome, r.play))
                keep.add(r.run_id)
    out = []
    by_id = {r.run_id: r for r in runs}
    counted: dict[str, int] = {}
    for r in newest_first:
        cls = run_class(r.kind)
        rank = counted.get(cls, 0)
        counted[cls] = rank + 1
        if r.run_id in keep:
            continue
        too_old = ages_count and rank >= floor and r.started is not None \
            and (now - r.started).total_seconds() > policy.keep_days * 86400
        if rank >= policy.keep_runs or too_old:
            out.append(r.run_id)
    return sorted(out, key=lambda i: made_order(by_id[i]))
