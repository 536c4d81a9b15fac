"""Importing fleetctl's SSH layer prints nothing, even under ``-W error``: a fresh install gets
the newest cryptography, and cryptography 51 deprecates DSA, which asyncssh 2.24 names while it
imports ("CryptographyDeprecationWarning: DSA is deprecated" on every SSH command). With an older
cryptography there is no warning to hide and this passes either way; CI's fresh venv is the case."""

from __future__ import annotations

import subprocess
import sys

from tests.support.fleet import REPO


def test_the_ssh_layer_imports_without_a_warning_under_w_error():
    res = subprocess.run([sys.executable, "-W", "error", "-c",
                          "import fleetctl.connection.ssh, fleetctl.connection.ssh_route, fleetctl.cli"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stderr == ""
