"""Prometheus metrics of a run, for node_exporter's textfile collector (``--metrics-file PATH``).

An observer: at the end of the run (:meth:`MetricsFile.close`) it writes the run's metrics in the
Prometheus text format with ``prometheus_client`` (a fresh ``CollectorRegistry``,
``write_to_textfile``: a temporary file in the same folder renamed over PATH, so the collector
never reads half a file). node_exporter reads only files ending in ``.prom``
(``--collector.textfile.directory``).

Every series carries ``playbook`` (the playbook's file stem, e.g. ``nightly``; ``run`` for
``fleetctl run``) and ``file`` (the metrics file's name, ``fleetctl-nightly.prom``: the label
node_exporter's ``node_textfile_mtime_seconds`` has), so that several scheduled jobs can write
files side by side, one file per job (``fleetctl schedule`` refuses a file another job writes),
two jobs of one playbook included: without ``file`` their series would be the same series from two
files, which node_exporter refuses to serve ("was collected before with the same name and label
values", prometheus/node_exporter#753):

==========================================================  =========================================
``fleetctl_run_info{run_id,kind,mode,status}``              1, naming the run the file describes
                                                            (``status`` ``input_error``: refused
                                                            before it started, :func:`write_refused`)
``fleetctl_run_success``                                    1 when every host succeeded, else 0
``fleetctl_run_timestamp_seconds``                          when the run ended (Unix time)
``fleetctl_run_duration_seconds``                           how long it took
``fleetctl_run_hosts{status}``                              hosts per status
``fleetctl_last_success_timestamp_seconds``                 when the last successful run ended; kept
                                                            from the previous file when this run
                                                            failed; 0: none yet
``fleetctl_host_success{host}``                             1 the host succeeded, else 0
``fleetctl_host_status{host,status}``                       1 for the host's status, 0 for the others
``fleetctl_host_duration_seconds{host}``                    the host's time
``fleetctl_host_phase_duration_seconds{host,phase}``        seconds per phase (connect, facts, upload,
                                                            build, install, verify, command)
``fleetctl_host_build_info{host,class,archs,role,built_on}`` 1: the host's arch class and its role
                                                            (build, push, reuse, serve, fail)
``fleetctl_host_wheel_info{host,wheel,sha256}``             1: the wheel installed on the host
``fleetctl_host_environment_info{host,version,state,...}``  1: the environment the host runs (staged
                                                            environments: version, torch, torch_cuda,
                                                            kernels' sha256, live_since, failed_stage)
``fleetctl_host_environments_disk_mib{host}``               disk the kept environments use together
``fleetctl_host_last_success_timestamp_seconds{host}``      when the host last succeeded; kept
                                                            from the previous file (same playbook)
                                                            unless it succeeded in this run, also
                                                            for a host this run left out
==========================================================  =========================================

One alert rule for "no successful nightly in 26 h"::

    time() - fleetctl_last_success_timestamp_seconds{playbook="nightly"} > 26 * 3600
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path, PurePath
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Info, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

from ..util.retention import CLOCK_SLACK_S
from .environments import from_facts, metric_labels

HOST_STATES = ("ok", "failed", "unreachable", "not started", "interrupted")


def _epoch(iso: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def job_label(run: dict[str, Any]) -> str:
    """The ``playbook`` label: the playbook's file stem, or the run's kind (``run``, ``facts``)."""
    return PurePath(run["playbook"]).stem if run.get("playbook") else str(run.get("kind") or "run")


def previous_successes(path: Path, playbook: str) -> tuple[float | None, dict[str, float]]:
    """From an earlier metrics file: ``(last success of the run, {host: last success})`` for
    ``playbook``; ``(None, {})`` when there is no readable file (a damaged one is ignored)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None, {}
    run_last: float | None = None
    hosts: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.labels.get("playbook") != playbook or not s.value:
                    continue
                if s.name == "fleetctl_last_success_timestamp_seconds":
                    run_last = s.value
                elif s.name == "fleetctl_host_last_success_timestamp_seconds" and "host" in s.labels:
                    hosts[s.labels["host"]] = s.value
    except ValueError:
        return None, {}
    return run_last, hosts


