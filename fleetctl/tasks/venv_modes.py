"""Installs into a venv get the venv's own modes, whatever the login's umask.

pip and uv create the installed folders and files with the mode the wheel asks for less the
process's umask (POSIX ``umask(2)``: ``mkdir``/``open`` modes are masked by it). A login shell's rc
file that sets ``umask 077`` (hardened hosts, service logins: ``~/.bashrc`` runs for an ssh
command) so made an install of ``fp4_kernels`` the login user's alone (``drwx------``) inside a
0755 site-packages beside a 0755 torch: every other user's ``import fp4_kernels`` found an empty
namespace package, and the deploy said ok (operator trial). docs/staged.md counts "would lock out
a serving account ... with the deploy still ok" as a bug.

The install therefore runs under a umask derived from the venv's site-packages folder
(:data:`VENV_MODES_SCRIPT`): group and other get exactly the read and search bits site-packages
gives them, write bits only where both site-packages and the login's umask give them, the owner
everything (a 0755 site-packages gets 0755 folders and 0644 files under any login umask; a 0700
one keeps the install private). The verify script and the install-state probe name installed
files less readable than their site-packages (:data:`fleetctl.tasks.venv_state.STATE_SCRIPT`'s
``unreadable``, worded by :func:`fleetctl.facts.venv_locks.unreadable_line`, which ``fleetctl facts``
warns with too; ``playbooks/scripts/verify_package.py``'s ``modes_problem``), so an install an older
fleetctl made under such a umask is reinstalled by the next deploy, and failed by verify.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Run by the venv's own python (``-I``: its sys.prefix, not the login's PYTHONPATH): sets the
#: umask from the mode of the venv's purelib (``sysconfig``: its site-packages) as the module
#: docstring says, then execs ``argv[1:]`` (the install command, PATH searched, same pid and
#: environment). A site-packages it cannot stat leaves the login's umask as it is.
VENV_MODES_SCRIPT = r'''
import os, sys, sysconfig
login = os.umask(0o022)
try:
    site = os.stat(sysconfig.get_paths()["purelib"]).st_mode
    os.umask((0o077 & ~site) | (0o022 & login))
except OSError:
    os.umask(login)
os.execvp(sys.argv[1], sys.argv[1:])
'''


def in_venv_modes(python: str, argv: Sequence[str]) -> list[str]:
    """``argv`` (an install into the venv of ``python``) run under the umask :data:`VENV_MODES_SCRIPT`
    derives from that venv's site-packages mode (pure)."""
    return [python, "-I", "-c", VENV_MODES_SCRIPT, *argv]

