"""A hermetic controller environment for the test session (see tests/conftest.py).

:func:`hermetic_environment` points HOME, the XDG folders and FLEETCTL_HOME into one temporary
folder and unsets SSH_AUTH_SOCK, so nothing a test runs reads or writes the real ``~`` or talks to
the user's ssh-agent. :data:`REAL_HOME` is the real home folder, for tests that only read from it.
"""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

#: The real home folder of the user running the tests (from the password database, not $HOME).
REAL_HOME = pwd.getpwuid(os.getuid()).pw_dir
#: The session's temporary root: ``home/`` (HOME, XDG folders) and ``fleetctl-home/`` (FLEETCTL_HOME).
SESSION_ROOT = Path(tempfile.mkdtemp(prefix="fleetctl-test-home-"))


def hermetic_environment() -> None:
    """Point HOME, XDG_{CONFIG,CACHE,STATE}_HOME and FLEETCTL_HOME into :data:`SESSION_ROOT`;
    unset SSH_AUTH_SOCK, SSH_AGENT_PID and FLEETCTL_INVENTORY."""
    home = SESSION_ROOT / "home"
    for sub in ("", ".ssh", ".config", ".cache", ".local/state"):
        (home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ["HOME"] = str(home)
    os.environ["XDG_CONFIG_HOME"] = str(home / ".config")
    os.environ["XDG_CACHE_HOME"] = str(home / ".cache")
    os.environ["XDG_STATE_HOME"] = str(home / ".local/state")
    os.environ["FLEETCTL_HOME"] = str(SESSION_ROOT / "fleetctl-home")
    for name in ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "FLEETCTL_INVENTORY"):
        os.environ.pop(name, None)