def registry_for(run: dict[str, Any], previous: tuple[float | None, dict[str, float]] = (None, {}),
                 file: str | None = None) -> CollectorRegistry:
    """The metrics of ``run`` (``run.json`` as a dict), with the last-success times carried over
    from ``previous`` (:func:`previous_successes`) where this run does not renew them (pure).
    ``file``: the metrics file's name (``fleetctl-nightly.prom``), the ``file`` label of every
    series; None: no such label."""
    reg = CollectorRegistry(auto_describe=True)
    pb = job_label(run)
    base = ["playbook", "file"] if file else ["playbook"]
    bv = (pb, file) if file else (pb,)
    hosts: dict[str, dict[str, Any]] = run.get("hosts") or {}
    ended = _epoch(run.get("finished")) or _epoch(run.get("started")) or 0.0
    started = _epoch(run.get("started"))
    applied = (run.get("mode") or "apply") == "apply"
    success = run.get("status") == "ok" and applied

    Info("fleetctl_run", "The run this file describes.", [*base], registry=reg).labels(*bv).info(
        {"run_id": str(run.get("run_id", "")), "kind": str(run.get("kind", "")), "mode": str(run.get("mode", "")),
         "status": str(run.get("status", ""))})
    g = Gauge("fleetctl_run_success", "1 when every host of the run succeeded, else 0.", [*base], registry=reg)
    g.labels(*bv).set(1 if success else 0)
    Gauge("fleetctl_run_timestamp_seconds", "When the run ended (Unix time).", [*base],
          registry=reg).labels(*bv).set(ended)
    Gauge("fleetctl_run_duration_seconds", "How long the run took.", [*base],
          registry=reg).labels(*bv).set(max(0.0, ended - started) if started else 0.0)
    counts = Gauge("fleetctl_run_hosts", "Hosts of the run per status.", [*base, "status"], registry=reg)
    for state in HOST_STATES:
        counts.labels(*bv, state).set(sum(1 for h in hosts.values() if h.get("status") == state))
    last_run, last_hosts = previous
    Gauge("fleetctl_last_success_timestamp_seconds",
          "When the last successful run ended (Unix time; kept across failed runs; 0: none yet).",
          [*base], registry=reg).labels(*bv).set(ended if success else (last_run or 0.0))

    ok = Gauge("fleetctl_host_success", "1 when the host succeeded in this run, else 0.", [*base, "host"],
               registry=reg)
    status = Gauge("fleetctl_host_status", "1 for the host's status in this run, 0 for the others.",
                   [*base, "host", "status"], registry=reg)
    took = Gauge("fleetctl_host_duration_seconds", "The host's time in this run.", [*base, "host"], registry=reg)
    phase = Gauge("fleetctl_host_phase_duration_seconds", "The host's seconds per phase in this run.",
                  [*base, "host", "phase"], registry=reg)
    build = Info("fleetctl_host_build", "The host's arch class and its role in it (build, push, reuse, serve, "
                 "fail).", [*base, "host"], registry=reg)
    wheel = Info("fleetctl_host_wheel", "The wheel installed on the host.", [*base, "host"], registry=reg)
    environment = Info("fleetctl_host_environment", "The Python environment the host runs (staged environments: "
                       "version, state, torch, kernels' sha256, since when; failed_stage after a failed stage).",
                       [*base, "host"], registry=reg)
    env_disk = Gauge("fleetctl_host_environments_disk_mib", "Disk the host's kept environments use together (MiB, "
                     "shared files once).", [*base, "host"], registry=reg)
    host_last = Gauge("fleetctl_host_last_success_timestamp_seconds",
                      "When the host last succeeded (Unix time; kept across failed runs).", [*base, "host"],
                      registry=reg)
    for name, h in hosts.items():
        st = str(h.get("status") or "?")
        ok.labels(*bv, name).set(1 if st == "ok" else 0)
        for state in dict.fromkeys((*HOST_STATES, st)):
            status.labels(*bv, name, state).set(1 if state == st else 0)
        took.labels(*bv, name).set(float(h.get("duration_s") or 0))
        per_phase: dict[str, float] = {}
        for span in h.get("phases") or []:
            per_phase[str(span.get("phase"))] = per_phase.get(str(span.get("phase")), 0.0) + float(
                span.get("duration_s") or 0)
        for p, seconds in per_phase.items():
            phase.labels(*bv, name, p).set(round(seconds, 3))
        for t in h.get("tasks") or []:
            data = t.get("data") or {}
            decision = data.get("decision") or {}
            key = str(data.get("key") or decision.get("key") or "")[:16]
            if t.get("action") == "build_wheel" and key and t.get("status") != "skipped":
                role = "fail" if t.get("status") in ("failed", "unreachable") else str(decision.get("action") or "build")
                build.labels(*bv, name).info({"class": key, "archs": str(data.get("archs") or decision.get("archs") or ""),
                                             "role": role, "built_on": str(data.get("pushed_from") or
                                                                           (name if role == "build" else ""))})
            if t.get("action") == "pip_install" and t.get("status") in ("ok", "changed") and data.get("sha256"):
                wheel.labels(*bv, name).info({"wheel": PurePath(str(data.get("wheel") or "")).name,
                                             "sha256": str(data["sha256"])})
        env = h.get("environment") or from_facts(h.get("facts"))
        if env:
            environment.labels(*bv, name).info(metric_labels(env))
            disk = (env.get("disk") or {}).get("total_mib")
            if disk is not None:
                env_disk.labels(*bv, name).set(float(disk))
        last = ended if st == "ok" and applied else last_hosts.get(name)
        if last:
            host_last.labels(*bv, name).set(last)
    for name, last in last_hosts.items():  # a host this run left out keeps its last success too
        if name not in hosts and last:
            host_last.labels(*bv, name).set(last)
    return reg


