"""Where the scripts that run ON hosts live (``playbooks/scripts/``, stdlib-only Python 3.8+).

fleetctl is used from a checkout (``pip install -e .``), so the canonical copies stay in the
repository's ``playbooks/scripts/`` folder, next to the package, and travel to hosts by SFTP.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FleetError
from ..util.envvars import scripts_dir
from ..util.paths import REPO_ROOT


def scripts_dirs() -> list[Path]:
    """Folders searched for host scripts, in order: ``$FLEETCTL_SCRIPTS_DIR`` when set, then
    ``<repo>/playbooks/scripts`` next to the ``fleetctl`` package.

    Raises:
        InputError: ``FLEETCTL_SCRIPTS_DIR`` set but empty, or not a folder.
    """
    dirs = []
    given = scripts_dir()  # set but empty, or not a folder: refused (util.envvars)
    if given:
        dirs.append(Path(given))
    dirs.append(REPO_ROOT / "playbooks" / "scripts")
    return dirs


def script_path(name: str) -> Path:
    """The local path of the host script ``name`` (``"facts.py"``).

    Raises:
        FleetError: ``name`` is not a plain file name, or no searched folder holds it
            (the message lists the folders).
    """
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise FleetError(f"invalid script name {name!r}")
    dirs = scripts_dirs()
    for folder in dirs:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    raise FleetError(f"host script {name} not found in {', '.join(str(d) for d in dirs)}")
