"""A hermetic controller environment for the test session (see tests/conftest.py).

:func:`hermetic_environment` points HOME, the XDG folders and FLEETCTL_HOME into one temporary
folder and unsets SSH_AUTH_SOCK, so nothing a test runs reads or writes the real ``~`` or talks to
the user's ssh-agent. :data:`REAL_HOME` is the real home folder, for tests that only read from it.

The session root also holds every ``tempfile`` folder the test process makes (``tempfile.tempdir``
is ``<root>/tmp``) and pytest's ``tmp_path`` folders (tests/conftest.py), so removing it at the end
removes them; its ``owner`` file lets a later session remove the root of one that was killed
(:mod:`tests.support.leftovers`).
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
    """Point HOME, XDG_{CONFIG,CACHE,STATE}_HOME and FLEETCTL_HOME into :data:`SESSION_ROOT`,
    and this process's ``tempfile`` folders into ``SESSION_ROOT/tmp``; unset SSH_AUTH_SOCK,
    SSH_AGENT_PID and FLEETCTL_INVENTORY."""
    from .leftovers import OWNER, remove_stale_roots

    (SESSION_ROOT / "owner").write_text(OWNER + "\n")
    remove_stale_roots()
    # 0711: test users (sshd test hosts' own users) reach folders made here, without listing them
    os.chmod(SESSION_ROOT, 0o711)
    (SESSION_ROOT / "tmp").mkdir(mode=0o711, exist_ok=True)
    os.chmod(SESSION_ROOT / "tmp", 0o711)
    tempfile.tempdir = str(SESSION_ROOT / "tmp")
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
