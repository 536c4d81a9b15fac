"""Taking a scheduled job away: ``fleetctl schedule --remove [--name NAME] [--cron | --user/--system]``.

Why an option of ``schedule`` and not a command of its own: the job is addressed exactly as it was
installed (``--name``, or the default ``fleetctl-<playbook stem>`` from ``--playbook``; ``--cron``;
``--user``/``--system``), as Ansible's ``cron`` and ``systemd`` modules take ``state: absent`` with the
same name. Only what ``fleetctl schedule`` put there goes: unit files that start with its header
(:data:`fleetctl.schedule.HEADER`), crontab lines ending in ``# fleetctl:NAME``, and the job's own vars
files (``<state>/schedule/NAME.vars*.yaml``: the ones the job names and those of this state folder),
and that ``schedule`` folder once it is empty.
Nothing under the name is not an error (idempotent, as ``state: absent``): one line, exit 0.

Exit status: 0 removed (or nothing to remove: with no ``crontab`` program there is no crontab, so no
line of ours either); 1 the files are removed but ``systemctl`` is missing or failed, or ``crontab``
failed (the crontab is then unchanged); the line says what to run; 2 a unit of that name that
fleetctl did not write (it is left alone).

The user unit folder (``~/.config/systemd/user``) and its ``systemd`` parent, which ``schedule`` makes
when they are not there, are removed once the last unit in them is gone (only when empty: an empty
folder holds nothing of anyone's); so is ``~/.config`` when ``schedule`` made it (the service unit
names the folders it made: :data:`~fleetctl.cli.schedule_install.MADE_FOLDERS`), never one that was
there before.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath
from typing import Callable

from .. import schedule as sch
from ..errors import InputError
from ..schedule import varsfile
from .app import EXIT_FAILED
from .schedule_install import made_folders, read_crontab, run_tool

Say = Callable[[str], None]


def _job_vars_files(name: str, home: str, extra_vars: tuple[str, ...]) -> list[Path]:
    """The job's vars files that exist: those its command names (``-e @<dir>/schedule/NAME.vars*.yaml``,
    written by ``fleetctl schedule`` in the state folder it ran with) and those of ``home`` now."""
    ours = re.compile(re.escape(name) + r"\.vars(?:-\d+)?\.yaml")
    named = [item[1:] for item in extra_vars if item.startswith("@")]
    found = {p for p in named if ours.fullmatch(PurePosixPath(p).name) and PurePosixPath(p).parent.name == "schedule"}
    folder = Path(varsfile.vars_file_path(home, name)).parent
    if folder.is_dir():
        found |= {str(p) for p in folder.iterdir() if ours.fullmatch(p.name)}
    return [Path(p) for p in sorted(found) if Path(p).is_file()]


def _unlink(paths: list[Path], out: Say) -> None:
    """Remove ``paths`` (unit files, the job's vars files), then each vars files' ``schedule``
    folder that is left empty (``schedule`` makes ``<state>/schedule/`` for them: the last job
    removed leaves no empty folder behind); a folder with anything in it stays."""
    for path in paths:
        path.unlink(missing_ok=True)
        out(f"removed {path}")
    for folder in dict.fromkeys(p.parent for p in paths if p.parent.name == "schedule"):
        try:
            folder.rmdir()
        except OSError:  # not empty (another job's vars files), or already gone: it stays
            continue
        out(f"removed the empty folder {folder}")


def _drop_empty_unit_dirs(unit_dir: Path, out: Say, made: list[str] = ()) -> None:
    """Remove ``unit_dir`` (``.../systemd/user``) and then its ``systemd`` parent when they are empty
    (``schedule`` makes both with ``mkdir -p``), then each folder of ``made`` (those the removed
    service's :data:`~fleetctl.cli.schedule_install.MADE_FOLDERS` line names: a ``~/.config`` that
    ``schedule`` made), deepest first, when empty; a folder with anything in it stays."""
    fixed = [unit_dir, unit_dir.parent] if unit_dir.parent.name == "systemd" else [unit_dir]
    for folder in [*fixed, *sorted((Path(p) for p in made if Path(p) not in fixed), key=lambda p: -len(p.parts))]:
        if not folder.is_dir():
            continue
        try:
            folder.rmdir()
        except OSError:  # not empty (or not ours to remove): it stays, and so do the folders above it
            return
        out(f"removed the empty folder {folder}")


def remove_systemd(name: str, unit_dir: Path, *, system: bool, home: str, systemctl: str | None,
                   print_only: bool, out: Say, err: Say) -> int:
    """Disable and remove ``NAME.timer`` and ``NAME.service`` in ``unit_dir`` and the job's vars files:
    ``systemctl [--user] disable --now NAME.timer``, remove the files, ``systemctl [--user] daemon-reload``.

    Returns:
        0 removed (or nothing there); 1 removed but systemctl missing or failed (err says what to run).

    Raises:
        InputError: a unit of that name not written by ``fleetctl schedule`` (nothing is touched).
        OSError: a file could not be removed (system units without root).
    """
    units = [unit_dir / f"{name}.timer", unit_dir / f"{name}.service"]
    texts = {p: p.read_text(errors="replace") for p in units if p.is_file()}
    for path, text in texts.items():
        if not sch.written_by_fleetctl(text):
            raise InputError(f"schedule --remove: {path} was not written by fleetctl schedule; left alone "
                             f"(remove it with systemctl disable and rm)", file=str(path))
    installed = sch.from_units(texts.get(units[1]), texts.get(units[0]))
    files = _job_vars_files(name, home, installed.extra_vars if installed else ())
    if not texts and not files:
        out(f"{name}: no job of that name ({'system' if system else 'user'} units in {unit_dir}); nothing removed")
        return 0
    scope = [] if system else ["--user"]
    steps = [[*scope, "disable", "--now", f"{name}.timer"], [*scope, "daemon-reload"]]
    howto = " && ".join(shlex.join(["systemctl", *s]) for s in steps)
    if print_only:
        for path in [*texts, *files]:
            out(f"would remove {path}")
        err(f"(--print: would run {shlex.join(['systemctl', *steps[0]])}, remove these files, then "
            f"{shlex.join(['systemctl', *steps[1]])})")
        return 0
    if installed is not None:
        out(f"{name}: removing {installed.describe()}")
    failed: list[str] = []

    def run(step: list[str]) -> None:
        if systemctl and (why := run_tool("systemctl", systemctl, step)) is not None:
            failed.append(why)

    if texts:
        run(steps[0])  # while the unit files are still there to be disabled
    _unlink([*texts, *files], out)
    if texts:
        run(steps[1])
    if not system:
        _drop_empty_unit_dirs(unit_dir, out, [p for t in texts.values() for p in made_folders(t)])
    if not texts:
        return 0
    if not systemctl:
        failed.append("systemctl not found")
    for line in failed:
        err(f"fleetctl: error: {line}")
    if failed:
        err(f"fleetctl: the files are removed; if a systemd manager had loaded {name}.timer, stop it with: {howto}")
        return EXIT_FAILED
    out(f"disabled and removed {name}.timer")
    return 0


def remove_cron(name: str, *, home: str, crontab: str | None, print_only: bool, out: Say, err: Say) -> int:
    """Remove our crontab lines for ``name`` (``crontab -l`` then ``crontab -``; every other line kept)
    and the job's vars files.

    Returns:
        0 removed, or nothing there (no ``crontab`` program: no crontab, so nothing of ours in one;
        the job's vars files, if any, are removed); 1 crontab failed (crontab and files left as
        they were).
    """
    if not crontab:
        files = _job_vars_files(name, home, ())
        if print_only:
            for path in files:
                out(f"would remove {path}")
        else:
            _unlink(files, out)
        out(f"{name}: no crontab program on this machine, so no cron job of that name; nothing "
            f"{'else ' if files else ''}removed")
        return 0
    try:
        current = read_crontab(crontab)
    except (OSError, subprocess.TimeoutExpired, RuntimeError) as exc:
        err(f"fleetctl: error: {exc}; the crontab is unchanged")
        return EXIT_FAILED
    text, removed = sch.remove_from_crontab(current, name)
    installed = sch.from_crontab(current, name)
    files = _job_vars_files(name, home, installed.extra_vars if installed else ())
    if not removed and not files:
        out(f"{name}: no job of that name in the crontab; nothing removed")
        return 0
    if print_only:
        for line in removed:
            out(f"would remove from the crontab: {line}")
        for path in files:
            out(f"would remove {path}")
        return 0
    if removed:
        failed = run_tool("crontab", crontab, ["-"], input=text, timeout_s=60)
        if failed is not None:
            err(f"fleetctl: error: {failed}; the crontab and the job's files are unchanged")
            return EXIT_FAILED
        if installed is not None:
            out(f"{name}: removed {installed.describe()}")
        out(f"crontab: removed {len(removed)} line(s) marked {sch.marker(name)}")
    _unlink(files, out)
    return 0
