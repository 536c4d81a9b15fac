"""A real OpenSSH ``ssh-agent`` for tests, and key helpers.

:class:`Agent` runs ``ssh-agent -D -a SOCKET`` (foreground, its own socket) and loads keys with
the real ``ssh-add``; a passphrase-protected key is loaded through ``SSH_ASKPASS`` (forced with
``SSH_ASKPASS_REQUIRE=force``, OpenSSH 8.4+), exactly as a desktop session would.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def keygen(path: Path, *, passphrase: str = "", kind: str = "ed25519", comment: str = "") -> Path:
    """A new key pair at ``path`` (and ``path.pub``); returns ``path``."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", comment or path.name, "-f", str(path)],
                   check=True)
    return path


def fingerprint(pub: Path) -> str:
    """OpenSSH's SHA256 fingerprint of a public key file (``SHA256:...``)."""
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


class Agent:
    """A running ssh-agent on its own socket in ``folder``; :meth:`stop` ends it."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.socket = folder / "agent.sock"
        self.folder = folder
        self.proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(self.socket)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.socket.exists():  # poll for readiness
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ssh-agent did not start")
            time.sleep(0.02)

    @property
    def env(self) -> dict[str, str]:
        return {"SSH_AUTH_SOCK": str(self.socket)}

    def add(self, key: Path, passphrase: str = "") -> None:
        """``ssh-add KEY``, answering a passphrase prompt through SSH_ASKPASS."""
        env = {**os.environ, **self.env}
        if passphrase:
            askpass = self.folder / "askpass.sh"
            askpass.write_text(f"#!/bin/sh\nprintf '%s\\n' '{passphrase}'\n")
            askpass.chmod(0o700)
            env.update(SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)

    def listed(self) -> list[str]:
        out = subprocess.run(["ssh-add", "-l"], env={**os.environ, **self.env}, capture_output=True, text=True)
        return out.stdout.splitlines()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
