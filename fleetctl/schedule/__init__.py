"""``fleetctl schedule``, the pure part: render a systemd timer + service, or a crontab line, that run
``fleetctl deploy`` unattended (the nightly rebuild, ``playbooks/nightly.yaml``; alerting on it:
docs/report.md). Nothing here touches a file or runs a program; :mod:`fleetctl.cli.schedule` writes
and enables what this renders.

What the scheduled job is: ``FLEETCTL -i INVENTORY deploy --hosts PATTERN --playbook PLAYBOOK --json``
(every path absolute) in the folder ``fleetctl schedule`` ran in, with ``FLEETCTL_HOME`` set, so that
the run record (``$FLEETCTL_HOME/runs/<run_id>/run.json``), the JSON summary on stdout and the exit
status (0 ok, 1 a host failed, 2 bad input) are what an alert reads.

The package: :mod:`.job` (the options, validated, and :class:`Job`), :mod:`.systemd` (the timer and
service units, systemd's quoting), :mod:`.crontab` (the crontab line, merged into a crontab) and
:mod:`.installed` (the job a name already holds, read back, so only the same job is replaced).
"""

from .crontab import CRON_LOG_KEEP_BYTES, cron_line, marker, merge_crontab, remove_from_crontab
from .installed import (HEADER, Installed, check_metrics_shared, check_replace, crontab_names, from_crontab,
                        from_units, written_by_fleetctl)
from .job import (
    DEFAULT_TIMEOUT, KILL_AFTER_S, NAME_RE, ON_FAILURE_RE, UNIT_TYPES, Job, check_name,
    check_on_failure, default_name, parse_at, parse_timespan,
)
from .systemd import on_calendar, render_service, render_timer, systemd_exec, systemd_path, systemd_quote

__all__ = ["CRON_LOG_KEEP_BYTES", "DEFAULT_TIMEOUT", "HEADER", "KILL_AFTER_S", "NAME_RE", "ON_FAILURE_RE", "UNIT_TYPES",
           "Installed", "Job", "check_metrics_shared", "check_name", "check_on_failure", "check_replace", "cron_line", "crontab_names", "default_name",
           "from_crontab", "from_units",
           "marker", "merge_crontab", "on_calendar", "parse_at", "parse_timespan", "render_service",
           "remove_from_crontab", "render_timer", "systemd_exec", "systemd_path", "systemd_quote", "written_by_fleetctl"]
