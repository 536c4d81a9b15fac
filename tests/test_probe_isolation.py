"""fleetctl's probes do not change what they measure (issue 23): the venv probe's questions each run
in their own interpreter, a question that crashes is named as fleetctl's (the others still
answer), and a probe answered ahead by the run's first command runs as the engine would run it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from fleetctl.tasks.venv_probe import STARTED, VENV_PROBE, probe_fault_problems
from tests.support.hostvenv import make_venv

REQS = ["setuptools>=64", "packaging", "wheel"]


def ask(python: str, tokens, imports=("setuptools",)) -> dict:
    arg = json.dumps({"imports": list(imports), "requirements": REQS, "tokens": tokens, "tmp": None})
    res = subprocess.run([python, "-c", VENV_PROBE, arg], capture_output=True, text=True, cwd="/",
                         env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    assert res.stdout.splitlines()[0] == STARTED, res.stdout + res.stderr
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", ["venv", "virtualenv"])
def test_torch_is_asked_its_archs_in_a_process_pip_never_touched(tmp_path, kind):
    venv = make_venv(tmp_path / "venv", kind)  # setuptools' distutils shim active, pip in the venv
    info = ask(f"{venv}/bin/python3", ["9.0a"])
    assert info["torch_archs_error"] is None and info["probe_errors"] == {}, info
    assert info["torch_archs"]["9.0a"] == {"ok": True, "flags": ["-gencode=arch=compute_90a,code=sm_90a"]}
    assert info["requirements"]["setuptools>=64"]["ok"] is True and info["missing"] == []


def test_a_question_that_crashes_is_fleetctls_and_the_others_still_answer(tmp_path):
    info = ask(sys.executable, 5)  # not a list: the torch question's own code raises
    assert set(info["probe_errors"]) == {"torch_archs"}
    assert info["probe_errors"]["torch_archs"].startswith("exit 1: TypeError"), info["probe_errors"]
    assert info["requirements"]["packaging"]["installed"]  # answered beside it
    (line,) = probe_fault_problems(info)
    assert line.startswith("fleetctl's probe torch_archs (which arch names torch.utils.cpp_extension accepts) failed "
                           "on this host: exit 1: TypeError") and "a fault of fleetctl, not of the host" in line


def test_a_probe_answered_ahead_runs_with_the_logins_umask(tmp_path):
    from fleetctl.engine.session_start import BOOT, MARK, boot_stdin

    probe = {"argv": ["/bin/sh", "-c", "umask"], "env": {}, "cwd": None, "timeout_s": 30}
    job = {"workdir": str(tmp_path / "w"), "run_id": "r1", "probes": [probe], "probe_limit_bytes": 1 << 20,
           "facts": False}
    res = subprocess.run(["/bin/sh", "-c", 'umask 022 && exec "$@"', "sh", sys.executable, "-c", BOOT],
                         input=boot_stdin(job), capture_output=True, check=True, cwd=tmp_path)
    line = next(ln for ln in res.stdout.decode().splitlines() if ln.startswith(MARK))
    answer = json.loads(line[len(MARK):])["probes"][0]
    assert base64.b64decode(answer["out"]).strip() == b"0022"
    assert oct((tmp_path / "w" / "runs" / "r1").stat().st_mode & 0o777) == "0o700"  # its own folders stay private
