"""What one ``verify`` costs on the host, counted, not timed (issue 27): ONE interpreter start and
ONE torch import per verify, whatever the number of GPUs and checks, and a broken install still
fails in that one interpreter.

Counted in a real venv: a ``.pth`` file in its site-packages (run by ``site`` at every start of
that venv's interpreter, ``-I`` included) appends ``start PID`` to a file (once or twice a start: a venv's lib64 can
be its lib; the PIDs are counted), and the fake torch (only
the GPU is faked: tests/test_verify_gpus.py's torch whose CUDA lists the GPUs a test chooses)
appends ``torch PID`` when its module body runs. The script is the real
playbooks/scripts/verify_package.py, run as the planner runs it (``python -I``, cwd ``/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_verify_gpus import FACTS_GPUS, FAKE_PACKAGE, FAKE_TORCH, VERIFY

COUNT_PTH = "import os; p = os.environ.get('VERIFY_COUNT'); p and open(p, 'a').write('start %d\\n' % os.getpid())\n"
TORCH_COUNT = "import os as _o\n_p = _o.environ.get('VERIFY_COUNT')\n_p and open(_p, 'a').write('torch %d\\n' % _o.getpid())\n"
#: needs torch imported first (libtorch loaded), as sgl-kernel's extension does
AFTER_TORCH = ('import sys\nif "torch" not in sys.modules:\n'
               '    raise ImportError("libc10.so: cannot open shared object file: No such file or directory")\n'
               'def selfcheck(device="cpu"):\n    return {"ok": True, "checks": []}\n')
#: imports torch itself, as fp4_kernels does
WITH_TORCH = "import torch\n" + FAKE_PACKAGE


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    venv = tmp_path_factory.mktemp("countvenv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python3"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    for name, text in (("torch", TORCH_COUNT + FAKE_TORCH), ("gpupkg", WITH_TORCH), ("aftertorch", AFTER_TORCH),
                       ("brokenpkg", "import torch\nraise RuntimeError('undefined symbol: _ZN3c104cuda9SetDeviceEi')\n")):
        (purelib / name).mkdir()
        (purelib / name / "__init__.py").write_text(text)
    (purelib / "zz_count_starts.pth").write_text(COUNT_PTH)
    return venv


def verify(venv: Path, tmp_path: Path, package: str, *extra: str, torch_gpus=FACTS_GPUS, **env):
    """``(rc, checks by name, [(what, pid)])`` of one verify as the planner runs it."""
    count = tmp_path / f"count-{package}.txt"
    count.unlink(missing_ok=True)
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")}
    full.update(FAKE_TORCH_GPUS=json.dumps(torch_gpus), VERIFY_COUNT=str(count), **env)
    proc = subprocess.run([str(venv / "bin" / "python3"), "-I", str(VERIFY), "--package", package, "--venv", str(venv),
                           *extra], capture_output=True, text=True, env=full, cwd="/", timeout=120)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    events = list(dict.fromkeys(tuple(line.split()) for line in count.read_text().splitlines()))
    return proc.returncode, {c["name"]: c for c in summary["checks"]}, events


def test_verify_on_three_gpus_starts_one_interpreter_and_imports_torch_once(counted, tmp_path):
    rc, checks, events = verify(counted, tmp_path, "gpupkg", "--device", "cuda", "--smoke",
                                "--gpus", json.dumps(FACTS_GPUS))
    assert rc == 0, checks
    assert [n for n in checks if n.startswith("gpu")] == ["gpu 0", "gpu 1", "gpu 2"]
    assert checks["import-order"]["ok"]
    starts = [pid for what, pid in events if what == "start"]
    assert len(starts) == 1, events  # the import-order check is no second interpreter any more
    assert [what for what, _ in events] == ["start", "torch"]


def test_a_broken_gpu_or_package_still_fails_in_one_interpreter(counted, tmp_path):
    rc, checks, events = verify(counted, tmp_path, "gpupkg", "--device", "cuda", "--smoke",
                                "--gpus", json.dumps(FACTS_GPUS), FAKE_BAD_DEVICE="cuda:1")
    assert rc == 1 and not checks["gpu 1"]["ok"] and checks["gpu 0"]["ok"]
    assert len([e for e in events if e[0] == "start"]) == 1
    rc, checks, events = verify(counted, tmp_path, "brokenpkg", "--device", "cpu")
    assert rc == 1 and not checks["import"]["ok"] and not checks["import-order"]["ok"]
    assert "undefined symbol: _ZN3c104cuda9SetDeviceEi" in checks["import"]["detail"]
    assert len([e for e in events if e[0] == "start"]) == 1


def test_a_package_that_imports_only_after_torch_fails_by_name_in_one_interpreter(counted, tmp_path):
    rc, checks, events = verify(counted, tmp_path, "aftertorch", "--device", "cpu", "--smoke")
    assert rc == 1
    assert [n for n, c in checks.items() if not c["ok"]] == ["import-order"]
    assert checks["import"]["ok"]  # it does import once torch is loaded: the fault is the order, named so
    assert checks["import-order"]["detail"].startswith(
        "aftertorch imports only after torch (ImportError: libc10.so: cannot open shared object file")
    assert [what for what, _ in events] == ["start", "torch"]