def check_writable(path: Path) -> None:
    """Make sure ``path``'s folder takes the file before the run starts: create and remove a probe
    file there (the write itself is a temporary file in that folder renamed over ``path``), so a
    read-only file system or a folder without write permission is refused up front rather than a
    warning after the run, which cron never notices.

    Raises:
        OSError: the folder does not take a new file (e.g. ``EROFS``, ``EACCES``, ``ENOSPC``).
    """
    import os
    import tempfile

    fd, probe = tempfile.mkstemp(prefix=".fleetctl-probe-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(probe)


def check_metrics_path(path: Path, option: str = "--metrics-file") -> None:
    """Refuse a metrics file this controller's user could not write, before anything runs or is
    scheduled: its folder missing, ``path`` itself a folder (the file is written by renaming a
    temporary file over it, which a folder refuses: operator trial, a warning after the whole run,
    ``cannot write: Is a directory``, and the run's own exit code; docs/report.md), or a folder that
    takes no new file (:func:`check_writable`: a read-only file system, no write permission). The one check of a run's ``--metrics-file``
    and of ``fleetctl schedule --metrics-file`` (a job whose metrics could never be written is
    refused when it is made, not found out after a night's run).

    Raises:
        InputError (exit 2, one line naming ``option``, the path and the cause).
    """
    from ..errors import InputError

    if not path.parent.is_dir():
        raise InputError(f"{option}: folder {path.parent} does not exist")
    if path.is_dir():
        raise InputError(f"{option} {path}: is a folder, not a file; give a file in it "
                         f"(e.g. {path / 'fleetctl.prom'})")
    try:
        check_writable(path)
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write in folder {path.parent}: {exc.strerror or exc}") from None


def write_metrics(run: dict[str, Any], path: Path) -> str | None:
    """Write ``run``'s metrics to ``path`` atomically, carrying the last-success times over from
    the file already there. Returns a warning when this successful run ended before the last
    success the file held (the controller's clock went back, as before NTP syncs after a bad RTC;
    operator trial: a clock 400 days behind wrote a success 400 days old): the time is written as
    the clock gives it all the same, since keeping the later one would hide every failure for as
    long as a clock set ahead had put that one ahead, while an alert on an old success
    (``time() - fleetctl_last_success_timestamp_seconds > ...``) errs on the side of a page.

    Raises:
        OSError: the file cannot be written.
    """
    previous = previous_successes(path, job_label(run))
    write_to_textfile(str(path), registry_for(run, previous, file=path.name))
    ended, last = _epoch(run.get("finished")) or _epoch(run.get("started")), previous[0]
    if run.get("status") != "ok" or (run.get("mode") or "apply") != "apply" or not ended or not last \
            or ended >= last - CLOCK_SLACK_S:
        return None
    return (f"--metrics-file {path}: this run ended at {_utc(ended)} by the controller's clock, before the last "
            f"success the file held ({_utc(last)}): the clock is behind, or was ahead then; "
            f"fleetctl_last_success_timestamp_seconds is written as the clock says")


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


#: ``fleetctl_run_info``'s ``status`` of a run refused for its input (:func:`write_refused`).
INPUT_ERROR = "input_error"


def write_refused(path: Path | str, playbook: str, kind: str) -> None:
    """Record in ``path`` a run refused for its input before it started (exit 2: a bad inventory,
    playbook or option): ``fleetctl_run_info{status="input_error"}``, ``fleetctl_run_success 0``,
    no host, the last-success times kept from the file already there (:func:`write_metrics`).
    Without it a scheduled job whose input went bad (an operator trial: one host's misspelt var)
    left the last good run's file, ``fleetctl_run_success 1``, and the dashboards green. A file
    that cannot be written is left as it is: the refusal is the one line the command prints.

    Args:
        path: the ``--metrics-file``.
        playbook: the playbook as given (its stem is the ``playbook`` label, as a run's).
        kind: the command (``deploy``, ``verify``).
    """
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    run = {"playbook": playbook, "kind": kind, "mode": "apply", "status": INPUT_ERROR, "run_id": "",
           "started": now, "finished": now, "hosts": {}}
    try:
        write_metrics(run, Path(path))
    except OSError:
        pass


class MetricsFile:
    """An observer writing ``path`` when the run ends (see the module docstring)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def close(self, run: Any) -> None:
        try:
            warning = write_metrics(run.as_json(), self.path)
            if warning:
                print(f"fleetctl: warning: {warning}", file=sys.stderr)
        except OSError as exc:
            print(f"fleetctl: warning: --metrics-file {self.path}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
