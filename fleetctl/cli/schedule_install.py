"""Putting a scheduled job in place: systemd unit files and their timer, or a crontab line.

The side of ``fleetctl schedule`` that writes files and runs programs (:mod:`fleetctl.schedule` renders
what is written). Both report in lines (``out``/``err`` callables) and return an exit status: 0 done,
1 not done (what was written stays, and the line says what to run by hand).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from .. import schedule as sch
from .app import EXIT_FAILED

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")


def user_unit_dir() -> Path:
    """Where systemd's user manager reads the user's own units: ``$XDG_CONFIG_HOME/systemd/user`` or
    ``~/.config/systemd/user`` (systemd.unit(5), "User Unit Search Path")."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg.startswith("/") else Path.home() / ".config"
    return base / "systemd" / "user"


#: The comment line of a service unit naming the folders ``fleetctl schedule`` made for its unit
#: files (a JSON list): ``--remove`` takes each away once it is left empty, and only those.
MADE_FOLDERS = "# fleetctl schedule made these folders (removed when left empty): "


def made_folders(text: str | None) -> list[str]:
    """The folders a unit file's :data:`MADE_FOLDERS` line names (``[]`` when none, or unreadable)."""
    import json

    for line in (text or "").splitlines():
        if line.startswith(MADE_FOLDERS):
            try:
                got = json.loads(line[len(MADE_FOLDERS):])
            except ValueError:
                return []
            return [str(p) for p in got if isinstance(p, str) and p.startswith("/")] if isinstance(got, list) else []
    return []


def with_made_folders(units: dict[Path, str], unit_dir: Path) -> dict[Path, str]:
    """``units`` with the service's :data:`MADE_FOLDERS` line: the folders writing them will make
    (``unit_dir`` and the parents of it not there yet, below the home folder: ``~/.config``,
    ``systemd``, ``user`` on a fresh account), with those another of fleetctl's units in ``unit_dir`` names (the last job
    removed takes them all away)."""
    import json

    made = []
    folder, home = unit_dir, Path.home()
    while not folder.exists() and folder != folder.parent and folder != home and home in folder.parents:
        made.append(str(folder))
        folder = folder.parent
    if unit_dir.is_dir():
        for other in sorted(unit_dir.glob("*.service")):
            try:
                text = other.read_text(errors="replace")
            except OSError:
                continue
            if sch.written_by_fleetctl(text):
                made += [p for p in made_folders(text) if p not in made]
    if not made:
        return units
    return {path: text + f"{MADE_FOLDERS}{json.dumps(sorted(made, key=len, reverse=True))}\n"
            if path.suffix == ".service" else text for path, text in units.items()}


def _write(path: Path, text: str) -> str:
    """Write atomically (temporary file + rename), mode 0644; returns ``wrote``/``updated``/``unchanged``."""
    old = path.read_text() if path.exists() else None
    if old == text:
        return "unchanged"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.fleetctl-tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, path)
    return "wrote" if old is None else "updated"


