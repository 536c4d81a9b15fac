"""The login's address-space limit named as the cause, as data: facts exactly as
``playbooks/scripts/facts.py`` gave them under ``ulimit -v`` (recorded with torch 2.13.0+cpu on
a 2-CPU host: which error the import ends with depends on the limit, the host's cores and
torch's build), and verify's outcomes as its script printed them. One wording for facts, --plan
and verify (:func:`fleetctl.facts.venv.address_space_cause`); without a limit, the old words."""

from __future__ import annotations

import json

import pytest

from fleetctl.connection.base import CommandResult
from fleetctl.facts.venv import address_space_cause, torch_problem
from fleetctl.tasks.runtime_preflight import torch_runtime_problem
from fleetctl.tasks.verify import failure_line

VENV = "/home/u/venv"
PY = f"{VENV}/bin/python3"
NAMED = "this login's address-space limit (ulimit -v, RLIMIT_AS) is {} MiB"
WHERE_AND_FIX = ("it is usually set in the login's rc files (e.g. ~/.bashrc or ~/.profile: ulimit -v, in KiB) or "
                 "in /etc/security/limits.conf (an 'as' line, pam_limits); fix: raise or remove it for this login")

#: ``(ulimit -v KiB, rlimit_as_mib, the import's error)`` the facts script reported.
UNDER_LIMITS = [
    (250000, 244, "ImportError: libtorch_cpu.so: failed to map segment from shared object"),
    (400000, 390, "import torch ended the interpreter: exit -6: terminate called after throwing an instance of "
                  "'std::bad_alloc'"),
    (550000, 537, "import torch ended the interpreter: exit 127: OpenBLAS blas_thread_init: pthread_create failed "
                  "for thread 1 of 2: Resource temporarily unavailable"),
    (600000, 585, "MemoryError:"),
]


def _facts(mib: int | None, error: str, imported: bool = True) -> dict:
    py = {"executable": PY, "venv": VENV, "exists": True, "version": "3.12.3", "torch": "2.13.0+cpu",
          "torch_cuda": None, "torch_error": error, "torch_probe_error": None,
          "torch_import": {"ok": False, "error": error, "seconds": None} if imported else None,
          "packages": {"pip": "25.0"}}
    return {"rlimit_as_mib": mib, "python": py}


@pytest.mark.parametrize("kib,mib,error", UNDER_LIMITS, ids=[str(k) for k, _, _ in UNDER_LIMITS])
def test_a_torch_that_does_not_import_under_the_limit_is_the_limits_fault_never_a_reinstall(kib, mib, error):
    line = torch_problem(_facts(mib, error), VENV, PY, "fp4_kernels")
    assert line == (f"torch 2.13.0+cpu in {VENV} does not import ({error}): fp4_kernels needs torch at run time, so it "
                    f"could be built and installed but never verified; {address_space_cause({'rlimit_as_mib': mib})}")
    assert NAMED.format(mib) in line and WHERE_AND_FIX in line and "reinstall" not in line
    assert torch_runtime_problem(_facts(mib, error), VENV, PY, "fp4_kernels") == line  # --plan's preflight: the same


def test_without_a_limit_or_for_a_missing_library_the_old_words_stay():
    error = UNDER_LIMITS[0][2]
    old = torch_problem(_facts(None, error), VENV, PY, "fp4_kernels")
    assert old and "RLIMIT_AS" not in old and f"{PY} -m pip install --force-reinstall torch==2.13.0+cpu" in old
    # the files themselves are missing (the facts' file reader says so; no import was tried): not the limit
    gone = "ImportError: libtorch_cpu.so: cannot open shared object file: No such file or directory"
    line = torch_problem(_facts(390, gone, imported=False), VENV, PY, "fp4_kernels")
    assert line and "RLIMIT_AS" not in line and "--force-reinstall" in line
    # an import that failed for another reason under a limit (an undefined symbol): not the limit
    symbol = "ImportError: libtorch_cpu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
    line = torch_problem(_facts(390, symbol), VENV, PY, "fp4_kernels")
    assert line and "RLIMIT_AS" not in line and "--force-reinstall" in line
    # no torch at all: its install is the fix, whatever the limit
    none = {"rlimit_as_mib": 390, "python": {"exists": True, "torch": None,
                                             "torch_error": "ModuleNotFoundError: No module named 'torch'"}}
    assert "RLIMIT_AS" not in torch_problem(none, VENV, PY, "fp4_kernels")


def _run(rc: int | None = None, signal: str | None = None, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(argv=["python3"], rc=rc, signal=signal, stdout=stdout.encode(), stderr=stderr.encode())


#: What verify printed before torch's CUDA runtime aborted under the limit (operator trial).
AFTER_SYMBOLS = ("PASS torch: torch 2.11.0+cu130 (cuda 13.0) from /home/u/venv/lib/python3.12/site-packages/torch\n"
                 "PASS cuda: torch sees 1 GPU(s): NVIDIA H100 80GB HBM3\nPASS import: x\n"
                 "PASS import-order: imports with or without torch first\nPASS location: x\nPASS symbols: 2 present\n")
#: The smoke check fp4_kernels' CPU verify failed under ``ulimit -v 700000`` (torch imported).
SMOKE = {"name": "smoke", "ok": False, "detail": (
    "cpu: 40 checks; failed: prepacked mm 19x300x1040 (w4a4, w4a16 bf16 / fp16) (RuntimeError: [enforce fail at "
    "alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 350208 bytes. "
    "Error code 12 (Cannot allocate memory) | Traceback (most recent call last): ...)")}


def test_verify_dying_or_failing_for_memory_under_the_limit_names_it():
    limited = {"rlimit_as_mib": 732}  # ulimit -v 750000
    died = failure_line(_run(signal="ABRT", stdout=AFTER_SYMBOLS), [], "fp4_kernels", limited)
    assert died == ("the verify interpreter died of SIGABRT (signal 6) after symbols: "
                    + address_space_cause(limited)), died
    assert NAMED.format(732) in died and WHERE_AND_FIX in died
    smoke = failure_line(_run(rc=1, stdout=json.dumps({"ok": False, "checks": [SMOKE]})), [SMOKE], "fp4_kernels",
                         limited)
    assert smoke == f"smoke: {SMOKE['detail']}; {address_space_cause(limited)}", smoke
    # the script itself ended by an uncaught MemoryError (no JSON line): its error line, then the limit
    plain = failure_line(_run(rc=1, stderr="Traceback (most recent call last):\n  ...\nMemoryError\n"), [],
                         "fp4_kernels", limited)
    assert plain.startswith("MemoryError; " + NAMED.format(732)), plain


def test_verify_without_a_limit_or_failing_for_another_cause_keeps_its_words():
    died = failure_line(_run(signal="ABRT", stdout=AFTER_SYMBOLS), [], "fp4_kernels", {"rlimit_as_mib": None})
    assert died == "the verify interpreter died of SIGABRT (signal 6) after symbols", died
    other = {"name": "symbols", "ok": False, "detail": "missing: dequantize_fp4"}
    line = failure_line(_run(rc=1), [other], "fp4_kernels", {"rlimit_as_mib": 732})
    assert line == "symbols: missing: dequantize_fp4", line
    # a truncated .so (SIGBUS) is the file's fault even under a limit
    bus = failure_line(_run(signal="BUS", stdout="PASS torch: x\n"), [], "fp4_kernels", {"rlimit_as_mib": 732})
    assert "is probably truncated" in bus and "RLIMIT_AS" not in bus, bus
