"""Keeping what the login shell prints out of a command's output.

OpenSSH runs every command as ``$SHELL -c COMMAND`` (session.c do_child), and the shell reads its
rc files first: bash's ``~/.bashrc`` (bash(1) INVOCATION: read when sshd starts it), zsh's
``~/.zshenv`` (zsh(1) STARTUP/SHUTDOWN FILES: every zsh), tcsh's ``~/.tcshrc`` and fish's
``config.fish`` (every shell). What they print (``echo "Welcome to gpu01"``) arrives on the
command's stdout before the command's own first byte.

So the SSH connection's command line starts with ``echo MARKER;`` (:func:`marked_line`: a plain
word and ``;``, parsed alike by sh, bash, zsh, fish, csh and tcsh, see
:func:`~fleetctl.connection.command.is_portable`) and reads stdout through :class:`SkipLogin`,
which drops everything up to and including the marker line, as it streams, and keeps the dropped
text (:attr:`SkipLogin.login_output`) for the connection to report once. When the marker never
comes (the shell did not start, or printed more than :data:`MAX_LOGIN_BYTES` first) nothing is
dropped: every byte goes on as the command's stdout.
"""

from __future__ import annotations

import secrets

from .streams import ByteReader

#: Most bytes held back while waiting for the marker (a login banner is a few lines): 256 KiB.
MAX_LOGIN_BYTES = 256 * 1024


def new_marker() -> str:
    """A word no login banner prints: ``fleetctl-start-`` and 16 random hex digits (letters,
    digits and ``-`` only, so every shell passes it through as it is)."""
    return f"fleetctl-start-{secrets.token_hex(8)}"


def marked_line(line: str, marker: str) -> str:
    """``line`` preceded by ``echo MARKER;``: the marker is the first thing the command itself
    prints, after whatever the login shell's rc files printed."""
    return f"echo {marker}; {line}"


class SkipLogin:
    """A :class:`~fleetctl.connection.streams.ByteReader` over ``reader`` that skips the bytes
    before and including the first ``MARKER\\n``.

    Attributes:
        login_output: what was skipped before the marker (the login shell's output), once found.
        found: the marker was seen.
    """

    def __init__(self, reader: ByteReader, marker: str) -> None:
        self._reader = reader
        self._marker = marker.encode("ascii") + b"\n"
        self._held = bytearray()
        self._done = False
        self.found = False
        self.login_output = b""

    async def read(self, n: int = -1) -> bytes:
        while not self._done:
            chunk = await self._reader.read(n)
            if not chunk:  # EOF and no marker: nothing was the login shell's, pass it all on
                self._done = True
                held, self._held = bytes(self._held), bytearray()
                return held
            self._held += chunk
            at = self._held.find(self._marker)
            if at >= 0:
                self._done = self.found = True
                self.login_output = bytes(self._held[:at])
                rest = bytes(self._held[at + len(self._marker):])
                self._held = bytearray()
                if rest:
                    return rest
                break
            if len(self._held) > MAX_LOGIN_BYTES:
                self._done = True
                held, self._held = bytes(self._held), bytearray()
                return held
        return await self._reader.read(n)
