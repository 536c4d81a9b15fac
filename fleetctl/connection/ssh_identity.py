"""Which keys to offer, in which order, the way ssh(1) uses keys and agents (never prompting).

Order (OpenSSH ``pubkey_prepare`` in sshconnect2.c, with one change the fleet needs):

1. the named identities, in order: the inventory's key file, then each ``IdentityFile``. A named
   key whose public half (``KEY.pub`` beside it) is loaded in ssh-agent is signed by the agent, so
   a passphrase-protected key file works when its identity is in the agent, as with ssh;
   otherwise the private key file is read (it must be unencrypted: fleetctl runs unattended and
   never asks for a passphrase);
2. unless ``IdentitiesOnly``, the agent's other keys, in the agent's order;
3. when nothing is named, OpenSSH's default key files (``~/.ssh/id_ed25519``...) after them.

OpenSSH offers agent keys before named key files that are not in the agent; fleetctl offers the
named key first, so an agent holding many keys never exhausts a server's ``MaxAuthTries`` before
the right key is tried. A key that cannot be used (encrypted and not in the agent, readable by
others, unreadable) is skipped with a one-line reason that says what to do; the reasons are
reported when login fails.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass, field

import asyncssh

from .ssh_target import SSHTarget
from ..util.within import within

AGENT_TIMEOUT_S = 10.0


@dataclass
class Identities:
    """The keys of one login attempt.

    Attributes:
        keys: key pairs to hand to asyncssh's ``client_keys``, in offer order.
        offered: a label per key, same order (``/path/key``, ``/path/key (via ssh-agent)``,
            ``ssh-agent key 'comment'``).
        problems: one line per named key that cannot be used: why and what to do.
        agent: the agent connection signing agent keys; close it after login.
    """

    keys: list = field(default_factory=list)
    offered: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    agent: "asyncssh.SSHAgentClient | None" = None

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()
            self.agent = None

    def explain_denied(self, target: SSHTarget) -> str:
        """One line for a login every offered key failed."""
        who = target.where
        if not self.keys:
            why = "; ".join(self.problems) or "no key to offer (no key file, IdentityFile, default key or ssh-agent key)"
            return f"authentication failed for {who}: {why}"
        tried = ", ".join(self.offered[:6]) + (f" and {len(self.offered) - 6} more" if len(self.offered) > 6 else "")
        text = (f"authentication failed for {who}: the host accepted none of the keys offered ({tried}); is the "
                f"public key in ~{target.user}/.ssh/authorized_keys on the host?")
        if self.problems:
            text += " Not offered: " + "; ".join(self.problems)
        if len(self.offered) > 3:
            text += " (a server stops after MaxAuthTries keys: name the right key first, or set IdentitiesOnly yes)"
        return text


def unprotected_key(path: str) -> str | None:
    """OpenSSH's ``sshkey_perm_ok`` (authfile.c): a private key file of ours that group or others
    may read is refused (``UNPROTECTED PRIVATE KEY FILE``). The problem in one line naming the
    file, its mode and the fix, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
        mode = oct(stat.S_IMODE(st.st_mode))[2:]
        return (f"{path} has mode {int(mode, 8):04o}: ssh refuses a private key that group or others can read "
                f"(UNPROTECTED PRIVATE KEY FILE): chmod 600 {path}")
    return None


def _public_half(path: str) -> tuple[asyncssh.SSHKey | None, bool]:
    """The public key of identity ``path`` (``path.pub`` beside it, or ``path`` itself when it is
    a public key, as ``IdentityFile`` may name one to pick an agent key), and whether ``path``
    itself is the public key."""
    for candidate in (path + ".pub", path + "-cert.pub"):
        try:
            return asyncssh.read_public_key(candidate), False
        except (OSError, asyncssh.KeyImportError):
            continue
    try:
        key = asyncssh.read_public_key(path)  # also reads the public half an OpenSSH private key file holds
    except (OSError, asyncssh.KeyImportError):
        return None, False
    try:
        with open(path, "rb") as fh:
            private = b"PRIVATE KEY" in fh.read(4096)
    except OSError:
        private = False
    return key, not private


async def _agent_keys(target: SSHTarget) -> tuple["asyncssh.SSHAgentClient | None", list, str | None]:
    """The agent connection and its keys, or why there are none (only said when it matters)."""
    if not target.agent_path:
        return None, [], "no ssh-agent (SSH_AUTH_SOCK is not set)"
    try:
        agent = await within(asyncssh.connect_agent(target.agent_path), AGENT_TIMEOUT_S)
        keys = list(await within(agent.get_keys(), AGENT_TIMEOUT_S))
    except (OSError, ValueError, asyncio.TimeoutError, asyncssh.Error) as exc:
        return None, [], f"ssh-agent at {target.agent_path} did not answer ({exc})"
    return agent, keys, None


async def load_identities(target: SSHTarget) -> Identities:
    """The keys to offer to ``target`` (see the module docstring). Never raises for a bad key."""
    out = Identities()
    agent, agent_keys, agent_problem = await _agent_keys(target)
    out.agent = agent
    by_blob = {k.public_data: k for k in agent_keys}
    used: set[bytes] = set()

    def add(keypair, label: str) -> None:
        out.keys.append(keypair)
        out.offered.append(label)

    def named(path: str) -> None:
        pub, is_public = _public_half(path)
        if pub is not None and pub.public_data in used:
            return
        if pub is not None and pub.public_data in by_blob:
            used.add(pub.public_data)
            add(by_blob[pub.public_data], f"{path} (via ssh-agent)")
            return
        if not os.path.exists(path):
            if target.identities_named:
                out.problems.append(f"{path} does not exist")
            return
        if is_public:
            if target.identities_named:
                extra = f"; {agent_problem}" if agent_problem else ""
                out.problems.append(f"{path} is a public key and its identity is not in ssh-agent{extra}: ssh-add "
                                    f"its private key")
            return
        bad = unprotected_key(path)
        if bad:
            out.problems.append(bad)
            return
        try:
            pairs = asyncssh.load_keypairs([path])
        except asyncssh.KeyImportError as exc:
            if "passphrase" in str(exc).lower():
                if target.identities_named:
                    if pub is None:
                        out.problems.append(f"{path} is passphrase-protected and has no {os.path.basename(path)}.pub "
                                            f"beside it to find it in ssh-agent: load it with ssh-add {path} and put "
                                            f"its public key beside it (ssh-keygen -y -f {path} > {path}.pub)")
                    else:
                        extra = f"; {agent_problem}" if agent_problem else ""
                        out.problems.append(f"{path} is passphrase-protected and its identity is not in ssh-agent"
                                            f"{extra}: run ssh-add {path} (fleetctl never asks for a passphrase)")
                return
            out.problems.append(f"{path} cannot be read as a private key ({exc})")
            return
        except OSError as exc:
            out.problems.append(f"{path} cannot be read ({exc.strerror or exc})")
            return
        for pair in pairs:
            add(pair, path)

    if target.identities_named:
        for path in target.identity_files:
            named(path)
    if not target.identities_only:
        for key in agent_keys:
            if key.public_data not in used:
                comment = key.get_comment() or key.get_algorithm()
                add(key, f"ssh-agent key {comment!r}")
                used.add(key.public_data)
    if not target.identities_named:
        for path in target.identity_files:
            named(path)
    return out
