"""Verify checks every GPU the host has (issue 23), on a machine without one.

The per-GPU loop of playbooks/scripts/verify_package.py (:func:`verify_devices`) is driven with
fake device lists; then the script's real ``--device cuda`` path runs end to end in a real
interpreter against a fake ``torch`` whose CUDA lists the GPUs a test chooses (only the GPU is
faked: the script, its argument parsing, its matching and its output are the real ones). On a
GPU host the same path runs with the real torch: see docs/reliability.md for the command.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

VERIFY = Path(__file__).resolve().parents[1] / "playbooks" / "scripts" / "verify_package.py"


def _load():
    spec = importlib.util.spec_from_file_location("fleetctl_verify_package", VERIFY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vp = _load()

FACTS_GPUS = [
    {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "pci_bus_id": "00000000:18:00.0"},
    {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000", "pci_bus_id": "00000000:2A:00.0"},
    {"index": 2, "name": "NVIDIA H200", "uuid": "GPU-cccccccc-0000-0000-0000-000000000000", "pci_bus_id": "00000000:3B:00.0"},
]


def seen(*gpus):
    """torch's view of some of FACTS_GPUS (ordinals in the order given)."""
    return [{"ordinal": i, "name": g["name"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"]} for i, g in enumerate(gpus)]


def test_every_gpu_is_checked_and_a_failing_one_is_named():
    ran = []

    def run_one(ordinal):
        ran.append(ordinal)
        if ordinal == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return True, "40 checks"

    checks, warnings, devices = vp.verify_devices(FACTS_GPUS, seen(*FACTS_GPUS), {}, run_one)
    assert ran == [0, 1, 2] and warnings == []
    assert [c["ok"] for c in checks] == [True, False, True]
    assert checks[1] == {"name": "gpu 1", "ok": False,
                         "detail": "GPU 1 (NVIDIA H200, GPU-bbbbbbbb-0000-0000-0000-000000000000, bus 00000000:2A:00.0) "
                                   "as cuda:1: RuntimeError: CUDA error: an illegal memory access was encountered"}
    assert [d["ordinal"] for d in devices] == [0, 1, 2]


def test_gpus_are_matched_by_uuid_not_by_position():
    # torch's default order (fastest first) differs from nvidia-smi's (PCI bus order)
    order = seen(FACTS_GPUS[2], FACTS_GPUS[0], FACTS_GPUS[1])
    pairs, warnings, missing = vp.match_devices(FACTS_GPUS, order, {})
    assert [(g["index"], n) for g, n in pairs] == [(0, 1), (1, 2), (2, 0)]
    assert warnings == missing == []


def test_a_gpu_torch_does_not_see_fails_without_a_visibility_variable():
    checks, warnings, _ = vp.verify_devices(FACTS_GPUS, seen(FACTS_GPUS[0], FACTS_GPUS[2]), {},
                                            lambda n: (True, "ok"))
    assert warnings == []
    bad = [c for c in checks if not c["ok"]]
    assert bad == [{"name": "gpu 1", "ok": False,
                    "detail": "GPU 1 (NVIDIA H200, GPU-bbbbbbbb-0000-0000-0000-000000000000, bus 00000000:2A:00.0): "
                              "nvidia-smi lists it, torch does not see it (torch sees 2 of 3 GPUs)"}]


def test_cuda_visible_devices_of_the_login_environment_is_a_warning_naming_it_and_both_counts():
    checks, warnings, _ = vp.verify_devices(FACTS_GPUS, seen(FACTS_GPUS[0]), {"CUDA_VISIBLE_DEVICES": "0"},
                                            lambda n: (True, "ok"))
    assert [c["ok"] for c in checks] == [True]
    assert warnings == ["CUDA_VISIBLE_DEVICES=0 in the login environment: torch sees 1 of the 3 GPUs nvidia-smi "
                        "lists; not verified: GPU 1 (NVIDIA H200, GPU-bbbbbbbb-0000-0000-0000-000000000000, bus "
                        "00000000:2A:00.0); GPU 2 (NVIDIA H200, GPU-cccccccc-0000-0000-0000-000000000000, bus "
                        "00000000:3B:00.0)"]


def test_a_mig_enabled_gpu_is_verified_through_its_instances():
    mig = [dict(FACTS_GPUS[0], mig_mode="Enabled"), FACTS_GPUS[1]]
    instances = [{"ordinal": 0, "name": "NVIDIA H200 MIG 1g.18gb", "uuid": "MIG-1234", "pci_bus_id": None},
                 {"ordinal": 1, "name": "NVIDIA H200", "uuid": FACTS_GPUS[1]["uuid"], "pci_bus_id": None}]
    checks, warnings, _ = vp.verify_devices(mig, instances, {}, lambda n: (True, "ok"))
    assert [c["ok"] for c in checks] == [True]
    assert warnings[0].startswith("MIG is enabled on GPU 0 (NVIDIA H200, GPU-aaaaaaaa")


def test_no_gpu_seen_at_all_fails():
    checks, _, _ = vp.verify_devices([], [], {}, lambda n: (True, "ok"))
    assert checks == [{"name": "gpu", "ok": False, "detail": "torch sees no GPU"}]


FAKE_TORCH = '''
import json, os
__version__ = "2.99.0+fake"
class version:
    cuda = os.environ.get("FAKE_TORCH_CUDA", "13.0") or None  # "": a CPU-only torch (cuda None)
_DEVS = json.loads(os.environ.get("FAKE_TORCH_GPUS", "[]"))
_current = [0]
class _Props:
    def __init__(self, d):
        self.name = d["name"]
        self.uuid = d["uuid"][4:]  # torch prints the UUID without nvidia-smi's "GPU-"
        dom, bus, dev = d["pci_bus_id"].split(":")
        self.pci_domain_id, self.pci_bus_id, self.pci_device_id = int(dom, 16), int(bus, 16), int(dev.split(".")[0], 16)
class _Device:
    def __init__(self, n):
        self.n = n
    def __enter__(self):
        self.prev, _current[0] = _current[0], self.n
    def __exit__(self, *exc):
        _current[0] = self.prev
class cuda:
    is_available = staticmethod(lambda: bool(_DEVS))
    device_count = staticmethod(lambda: len(_DEVS))
    get_device_name = staticmethod(lambda i=0: _DEVS[i]["name"])
    get_device_properties = staticmethod(lambda i: _Props(_DEVS[i]))
    device = _Device
    current = staticmethod(lambda: _current[0])
'''

FAKE_PACKAGE = '''
import os
def selfcheck(device="cpu"):
    import torch
    assert device == "cuda:%d" % torch.cuda.current(), (device, torch.cuda.current())
    if device == os.environ.get("FAKE_BAD_DEVICE"):
        return {"ok": False, "device": device, "checks": [{"name": "quant bf16 37x80", "ok": False,
                "detail": "CUDA error: an illegal memory access was encountered"}]}
    return {"ok": True, "device": device, "checks": [{"name": "quant", "ok": True, "detail": "identical"}]}
'''


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """A real venv holding the fake torch and a package with a selfcheck (its bin/python3)."""
    venv = tmp_path_factory.mktemp("gpuvenv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python3"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    for name, text in (("torch", FAKE_TORCH), ("gpupkg", FAKE_PACKAGE)):
        (purelib / name).mkdir()
        (purelib / name / "__init__.py").write_text(text)
    return venv


def run_verify(venv, torch_gpus, facts_gpus, **env):
    """The real script's --device cuda path as fleetctl runs it (``-I``, cwd /), with the fake torch
    seeing ``torch_gpus``."""
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")}
    full.update(FAKE_TORCH_GPUS=json.dumps(torch_gpus), **env)
    proc = subprocess.run([str(venv / "bin" / "python3"), "-I", str(VERIFY), "--package", "gpupkg", "--venv", str(venv),
                           "--device", "cuda", "--smoke", "--gpus", json.dumps(facts_gpus)],
                          capture_output=True, text=True, env=full, cwd="/", timeout=120)
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_script_verifies_each_gpu_and_names_the_failing_one(stubs):
    proc, summary = run_verify(stubs, FACTS_GPUS, FACTS_GPUS, FAKE_BAD_DEVICE="cuda:2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    gpu_checks = {c["name"]: c for c in summary["checks"] if c["name"].startswith("gpu")}
    assert sorted(gpu_checks) == ["gpu 0", "gpu 1", "gpu 2"]
    assert gpu_checks["gpu 0"]["ok"] and gpu_checks["gpu 1"]["ok"] and not gpu_checks["gpu 2"]["ok"]
    assert "FAIL gpu 2: GPU 2 (NVIDIA H200, GPU-cccccccc-0000-0000-0000-000000000000, bus 00000000:3B:00.0) as " \
           "cuda:2: 1 checks; failed: quant bf16 37x80 (CUDA error: an illegal memory access was encountered)" in proc.stdout


def test_the_script_warns_for_cuda_visible_devices_and_fails_for_a_missing_gpu(stubs):
    proc, summary = run_verify(stubs, FACTS_GPUS[:1], FACTS_GPUS[:2], CUDA_VISIBLE_DEVICES="0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["warnings"][0].startswith("CUDA_VISIBLE_DEVICES=0 in the login environment: torch sees 1 of the 2 GPUs")
    proc, summary = run_verify(stubs, FACTS_GPUS[:1], FACTS_GPUS[:2])
    assert proc.returncode == 1
    assert "FAIL gpu 1: GPU 1 (NVIDIA H200, GPU-bbbbbbbb-0000-0000-0000-000000000000, bus 00000000:2A:00.0): " \
           "nvidia-smi lists it, torch does not see it (torch sees 1 of 2 GPUs)" in proc.stdout


def test_every_gpu_hidden_by_the_login_environment_fails_naming_the_variable(stubs):
    """Seen on the real H200 (bench/results/2026-12-01-h200-issue23): with CUDA_VISIBLE_DEVICES=''
    torch sees no GPU; nothing could be verified on a GPU, so verify fails, and the cause named is
    the variable, not a torch or driver problem."""
    proc, summary = run_verify(stubs, [], FACTS_GPUS[:2], CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL cuda: torch sees none of the GPUs nvidia-smi lists (2): CUDA_VISIBLE_DEVICES='' in the login " \
           "environment hides them" in proc.stdout, proc.stdout
    assert "install a CUDA build of torch" not in proc.stdout
    proc, _ = run_verify(stubs, [], FACTS_GPUS[:2])  # no variable: torch or the driver is the cause
    assert proc.returncode == 1 and "cannot see the host's GPUs: install a CUDA build of torch" in proc.stdout
    assert "torch 2.99.0+fake (CUDA 13.0) cannot see" in proc.stdout, proc.stdout
    proc, _ = run_verify(stubs, [], FACTS_GPUS[:2], FAKE_TORCH_CUDA="")  # a CPU torch: never "(CUDA None...)"
    assert proc.returncode == 1 and "torch 2.99.0+fake (CPU-only build) cannot see the host's GPUs" in proc.stdout, \
        proc.stdout


def test_a_copy_imported_from_outside_the_venv_is_named_as_such(tmp_path):
    """A venv made by ``python -m venv`` whose site-packages holds a ``.pth`` line to another folder
    with the package (an operator's shared checkout): verify's location check says the venv's
    python imports the package from outside its site-packages and why that can be, not a bare
    path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    outside = tmp_path / "shared"
    (outside / "tinypkg").mkdir(parents=True)
    (outside / "tinypkg" / "__init__.py").write_text("X = 1\n")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "shared.pth").write_text(str(outside) + "\n")
    res = subprocess.run([str(venv / "bin" / "python"), "-I", str(VERIFY), "--package", "tinypkg", "--venv",
                          str(venv), "--device", "cpu"], capture_output=True, text=True, timeout=120, cwd="/")
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("FAIL location: "))
    assert line == (f"FAIL location: the venv's python imports tinypkg from {(outside / 'tinypkg').resolve()}/__init__.py, "
                    f"outside the venv's site-packages (venv {venv.resolve()}): another copy comes first on "
                    "sys.path (a .pth file, --system-site-packages or a user site)"), line