def _tail(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return " / ".join(lines[-3:]) or "no message"


def run_tool(tool: str, exe: str, args: list[str], *, input: str | None = None,
             timeout_s: float = 120) -> str | None:
    r"""Run ``tool`` (``systemctl`` or ``crontab``, found at ``exe``) with ``args`` (``input`` on its
    stdin); ``None`` when it exited 0, else the line that says how it failed: ``\`systemctl --user
    enable ...\` failed (exit N): its last 3 lines of output`` (a program that cannot start or
    outlives ``timeout_s`` seconds fails with exit 1)."""
    argv = [exe, *args]
    try:
        res = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        res = subprocess.CompletedProcess(argv, 1, "", str(exc))
    if res.returncode == 0:
        return None
    return f"`{shlex.join([tool, *args])}` failed (exit {res.returncode}): {_tail(res.stderr or res.stdout)}"


def install_systemd(units: dict[Path, str], name: str, *, system: bool, systemctl: str | None,
                    out=print, err=None) -> int:
    """Write the unit files, then ``systemctl [--user] daemon-reload`` and ``enable --now NAME.timer``.

    Args:
        units: path -> content.
        systemctl: the systemctl executable, or None when there is none.
        out, err: where messages go (callables taking one line).

    Returns:
        0 enabled; 1 systemctl missing or failed (the unit files stay written; err says what to run, and
        ``fleetctl schedule --remove`` to take them away).
    """
    err = err or (lambda line: print(line, file=sys.stderr))
    for path, text in units.items():
        out(f"{_write(path, text)} {path}")
    scope = [] if system else ["--user"]
    steps = [[*scope, "daemon-reload"], [*scope, "enable", "--now", f"{name}.timer"]]
    howto = " && ".join(shlex.join(["systemctl", *s]) for s in steps)
    undo = f"fleetctl schedule --remove --name {name}{' --system' if system else ''}"
    if not systemctl:
        err("fleetctl: error: systemctl not found: the unit files are written but the timer is not enabled; "
            f"on a machine run by systemd, enable it with: {howto}  (or schedule with --cron); "
            f"to take the files away: {undo}")
        return EXIT_FAILED
    for step in steps:
        failed = run_tool("systemctl", systemctl, step)
        if failed is not None:
            err(f"fleetctl: error: {failed}")
            err(f"fleetctl: the unit files are written but the timer is not enabled; enable it with: {howto}"
                + ("" if system else "  (a --user manager needs a login session or lingering: "
                                     "loginctl enable-linger)")
                + f"; to take the files away: {undo}")
            return EXIT_FAILED
    return 0


def read_crontab(crontab: str) -> str:
    """The current user's crontab (``crontab -l``); empty when there is none yet.

    Raises:
        RuntimeError: crontab -l failed for another reason than "no crontab" (so nothing is overwritten).
    """
    res = subprocess.run([crontab, "-l"], capture_output=True, text=True, timeout=60)
    if res.returncode == 0:
        return res.stdout
    if "no crontab" in (res.stderr + res.stdout).lower():
        return ""
    raise RuntimeError(f"`crontab -l` failed (exit {res.returncode}): {_tail(res.stderr or res.stdout)}")


def install_cron(line: str, name: str, *, crontab: str | None, out=print, err=None) -> int:
    """Put ``line`` into the current user's crontab (``crontab -l`` then ``crontab -``), replacing our
    earlier line for ``name`` (crontab(5); see :func:`fleetctl.schedule.merge_crontab`).

    Returns:
        0 installed or already there; 1 crontab missing or failed (the crontab is left as it was).
    """
    err = err or (lambda text: print(text, file=sys.stderr))
    if not crontab:
        err("fleetctl: error: crontab not found (Debian/Ubuntu: apt-get install cron); add this line with "
            f"`crontab -e`:\n{line}")
        return EXIT_FAILED
    try:
        current = read_crontab(crontab)
        text, action = sch.merge_crontab(current, line, name)
        if action != "unchanged":
            failed = run_tool("crontab", crontab, ["-"], input=text, timeout_s=60)
            if failed is not None:
                raise RuntimeError(failed)
    except (OSError, subprocess.TimeoutExpired, RuntimeError) as exc:
        err(f"fleetctl: error: {exc}; the crontab is unchanged")
        return EXIT_FAILED
    out(f"crontab: {action} {sch.marker(name)}")
    return 0


def installed_job(name: str, cron: bool, unit_dir: Path) -> sch.Installed | None:
    """The job ``name`` holds now (:mod:`fleetctl.schedule.installed`): our crontab line, or the unit
    files in ``unit_dir``. None when there is none, or the crontab cannot be read (installing then
    fails and says so)."""
    if cron:
        crontab = shutil.which("crontab")
        try:
            return sch.from_crontab(read_crontab(crontab), name) if crontab else None
        except (OSError, subprocess.TimeoutExpired, RuntimeError):
            return None
    texts = [p.read_text(errors="replace") if p.is_file() else None
             for p in (unit_dir / f"{name}.service", unit_dir / f"{name}.timer")]
    return sch.from_units(*texts)


def installed_jobs(unit_dirs: list[Path]) -> list[tuple[str, sch.Installed]]:
    """Every job ``fleetctl schedule`` installed that this user can read: the lines of the current
    user's crontab marked ``# fleetctl:NAME`` and the services in ``unit_dirs`` that fleetctl wrote
    (:func:`fleetctl.schedule.written_by_fleetctl`), as ``(NAME, job)``. What cannot be read is left out."""
    jobs: list[tuple[str, sch.Installed]] = []
    crontab = shutil.which("crontab")
    try:
        table = read_crontab(crontab) if crontab else ""
    except (OSError, subprocess.TimeoutExpired, RuntimeError):
        table = ""
    for name in sch.crontab_names(table):
        found = sch.from_crontab(table, name)
        if found is not None:
            jobs.append((name, found))
    for folder in dict.fromkeys(unit_dirs):
        try:
            services = sorted(folder.glob("*.service"))
        except OSError:
            continue
        for path in services:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if sch.written_by_fleetctl(text):
                jobs.append((path.name[:-len(".service")], sch.from_units(text, None)))
    return jobs
