"""``fleetctl schedule``: install the unattended deploy (the nightly rebuild) as a systemd timer + service
(systemd.timer(5), systemd.service(5)) or as a crontab(5) line. What is written is rendered by
:mod:`fleetctl.schedule`; this module validates the options and writes the job's files;
:mod:`fleetctl.cli.schedule_install` writes the units or the crontab line and runs ``systemctl`` or
``crontab``; :mod:`fleetctl.cli.schedule_remove` takes a job away (``--remove``).

Exit status (``--remove``: see that module): 0 installed (or printed); 1 the units are written but systemctl is missing or failed, or
crontab is missing or failed (the message says what to run); 2 bad input.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from .. import schedule as sch
from ..schedule import varsfile
from .app import EXIT_FAILED, INVENTORY_FLAGS, Context, given_pattern_option, main, pass_ctx, with_extra_before
from ..errors import InputError
from ..util.paths import not_regular, resolve_default, state_dir
from .schedule_env import job_env, not_carried_notes
from .schedule_install import (SYSTEM_UNIT_DIR, install_cron, install_systemd, installed_job, installed_jobs,
                               user_unit_dir, with_made_folders)

def fleetctl_command(argv0: str | None = None, executable: str | None = None) -> tuple[str, ...]:
    """How the job runs fleetctl: this ``fleetctl`` script (``sys.argv[0]`` resolved) when that is what
    runs, else ``sys.executable -m fleetctl`` (the interpreter's path kept as is: a venv's python3 is a
    symlink that must stay the venv's)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    p = Path(argv0)
    if argv0 and p.name.startswith("fleetctl") and p.suffix != ".py" and p.is_file() and os.access(p, os.X_OK):
        return (str(p.resolve()),)
    return (os.path.abspath(executable), "-m", "fleetctl")


def _check_vars_files(files: list[str]) -> dict[str, dict]:
    """``-e @FILE`` items: each must load; one holding secrets must be private to its owner (the
    job reads it every night). Returns ``{absolute path: its vars}``."""
    from .extravars import load_vars_file, private_to_owner

    out: dict[str, dict] = {}
    for f in files:
        path = _abs(f)
        doc = load_vars_file(path)
        if varsfile.has_secrets(doc) and not private_to_owner(Path(path)):
            raise InputError(f"-e @{f}: holds secrets but others may read it; chmod 600 {shlex.quote(path)}",
                             file=path)
        out[path] = doc
    return out


def _split_extra(items: tuple[str, ...]) -> list[tuple[str, Any]]:
    """``-e`` items, each checked now (:func:`fleetctl.cli.extravars.inline_vars`: deploy's forms),
    in the order given: ``("file", PATH)`` for an ``@FILE``, PATH made absolute against the current
    folder now (:func:`_abs`: the job runs later, from elsewhere; ``_check_vars_files`` keys its
    answer by that same path), ``("inline", {...})`` for the ``NAME=VALUE`` pairs and JSON/YAML
    mappings between two of them (merged). Kept in order because a later ``-e`` wins in deploy (as
    in Ansible), so the job's ``-e`` items must keep it too."""
    from .extravars import inline_vars

    segments: list[tuple[str, Any]] = []
    for item in items:
        inline = inline_vars(item)
        if inline is None:
            segments.append(("file", _abs(item[1:])))
        elif segments and segments[-1][0] == "inline":
            segments[-1][1].update(inline)
        else:
            segments.append(("inline", dict(inline)))
    return segments


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable only by its owner (mode 0600, folder 0700), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.fleetctl-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _job_inventory(sources: list[str]) -> tuple[str, ...]:
    """Every ``-i`` source, in order, as the job will pass it: a path (file or folder) made absolute
    (the loader's order: a scheme source that is also an existing path is the path), a scheme source
    (``slurm:``) or a host list as given. A source that is none of these is refused now, naming it."""
    from ..errors import InventoryNotFound
    from ..inventory.sources import is_scheme_source

    out = []
    for source in sources:
        if is_scheme_source(source):
            out.append(source)
        elif os.path.exists(source):
            out.append(_abs(source))
        elif "," in source:  # a host list (-i 'gpu01,gpu02,')
            out.append(source)
        else:
            raise InventoryNotFound(source, INVENTORY_FLAGS)
    return tuple(out)


#: What --remove takes besides itself: how the job is addressed; every other option is refused.
_REMOVE_TAKES = {"remove", "name", "playbook_path", "cron", "user_units", "print_only"}


def _unschedule(name: str, *, cron: bool, system: bool, print_only: bool) -> None:
    """``--remove`` (:mod:`fleetctl.cli.schedule_remove`); exits with its status. Raises InputError
    for an option that installs (``--at``, ``-e``...): it would be silently ignored."""
    from .schedule_remove import remove_cron, remove_systemd

    ctx = click.get_current_context()
    for param in ctx.command.params:
        if param.name not in _REMOVE_TAKES and ctx.get_parameter_source(param.name) not in (
                click.core.ParameterSource.DEFAULT, None):
            raise InputError(f"--remove: {param.opts[-1] if param.name != 'extra' else '-e'} is for scheduling; "
                             "--remove takes only --name/--playbook, --cron, --user/--system and --print")
    home = _abs(state_dir())

    def err(line: str) -> None:
        click.echo(line, err=True)

    if cron:
        rc = remove_cron(name, home=home, crontab=shutil.which("crontab"), print_only=print_only,
                         out=click.echo, err=err)
    else:
        unit_dir = SYSTEM_UNIT_DIR if system else user_unit_dir()
        try:
            rc = remove_systemd(name, unit_dir, system=system, home=home, systemctl=shutil.which("systemctl"),
                                print_only=print_only, out=click.echo, err=err)
        except OSError as exc:
            err(f"fleetctl: error: cannot remove the job's files: {exc}"
                + (" (system units need root)" if system else ""))
            rc = EXIT_FAILED
    raise click.exceptions.Exit(rc)


def _abs(path: str | Path) -> str:
    """Absolute, normalized, symlinks kept (a job that names /srv/fleet/current/... follows that link)."""
    return os.path.abspath(os.path.expanduser(str(path)))


@main.command()
@click.option("--playbook", "playbook_path", default="playbooks/nightly.yaml", show_default=True,
              help="The playbook the job deploys.")
@click.option("--hosts", "pattern", default=None, callback=given_pattern_option,
              help="Host pattern (default: the playbook's hosts; an empty one is refused).")
@click.option("--at", "at", default=None, metavar="HH:MM",
              help="Time of day, 24-hour clock, local time (required unless --remove).")
@click.option("--user/--system", "user_units", default=True, show_default=True,
              help="User units in ~/.config/systemd/user, or system units in /etc/systemd/system.")
@click.option("--cron", is_flag=True, help="A line in the current user's crontab instead of systemd units.")
@click.option("--print", "print_only", is_flag=True,
              help="Only print what would be written (unit files or the cron line); touch nothing.")
@click.option("--name", default=None,
              help="Unit name / crontab marker [default: fleetctl-<playbook stem>]: one job per NAME; a second "
                   "job for the same playbook (other hosts or inventory) needs its own NAME.")
@click.option("--remove", is_flag=True,
              help="Unschedule: disable and remove the job NAME that fleetctl schedule installed (the timer and "
                   "service, or the crontab line, and its vars files, then their folder once empty); with --name "
                   "or --playbook, --cron, --user/--system as it was scheduled. Nothing of that name: one line, exit 0.")
@click.option("--replace", is_flag=True,
              help="Replace the job NAME holds even when it deploys another playbook, inventory or hosts "
                   "(the same job is always replaced).")
@click.option("-e", "--extra-var", "--extra-vars", "extra", multiple=True, metavar="NAME=VALUE|JSON|@FILE",
              callback=with_extra_before, help="Passed to deploy as -e (deploy's forms: NAME=VALUE, a JSON/YAML mapping, @FILE), through a "
                   "file only you can read (mode 0600), never in the unit or crontab; @FILE is passed on (it "
                   "must be mode 0600 if it holds secrets).")
@click.option("--metrics-file", default=None, metavar="PATH",
              help="The job writes Prometheus metrics to PATH (*.prom in node_exporter's textfile "
                   "directory, one file per job), with fleetctl_last_success_timestamp_seconds for alerting. A PATH "
                   "whose folder is missing or takes no file (read-only, no permission), not ending .prom, or "
                   "written by another installed job is refused now (exit 2).")
@click.option("--on-failure", "on_failure", multiple=True, metavar="UNIT",
              help="OnFailure=: a unit systemd starts when the run fails (alerting), e.g. notify@%n.service.")
@click.option("--timeout", default=sch.DEFAULT_TIMEOUT, show_default=True, metavar="SPAN",
              help="TimeoutStartSec=: stop a run that takes longer (systemd.time(7): 90min, 6h, infinity).")
@click.option("--randomized-delay", default="0", show_default=True, metavar="SPAN",
              help="RandomizedDelaySec=: start up to this much later, at random.")
@click.option("--nice", type=click.IntRange(-20, 19), default=None, help="Nice= of the run (-20..19).")
@click.option("--idle-io", is_flag=True, help="IOSchedulingClass=idle (with --cron: ionice -c 3).")
@pass_ctx
def schedule(obj: Context, playbook_path: str, pattern: str | None, at: str, user_units: bool, cron: bool,
             print_only: bool, name: str | None, remove: bool, replace: bool, extra: tuple[str, ...], metrics_file: str | None,
             on_failure: tuple[str, ...], timeout: str, randomized_delay: str, nice: int | None,
             idle_io: bool) -> None:
    """Run a deploy unattended every day at HH:MM (a systemd timer, or cron).

    \b
    The job: FLEETCTL -i INVENTORY [-i ...] deploy --hosts PATTERN --playbook PLAYBOOK --json,
    in the current folder: every -i in order, each path (file or folder) absolute and
    checked now, slurm: (or a host list) as given. It uses the folders interactive runs use:
    it carries, when set now, FLEETCTL_HOME (else an absolute XDG_STATE_HOME; else
    ~/.local/state/fleetctl): run records, so fleetctl runs lists them; XDG_CACHE_HOME: the
    wheel cache; FLEETCTL_KEEP_RUNS/KEEP_DAYS, FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S,
    FLEETCTL_ANSIBLE_INVENTORY, FLEETCTL_SCRIPTS_DIR, FLEETCTL_MAX_HANDSHAKES. With slurm: or
    Slurm hosts also FLEETCTL_SLURM_LAUNCHER, SLURM_CONF, SLURM_CLUSTERS, SLURM_CONF_SERVER and
    SALLOC_ACCOUNT/PARTITION/QOS/RESERVATION/TIMELIMIT/CLUSTERS: the same cluster and launcher.
    Never SSH_AUTH_SOCK (the login's agent is gone at HH:MM: use key files or IdentityAgent),
    XDG_CONFIG_HOME or FLEETCTL_INVENTORY.
    Its exit status (0 ok, 1 a host failed, 2 bad input), the JSON
    summary and STATE/runs/<run_id>/run.json are what an alert reads;
    --on-failure UNIT makes systemd start UNIT when the run fails.

    \b
    systemd (default): writes NAME.service (Type=oneshot) and NAME.timer
    (OnCalendar=*-*-* HH:MM:00, Persistent=true), then runs systemctl [--user]
    daemon-reload and systemctl [--user] enable --now NAME.timer.
    --cron: one line in the current user's crontab, marked # fleetctl:NAME;
    the line's output goes to STATE/cron.log (cron.log.1 once over 10 MiB).
    Scheduling the same job again (same playbook, -i sources and --hosts)
    replaces it; a NAME that holds a job for another playbook, inventory or
    hosts is refused (exit 2) before anything is written: give --name NAME
    for a second job, or --replace.

    \b
    --remove unschedules: systemctl [--user] disable --now NAME.timer,
    the unit files (only ones fleetctl wrote) and the job's vars files
    removed, systemctl [--user] daemon-reload; with --cron, only the
    line marked # fleetctl:NAME. Address the job as it was scheduled
    (--name, or --playbook for the default name; --cron; --system).

    \b
    Example:
      fleetctl schedule --playbook playbooks/nightly.yaml --hosts gpu-nodes --at 02:30 \\
          --metrics-file /var/lib/node_exporter/textfile/fleetctl-nightly.prom
      fleetctl schedule --remove --name fleetctl-nightly
    """
    name = sch.check_name(name if name is not None else sch.default_name(playbook_path))
    if cron and not user_units:
        raise InputError("--system: --cron writes the current user's crontab; leave out --system (or --cron)")
    if remove:
        _unschedule(name, cron=cron, system=not user_units, print_only=print_only)
    if at is None:
        raise InputError("--at HH:MM: required (or --remove to unschedule)")
    hour, minute = sch.parse_at(at)
    segments = _split_extra(extra)
    files = [value for kind, value in segments if kind == "file"]
    inline_docs = [value for kind, value in segments if kind == "inline"]
    pairs = {k: v for doc in inline_docs for k, v in doc.items()}
    for unit in on_failure:
        sch.check_on_failure(unit)
    sch.parse_timespan(timeout, "--timeout")
    if sch.parse_timespan(randomized_delay, "--randomized-delay") is None:
        raise InputError("--randomized-delay: infinity makes no sense for a daily run")
    if cron and on_failure:
        raise InputError("--on-failure: names a systemd unit, which cron cannot start; leave out --cron "
                         "(or alert on the exit status in cron.log or on the run record)")

    # What the job will run must load now, not fail at HH:MM.
    from ..playbook import load_playbook

    playbook = resolve_default(playbook_path)
    special = not_regular(playbook)
    if special:
        raise InputError(f"--playbook: {special}", file=str(playbook))
    if not playbook.is_file():
        raise InputError("--playbook: playbook file not found", file=str(playbook))
    pb = load_playbook(str(playbook))
    pattern = pb.hosts if pattern is None else pattern  # an empty --hosts was refused (given_pattern_option)
    if not pattern:
        raise InputError("--hosts: none given and the playbook sets no 'hosts'", file=str(playbook))
    inventory = _job_inventory(obj.inventory_sources())
    given = _check_vars_files(files)
    # what the job's deploy gets: the -e items in the order given, each run of pairs as a vars file
    # (:class:`fleetctl.schedule.Job`); a later item wins, as in deploy
    job_vars = {k: v for kind, value in segments for k, v in (given[value] if kind == "file" else value).items()}
    # the hosts as the job's deploy checks them: the host settings among its -e merged over the
    # inventory's (-e build_host=TYPO, -e verify_device=gpu9 refused now, not at HH:MM)
    _, hosts = obj.select(pattern, extra_vars=job_vars)
    known = set.intersection(*(set(h.vars) for h in hosts)) if hosts else set()
    pb.check_undefined(known | set(job_vars))
    from ..api.playchecks import check_become_vars, check_extra_var_args, check_unread_build_vars, extra_var_warnings

    # the job runs unattended: a -e value the play cannot take is refused now and a misspelt -e
    # name is named now, as deploy does, not in a log read after a wrong nightly
    check_extra_var_args(pb, [*pb.select_tags(), *pb.handlers], job_vars)
    check_unread_build_vars(pb, pb.select_tags(), job_vars)
    check_become_vars([*pb.select_tags(), *pb.handlers], hosts)
    for line in extra_var_warnings(pb, dict.fromkeys([*(k for doc in given.values() for k in doc), *pairs])):
        click.echo(f"fleetctl: warning: {line}", err=True)
    metrics = None
    if metrics_file:  # the job's deploy refuses a file it cannot write: refused now, as that run would
        from ..reporting.metrics import check_metrics_path

        metrics = _abs(metrics_file)
        check_metrics_path(Path(metrics))
        if not metrics.endswith(".prom"):  # docs/report.md: the file ends in .prom
            raise InputError(f"--metrics-file {metrics}: node_exporter's textfile collector reads only *.prom "
                             f"files; give a name ending in .prom (e.g. {Path(metrics).parent / name}.prom)")

    user = pwd.getpwuid(os.geteuid()).pw_name
    # The job uses this user's state and cache folders, retention, inventory settings and (with
    # Slurm hosts) cluster: each variable the user set for them is carried, decided per variable
    # (:mod:`fleetctl.cli.schedule_env`); the login session's agent socket is not.
    home = _abs(state_dir())
    vars_paths = [varsfile.vars_file_path(home, name, i) for i in range(len(inline_docs))]
    inline_paths = iter(vars_paths)
    job_extra = tuple(f"@{value if kind == 'file' else next(inline_paths)}" for kind, value in segments)
    job = sch.Job(
        name=name, hour=hour, minute=minute, fleetctl=fleetctl_command(),
        inventory=inventory, playbook=_abs(playbook), pattern=pattern,
        workdir=_abs(Path.cwd()), home=home, env=tuple(job_env(inventory, hosts).items()),
        extra_vars=job_extra, timeout=timeout,
        randomized_delay=randomized_delay, on_failure=on_failure, nice=nice, idle_io=idle_io,
        system=not user_units, user=user, metrics_file=metrics, ssh_options=obj.ssh_options)

    def err(line: str) -> None:
        click.echo(line, err=True)

    if any(h.kind == "ssh" for h in hosts):
        for note in not_carried_notes():
            err(f"fleetctl: note: {note}")

    unit_dir = SYSTEM_UNIT_DIR if job.system else user_unit_dir()
    # one metrics file per job: each run replaces the whole file (docs/report.md)
    sch.check_metrics_shared(installed_jobs([user_unit_dir(), SYSTEM_UNIT_DIR]), job)
    if not print_only:  # before any file is written or removed
        previous = installed_job(name, cron, unit_dir)
        sch.check_replace(previous, job, replace=replace)
        if previous is not None:
            click.echo(f"{name}: replacing {previous.describe()}; now every day at {job.at}")

    for vars_path, doc in zip(vars_paths, inline_docs):
        if print_only:
            err(f"(--print: would write {vars_path}, mode 0600, with: {varsfile.masked(doc)})")
        else:
            _write_private(Path(vars_path), varsfile.vars_file_text(doc, name))
            click.echo(f"wrote {vars_path} (mode 0600): the -e values, kept out of the "
                       f"{'crontab' if cron else 'unit files'}")
    if not print_only:
        varsfile.remove_unused(home, name, len(vars_paths))  # a job scheduled again with fewer runs of pairs

    if cron:
        line = sch.cron_line(job)
        if len(line.encode()) > 999:
            err(f"fleetctl: warning: the cron line is {len(line.encode())} bytes; some crons (Debian's) cut "
                "commands at 1000: use shorter paths or systemd units")
        if print_only:
            click.echo(line)
            err(f"(--print: would put this line into {user}'s crontab with crontab -l / crontab -)")
            return
        Path(job.home).mkdir(parents=True, exist_ok=True)  # cron.log goes there
        rc = install_cron(line, name, crontab=shutil.which("crontab"), out=click.echo, err=err)
        if rc == 0:
            click.echo(f"{name}: every day at {job.at} (cron): deploy {job.playbook} to {job.pattern}; "
                       f"output in {job.home.rstrip('/')}/cron.log, run records in {job.home.rstrip('/')}/runs")
        raise click.exceptions.Exit(rc)

    units = {unit_dir / f"{name}.service": sch.render_service(job),
             unit_dir / f"{name}.timer": sch.render_timer(job)}
    if not job.system:  # --print shows them as they would be written
        units = with_made_folders(units, unit_dir)
    scope = "" if job.system else " --user"
    if print_only:
        for i, (path, text) in enumerate(units.items()):
            click.echo(("\n" if i else "") + f"# {path}\n" + text, nl=False)
        err(f"(--print: would write these files, then run: systemctl{scope} daemon-reload && "
            f"systemctl{scope} enable --now {name}.timer)")
        return
    try:
        rc = install_systemd(units, name, system=job.system, systemctl=shutil.which("systemctl"),
                             out=click.echo, err=err)
    except OSError as exc:
        err(f"fleetctl: error: cannot write the unit files: {exc}"
            + (" (system units need root; or leave out --system for user units)" if job.system else ""))
        raise click.exceptions.Exit(EXIT_FAILED) from None
    if rc == 0:
        click.echo(f"enabled {name}.timer: every day at {job.at} (OnCalendar={sch.on_calendar(hour, minute)}); "
                   f"deploys {job.playbook} to {job.pattern}")
        click.echo(f"  run now: systemctl{scope} start {name}.service; logs: journalctl{scope} -u {name}.service; "
                   f"run records: {job.home.rstrip('/')}/runs")
        if not job.system and not Path("/var/lib/systemd/linger", user).exists():
            err(f"fleetctl: note: user timers run only while {user} is logged in; to run at {job.at} "
                f"regardless: loginctl enable-linger {user}")
    raise click.exceptions.Exit(rc)
