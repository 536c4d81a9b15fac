"""The facts script (playbooks/scripts/facts.py): its pure parsers on recorded output, and real runs.

Real runs use a fake nvidia-smi on PATH, a fake libnvidia-ml.so.1, a fake and the real CUDA
toolkit, a broken venv and the interpreter running these tests (torch installed).
"""

from __future__ import annotations

import ast
import asyncio
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv as venv_mod
from pathlib import Path

import pytest

from fleetctl.errors import FleetError, TaskFailed
from fleetctl.build.gpustack import GpuStackBroken
from fleetctl.facts.gather import facts_argv, gather_facts, parse_facts_output, remote_workdir
from fleetctl.facts.scripts import script_path
from tests.support.fake_gpu import (
    B200,
    H200,
    RTX_PRO_6000,
    fake_bus_id,
    fake_uuid,
    write_failing_nvidia_smi,
    write_fake_libnvml,
    write_fake_nvidia_smi,
    write_lost_gpu_nvidia_smi,
    write_unrunnable_nvidia_smi,
    gpu_lost_message,
)
from tests.support.hermetic import REAL_HOME

SCRIPT = Path(__file__).resolve().parent.parent / "playbooks" / "scripts" / "facts.py"
REAL_NVCC = Path("/usr/local/cuda/bin/nvcc")


def _load_script():
    spec = importlib.util.spec_from_file_location("fleetctl_facts_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fs = _load_script()

# --------------------------------------------------------------------------------------------
# Recorded outputs
# --------------------------------------------------------------------------------------------

SMI_H200 = "0, NVIDIA H200, 9.0, 143771, 580.159.04\n"  # recorded on the GPU test host
SMI_8xH200 = "".join(f"{i}, NVIDIA H200, 9.0, 143771, 570.133.20\n" for i in range(8))
SMI_B200 = "0, NVIDIA B200, 10.0, 183359, 580.82.07\n1, NVIDIA B200, 10.0, 183359, 580.82.07\n"
SMI_RTX_PRO_6000 = "0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0, 97887, 580.95.05\n"
SMI_MIXED = (
    "0, NVIDIA H200, 9.0, 143771, 580.82.07\n"
    "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 580.82.07\n"
)
SMI_NA = "0, NVIDIA Graphics Device, [N/A], [N/A], 580.82.07\n1,  NVIDIA H200 ,9.0,143771,[N/A]\n"

NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_12_8 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Fri_Feb_21_20:23:50_PST_2025
Cuda compilation tools, release 12.8, V12.8.93
Build cuda_12.8.r12.8/compiler.35583870_0
"""
NVCC_13_ARCHS = ("compute_75\ncompute_80\ncompute_86\ncompute_87\ncompute_88\ncompute_89\ncompute_90\n"
                 "compute_100\ncompute_110\ncompute_103\ncompute_120\ncompute_121\n")
MEMINFO = """MemTotal:       24683520 kB
MemFree:        23353344 kB
MemAvailable:   24239104 kB
Buffers:           12345 kB
Cached:           987654 kB
"""
OS_RELEASE = '''PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
'''


def gpu(index, name, cap, mem, uuid=None, bus=None, mig=None):
    return {"index": index, "name": name, "compute_cap": cap, "memory_mib": mem, "uuid": uuid, "pci_bus_id": bus,
            "mig_mode": mig}


def fake(index, name, cap, mem):
    """A GPU as the fake nvidia-smi / NVML report it (with their UUID and bus id)."""
    return gpu(index, name, cap, mem, fake_uuid(index), fake_bus_id(index))


SMI_DETAIL_FIELDS = fs.GPU_QUERY_FIELDS + fs.GPU_DETAIL_FIELDS
#: recorded shape of ``--query-gpu=index,name,compute_cap,memory.total,driver_version,uuid,pci.bus_id,mig.mode.current``
SMI_DETAIL = ("0, NVIDIA H200, 9.0, 143771, 580.159.04, GPU-4f6c2ab1-7c3e-11ee-b962-0242ac120002, 00000000:18:00.0, Disabled\n"
              "1, NVIDIA A100-SXM4-80GB, 8.0, 81920, 580.159.04, GPU-9a1e2b3c-0000-4000-8000-000000000001, "
              "00000000:2A:00.0, Enabled\n"
              "2, NVIDIA L40S, 8.9, 46068, 580.159.04, GPU-00000000-1111-2222-3333-444444444444, 00000000:3B:00.0, [N/A]\n")


def test_parse_nvidia_smi_detail_fields():
    gpus, driver = fs.parse_nvidia_smi_csv(SMI_DETAIL, SMI_DETAIL_FIELDS)
    assert driver == "580.159.04"
    assert gpus == [gpu(0, "NVIDIA H200", "9.0", 143771, "GPU-4f6c2ab1-7c3e-11ee-b962-0242ac120002", "00000000:18:00.0",
                        "Disabled"),
                    gpu(1, "NVIDIA A100-SXM4-80GB", "8.0", 81920, "GPU-9a1e2b3c-0000-4000-8000-000000000001",
                        "00000000:2A:00.0", "Enabled"),
                    gpu(2, "NVIDIA L40S", "8.9", 46068, "GPU-00000000-1111-2222-3333-444444444444", "00000000:3B:00.0",
                        None)]


@pytest.mark.parametrize(
    "text, gpus, driver",
    [
        (SMI_H200, [gpu(0, "NVIDIA H200", "9.0", 143771)], "580.159.04"),
        (SMI_B200, [gpu(0, "NVIDIA B200", "10.0", 183359), gpu(1, "NVIDIA B200", "10.0", 183359)], "580.82.07"),
        (SMI_RTX_PRO_6000, [gpu(0, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 97887)], "580.95.05"),
        (SMI_MIXED, [gpu(0, "NVIDIA H200", "9.0", 143771),
                     gpu(1, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887)], "580.82.07"),
        (SMI_NA, [gpu(0, "NVIDIA Graphics Device", None, None), gpu(1, "NVIDIA H200", "9.0", 143771)], "580.82.07"),
        ("", [], None),
        ("\n  \n", [], None),
    ],
    ids=["h200", "b200x2", "rtx-pro-6000", "mixed", "n/a", "empty", "blank"],
)
def test_parse_nvidia_smi_csv(text, gpus, driver):
    assert fs.parse_nvidia_smi_csv(text) == (gpus, driver)


def test_parse_nvidia_smi_eight_gpus():
    gpus, driver = fs.parse_nvidia_smi_csv(SMI_8xH200)
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["compute_cap"] for g in gpus} == {"9.0"}
    assert driver == "570.133.20"


def test_parse_nvidia_smi_name_with_comma_and_other_field_order():
    text = "NVIDIA Foo, Bar, 12.1, 3\n"
    gpus, driver = fs.parse_nvidia_smi_csv(text, fields=("name", "compute_cap", "index"))
    assert gpus == [gpu(3, "NVIDIA Foo, Bar", "12.1", None)]
    assert driver is None


def test_parse_nvidia_smi_rejects_short_lines():
    with pytest.raises(ValueError, match="line 1"):
        fs.parse_nvidia_smi_csv("No devices were found\n")


def test_parse_nvidia_smi_bad_compute_cap_is_none():
    gpus, _ = fs.parse_nvidia_smi_csv("0, X, 9, 1, d\n")
    assert gpus[0]["compute_cap"] is None


def test_small_parsers():
    assert fs.parse_nvcc_version(NVCC_13) == "13.0"
    assert fs.parse_nvcc_version(NVCC_12_8) == "12.8"
    assert fs.parse_nvcc_version("garbage") is None
    assert fs.parse_word_list(NVCC_13_ARCHS)[-2:] == ["compute_120", "compute_121"]
    assert fs.parse_word_list("a b a\nc") == ["a", "b", "c"]
    assert fs.parse_cmake_version("cmake version 3.28.3\n\nCMake suite maintained...") == "3.28.3"
    assert fs.parse_cmake_version("cmake version 4.1.0-rc1") == "4.1.0-rc1"
    assert fs.parse_meminfo(MEMINFO) == {"mem_total_mib": 24105, "mem_available_mib": 23671}
    assert fs.parse_meminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\nCached: 1024 kB\n") == {
        "mem_total_mib": 2, "mem_available_mib": 2}
    assert fs.parse_meminfo("") == {"mem_total_mib": None, "mem_available_mib": None}
    assert fs.parse_os_release(OS_RELEASE) == "Ubuntu 24.04.1 LTS"
    assert fs.parse_os_release('NAME=Foo\nVERSION="1"\n') == "Foo 1"
    assert fs.parse_cpu_max("max 100000\n") is None
    assert fs.parse_cpu_max("400000 100000\n") == 4.0
    assert fs.parse_cpu_max("150000 100000") == 1.5
    assert fs.parse_memory_max("max\n") is None
    assert fs.parse_memory_max("8589934592\n") == 8192


def test_script_is_python38_syntax_and_stdlib_only():
    source = SCRIPT.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert imported <= stdlib, imported - stdlib


# --------------------------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------------------------

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_script(*args, path_dirs=(), python=sys.executable, env=None, timeout=120, venv=None):
    """Run the facts script; return (parsed JSON, CompletedProcess). Asserts exit 0 and one JSON line.

    ``venv`` adds ``--venv`` (the light venv keeps tests that do not look at torch fast).
    """
    if venv is not None:
        args = (*args, "--venv", venv)
    # the host's environment, not the test runner's: its CUDA and Python search paths are not the host's
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
    full_env["PATH"] = ":".join([str(d) for d in path_dirs] + [SYSTEM_PATH])
    full_env.update(env or {})
    proc = subprocess.run([python, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0]), proc


@pytest.fixture(scope="session")
def light_venv(tmp_path_factory):
    """A venv without torch: the interpreter probe takes milliseconds instead of seconds."""
    return _make_venv(tmp_path_factory.mktemp("light") / "venv", None)


@pytest.fixture
def smi_dir(tmp_path):
    return tmp_path / "fakebin"


@pytest.mark.parametrize(
    "rows",
    [[H200], [B200, B200], [RTX_PRO_6000], [H200, RTX_PRO_6000]],
    ids=["sm90", "sm100", "sm120", "mixed"],
)
def test_run_with_fake_nvidia_smi(tmp_path, smi_dir, rows, light_venv):
    write_fake_nvidia_smi(smi_dir, rows, driver="580.82.07")
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], venv=light_venv)
    assert facts["gpu_source"] == "nvidia-smi"
    assert facts["gpu_error"] is None
    assert facts["driver_version"] == "580.82.07"
    assert facts["gpus"] == [fake(i, name, cap, mem) for i, (cap, name, mem) in enumerate(rows)]
    assert facts["gpu_stack"]["status"] == "ok"


def test_run_with_no_gpu_seen_by_an_installed_driver_is_broken(tmp_path, smi_dir, light_venv):
    # nvidia-smi present and "No devices were found" (exit 6): a driver that sees no GPU, not a build host
    write_fake_nvidia_smi(smi_dir, [])
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], venv=light_venv)
    assert facts["gpus"] == []
    assert facts["gpu_source"] is None
    assert facts["gpu_stack"]["status"] == "broken"
    assert facts["gpu_stack"]["reason"].startswith("nvidia-smi: exit 6: No devices were found")
    assert "Xid" in facts["gpu_stack"]["fix"]


def test_an_inforom_warning_with_rows_lists_the_gpus_and_without_rows_is_broken(tmp_path, smi_dir, light_venv):
    # nvidia-smi -h, RETURN VALUE: 14 "infoROM is corrupted"; its WARNING line comes before the rows
    write_fake_nvidia_smi(smi_dir, [H200], inforom_corrupt=(0,))
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], venv=light_venv)
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200"] and facts["gpu_source"] == "nvidia-smi"
    assert facts["gpu_stack"]["status"] == "ok"
    assert facts["gpu_stack"]["warnings"][0].startswith(
        "nvidia-smi (exit 14): infoROM is corrupted at gpu 00000000:17:00.0: the GPU still answers"), facts["gpu_stack"]
    # the same status and line with no row after it: nothing listed, a broken stack naming the infoROM
    smi = smi_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'WARNING: infoROM is corrupted at gpu 0000:B3:00.0'\nexit 14\n")
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], venv=light_venv)
    stack = facts["gpu_stack"]
    assert stack["status"] == "broken" and facts["gpus"] == [], stack
    assert stack["reason"] == "nvidia-smi: exit 14: WARNING: infoROM is corrupted at gpu 0000:B3:00.0", stack
    assert "contact NVIDIA support" in stack["fix"], stack


@pytest.mark.parametrize("how", ["mode", "exec"])
def test_run_with_an_nvidia_smi_that_may_not_be_executed_says_so_never_not_found(tmp_path, smi_dir, light_venv, how):
    """An nvidia-smi without its x bit (``shutil.which`` skips it) or whose exec fails with EACCES
    (new-user trial: reported as "not found on PATH", a build host): found, not executable, a
    broken stack with the chmod to run."""
    smi = write_unrunnable_nvidia_smi(smi_dir, how)
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], venv=light_venv)
    detail = ": mode 0644" if how == "mode" else ""
    assert facts["gpu_probe_errors"][0] == f"nvidia-smi: found at {smi} but not executable (permission denied{detail})"
    assert facts["gpus"] == [] and facts["gpu_source"] is None
    assert facts["gpu_stack"]["status"] == "broken"
    assert facts["gpu_stack"]["reason"] == facts["gpu_probe_errors"][0]
    assert f"chmod 755 {smi}" in facts["gpu_stack"]["fix"]
    assert "not found" not in json.dumps(facts["gpu_stack"]) + facts["gpu_error"]


def test_unrunnable_nvidia_smi_looks_at_the_usual_places_beside_path(tmp_path):
    """/usr/bin/nvidia-smi (or the container and WSL places) off PATH without its x bit is named too."""
    place = write_unrunnable_nvidia_smi(tmp_path / "usr-bin")
    assert fs.unrunnable_nvidia_smi(path=str(tmp_path / "empty"), places=(str(place),)) == (str(place), "mode 0644")
    place.chmod(0o755)
    assert fs.unrunnable_nvidia_smi(path=str(tmp_path / "empty"), places=(str(place),)) is None


def test_an_nvidia_smi_off_path_at_a_usual_place_is_the_one_run(tmp_path, monkeypatch):
    """A login PATH without the driver's folder (a driver container's /usr/local/nvidia/bin, a
    cron or sudo PATH) must not make a GPU host driverless: the executable nvidia-smi at a usual
    place is run, and one found on PATH comes first."""
    place = tmp_path / "usr-local-nvidia-bin"
    write_fake_nvidia_smi(place, [H200])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert fs.find_nvidia_smi(places=(str(tmp_path / "nowhere" / "nvidia-smi"), str(place / "nvidia-smi"))) == str(
        place / "nvidia-smi")
    on_path = tmp_path / "on-path"
    write_fake_nvidia_smi(on_path, [H200])
    monkeypatch.setenv("PATH", str(on_path))
    assert fs.find_nvidia_smi(places=(str(place / "nvidia-smi"),)) == str(on_path / "nvidia-smi")
    monkeypatch.setattr(fs, "SMI_PLACES", (str(place / "nvidia-smi"),))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    got = fs.probe_nvidia_smi(timeout_s=30)
    assert got["error"] is None and got["path"] == str(place / "nvidia-smi"), got
    assert [g["name"] for g in got["gpus"]] == [H200[1]], got


def test_run_without_any_driver_is_a_build_host(tmp_path, light_venv):
    if shutil.which("nvidia-smi", path=SYSTEM_PATH) or glob.glob("/dev/nvidia*"):
        pytest.fail("this machine has an NVIDIA driver: the no-driver case cannot be run here")
    facts, _ = run_script("--workdir", tmp_path, venv=light_venv)
    assert facts["gpus"] == [] and facts["gpu_source"] is None
    assert facts["gpu_stack"]["status"] == "none"
    assert facts["gpu_stack"]["traces"] == []


def test_run_with_na_compute_cap(tmp_path, smi_dir, light_venv):
    write_fake_nvidia_smi(smi_dir, [("[N/A]", "NVIDIA Graphics Device", 1024)])
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], venv=light_venv)
    assert facts["gpus"] == [fake(0, "NVIDIA Graphics Device", None, 1024)]


def test_failing_nvidia_smi_falls_back_to_nvml(tmp_path, smi_dir, light_venv):
    if not shutil.which("cc"):
        pytest.fail("no C compiler for the fake NVML library")
    write_failing_nvidia_smi(smi_dir)
    lib = write_fake_libnvml(tmp_path / "lib", [H200, RTX_PRO_6000], driver="575.51.03")
    facts, proc = run_script("--workdir", tmp_path, path_dirs=[smi_dir], env={"LD_LIBRARY_PATH": str(lib.parent)}, venv=light_venv)
    assert facts["gpu_source"] == "nvml"
    assert facts["gpu_error"] is None
    assert facts["driver_version"] == "575.51.03"
    assert facts["gpus"] == [fake(0, "NVIDIA H200", "9.0", 143771),
                             fake(1, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 97887)]
    assert facts["gpu_stack"]["status"] == "ok"
    assert facts["gpu_probe_errors"][0].startswith("nvidia-smi: exit 9: NVIDIA-SMI has failed")
    assert "NVIDIA-SMI has failed" in proc.stderr


def test_nvml_fallback_when_nvidia_smi_missing(tmp_path, light_venv):
    if not shutil.which("cc"):
        pytest.fail("no C compiler for the fake NVML library")
    if shutil.which("nvidia-smi", path=SYSTEM_PATH):
        pytest.fail("a real nvidia-smi is on the system PATH")
    lib = write_fake_libnvml(tmp_path / "lib", [B200])
    facts, _ = run_script("--workdir", tmp_path, env={"LD_LIBRARY_PATH": str(lib.parent)}, venv=light_venv)
    assert facts["gpu_source"] == "nvml"
    assert facts["gpus"] == [fake(0, "NVIDIA B200", "10.0", 183359)]
    assert facts["gpu_probe_errors"] == ["nvidia-smi: not found on PATH"]


def test_every_gpu_source_failing_is_reported_not_fatal(tmp_path, smi_dir, light_venv):
    if not shutil.which("cc"):
        pytest.fail("no C compiler for the fake NVML library")
    write_failing_nvidia_smi(smi_dir)
    lib = write_fake_libnvml(tmp_path / "lib", [], init_rc=9)
    facts, _ = run_script("--workdir", tmp_path, path_dirs=[smi_dir], env={"LD_LIBRARY_PATH": str(lib.parent)}, venv=light_venv)
    assert facts["gpus"] == []
    assert facts["gpu_source"] is None
    assert "nvidia-smi: exit 9" in facts["gpu_error"]
    assert "nvml: nvmlInit_v2: Driver Not Loaded (9)" in facts["gpu_error"]
    assert facts["gpu_stack"]["status"] == "broken"  # nvidia-smi is installed: a driver that does not answer
    assert "modprobe nvidia" in facts["gpu_stack"]["fix"]


def write_fake_cuda(home: Path, version: str = "12.4", archs=("compute_50", "compute_80", "compute_90"),
                    cuobjdump: bool = True) -> Path:
    """A fake CUDA toolkit: ``bin/nvcc`` is a shell script printing nvcc-like output."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    codes = " ".join(a.replace("compute_", "sm_") for a in archs)
    (bin_dir / "nvcc").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
          --version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\\nCuda compilation tools, release {version}, V{version}.99\\n' ;;
          --list-gpu-arch) for a in {" ".join(archs)}; do echo $a; done ;;
          --list-gpu-code) for a in {codes}; do echo $a; done ;;
          *) echo "nvcc fatal   : No input files specified; use option --help for more information" >&2; exit 1 ;;
        esac
        """))
    (bin_dir / "nvcc").chmod(0o755)
    if cuobjdump:
        (bin_dir / "cuobjdump").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "cuobjdump").chmod(0o755)
    return home


def test_fake_cuda_home(tmp_path, light_venv):
    home = write_fake_cuda(tmp_path / "cuda-12.4")
    facts, _ = run_script("--workdir", tmp_path, "--cuda-home", home, venv=light_venv)
    cuda = facts["cuda"]
    toolkits = cuda.pop("toolkits")
    assert cuda == {
        "home": str(home), "home_realpath": str(home), "nvcc": str(home / "bin" / "nvcc"),
        "nvcc_realpath": str(home / "bin" / "nvcc"), "version": "12.4", "build": "V12.4.99",
        "archs": ["compute_50", "compute_80", "compute_90"], "codes": ["sm_50", "sm_80", "sm_90"],
        "cuobjdump": str(home / "bin" / "cuobjdump"), "cuobjdump_source": "cuda home",
        "cccl_include": None, "source": "cuda_home var", "requested_home": str(home), "skipped": [], "error": None,
    }
    assert toolkits[0] == {"home": str(home), "home_realpath": str(home), "nvcc": str(home / "bin" / "nvcc"),
                           "nvcc_realpath": str(home / "bin" / "nvcc"), "version": "12.4", "build": "V12.4.99", "archs": ["compute_50", "compute_80", "compute_90"], "source": "cuda_home var"}


def test_nvcc_search_order(tmp_path, monkeypatch):
    home = write_fake_cuda(tmp_path / "cuda-on-path")
    monkeypatch.setenv("PATH", str(home / "bin"))
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-env")
    assert list(fs._nvcc_home_candidates("/opt/cuda-var")) == [
        ("cuda_home var", "/opt/cuda-var"),
        ("CUDA_HOME env", "/opt/cuda-env"),
        ("/usr/local/cuda", "/usr/local/cuda"),
        ("PATH", str(home)),
    ] + [("/usr/local/cuda-*", h) for h in fs.versioned_toolkits()]


def test_cuda_home_env_var_is_searched(tmp_path, light_venv):
    home = write_fake_cuda(tmp_path / "cuda-env", version="12.9")
    facts, _ = run_script("--workdir", tmp_path, env={"CUDA_HOME": str(home)}, venv=light_venv)
    assert facts["cuda"]["source"] == "CUDA_HOME env"
    assert facts["cuda"]["version"] == "12.9"


def test_broken_nvcc_is_reported(tmp_path, light_venv):
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\necho 'nvcc: cannot execute binary file' >&2\nexit 126\n")
    (home / "bin" / "nvcc").chmod(0o755)
    facts, _ = run_script("--workdir", tmp_path, "--cuda-home", home, venv=light_venv)
    cuda = facts["cuda"]
    assert cuda["nvcc"] == str(home / "bin" / "nvcc")
    assert cuda["version"] is None and cuda["archs"] is None
    assert "exit 126" in cuda["error"] and "cannot execute binary file" in cuda["error"]


@pytest.mark.skipif(not REAL_NVCC.exists(), reason="no CUDA toolkit at /usr/local/cuda")
def test_real_cuda_toolkit(tmp_path, light_venv):
    facts, _ = run_script("--workdir", tmp_path, venv=light_venv)
    cuda = facts["cuda"]
    assert cuda["source"] == "/usr/local/cuda"
    assert cuda["nvcc"] == "/usr/local/cuda/bin/nvcc"
    assert cuda["error"] is None
    assert cuda["version"] and cuda["version"].split(".")[0].isdigit()
    assert "compute_90" in cuda["archs"] and "sm_90" in cuda["codes"]
    if cuda["version"].startswith("13."):
        # nvcc 13 lists base archs only (no compute_90a); 12.0 and 12.1 are there
        assert {"compute_100", "compute_120", "compute_121"} <= set(cuda["archs"])
        assert not any(a.endswith("a") for a in cuda["archs"])
        assert cuda["cccl_include"] == "/usr/local/cuda/include/cccl"


@pytest.mark.skipif(not REAL_NVCC.exists(), reason="no CUDA toolkit at /usr/local/cuda")
def test_missing_cuda_home_is_reported_then_falls_back(tmp_path, light_venv):
    facts, proc = run_script("--workdir", tmp_path, "--cuda-home", tmp_path / "no-cuda", venv=light_venv)
    cuda = facts["cuda"]
    assert cuda["error"] == f"cuda_home {tmp_path / 'no-cuda'} has no executable bin/nvcc"
    assert cuda["requested_home"] == str(tmp_path / "no-cuda")
    assert cuda["source"] == "/usr/local/cuda"
    assert cuda["version"]
    assert "no executable bin/nvcc" in proc.stderr


def test_no_cuda_anywhere(tmp_path, monkeypatch):
    # run the probe in-process with /usr/local/cuda and PATH pointing nowhere
    monkeypatch.setattr(fs, "_nvcc_home_candidates", lambda home: iter([("cuda_home var", str(tmp_path / "x"))]))
    monkeypatch.setattr(fs, "login_path_nvcc", lambda: (None, "no nvcc on the interactive login PATH of bash either"))
    cuda = fs.probe_cuda(str(tmp_path / "x"))
    assert cuda["nvcc"] is None and cuda["home"] is None and cuda["source"] is None
    assert "has no executable bin/nvcc" in cuda["error"] and "nvcc not found" in cuda["error"]


def test_real_interpreter_and_torch(tmp_path):
    torch = pytest.importorskip("torch")
    prefix = Path(sys.prefix)  # the venv itself when the tests run in one (as CI's do)
    facts, _ = run_script("--workdir", tmp_path, "--venv", prefix)
    py = facts["python"]
    assert py["exists"] is True
    assert py["executable"] == str(prefix / "bin" / "python3")
    assert py["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert py["tag"] == "cp%d%d" % sys.version_info[:2]
    assert py["torch"] == torch.__version__
    assert py["torch_cuda"] == torch.version.cuda
    assert py["torch_error"] is None
    assert py["error"] is None
    import sysconfig

    assert os.path.realpath(py["site_packages"]) == os.path.realpath(sysconfig.get_paths()["purelib"])
    assert "pip" in py["packages"]


def test_default_interpreter_is_the_one_running_the_script(tmp_path):
    facts, _ = run_script("--workdir", tmp_path)
    assert facts["python"]["executable"] == sys.executable
    assert facts["python"]["venv"] is None


def _make_venv(path: Path, torch_init: str | None, version: str | None = None) -> Path:
    """A venv whose ``torch`` package is ``__init__.py`` = ``torch_init`` and, with ``version``,
    the files torch's facts are read from (``version.py``, ``lib/libc10.so``,
    ``lib/libtorch_python.so``: the libraries copied from the controller's real torch; the other
    libraries of torch's own that they need, linked: facts read whether they are there)."""
    venv_mod.EnvBuilder(with_pip=False, symlinks=True).create(path)
    if torch_init is not None:
        site = Path(glob.glob(str(path / "lib" / "python3*" / "site-packages"))[0])
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(torch_init)
        if version is not None:
            (site / "torch" / "version.py").write_text(
                f"from typing import Optional\n__version__ = {version!r}\ncuda: Optional[str] = None\n")
            real = Path(importlib.util.find_spec("torch").origin).parent / "lib"
            (site / "torch" / "lib").mkdir()
            for name in ("libc10.so", "libtorch_python.so"):
                shutil.copyfile(real / name, site / "torch" / "lib" / name)
            for lib in real.iterdir():  # the rest of torch's own libraries libtorch_python.so needs
                if lib.name.startswith(("libtorch", "libc10", "libshm")) and not (site / "torch" / "lib" / lib.name).exists():
                    (site / "torch" / "lib" / lib.name).symlink_to(lib)
    return path


def test_torch_is_read_from_its_files_and_an_import_that_kills_the_interpreter_is_its_error(tmp_path):
    pytest.importorskip("torch")
    # importing this torch kills the interpreter: its files' facts are still read first, and the
    # import (tried after them, as verify and the build would) is what is wrong with it
    venv = _make_venv(tmp_path / "venv", "import os\nos._exit(139)\n", version="2.99.0+cu130")
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    py = facts["python"]
    assert py["exists"] is True and py["in_venv"] is True
    assert py["torch"] == "2.99.0+cu130" and py["torch_error"].startswith("import torch ended the interpreter: exit 139")
    assert py["torch_import"]["ok"] is False and py["torch_probe_error"] is None
    assert py["torch_cxx11_abi"] is True and py["torch_arch_list"] == []
    assert py["site_packages"].startswith(str(venv))


def test_torch_whose_import_hangs_costs_nothing(tmp_path):
    pytest.importorskip("torch")
    venv = _make_venv(tmp_path / "venv", "import time\ntime.sleep(60)\n", version="2.99.0")
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv, "--probe-timeout-s", "1.5")
    assert facts["python"]["torch"] == "2.99.0" and facts["python"]["torch_error"] is None
    assert facts["python"]["torch_import"]["ok"] is None  # a slow import is a note, not a broken torch
    assert facts["duration_s"] < 30


def test_a_venv_python_that_hangs_at_start_is_named_not_torch(tmp_path):
    """Operator trial 11: a ``.pth`` in the venv's site-packages that waits (on a dead NFS mount)
    hangs its python at every start; facts warned "torch does not import (interpreter probe
    failed)" for a venv whose torch was fine. The line now names the interpreter's start."""
    from fleetctl.build.cudacompat import parse_tokens
    from fleetctl.facts.refusals import host_refusals, silent_python_problem
    from fleetctl.facts.venv import torch_problem, venv_warnings

    venv = _make_venv(tmp_path / "venv", "")
    site = Path(glob.glob(str(venv / "lib" / "python3*" / "site-packages"))[0])
    (site / "zz_nfs.pth").write_text("import time; time.sleep(60)\n")
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv, "--probe-timeout-s", "1")
    py = facts["python"]
    assert py["exists"] is True and py["version"] is None and "timed out after 2 s" in py["error"], py
    line = silent_python_problem(facts, str(venv))
    assert line and line.startswith(f"venv {venv}: its python {venv}/bin/python3 did not start ("), line
    assert "a .pth file or sitecustomize in its site-packages" in line and "-X importtime" in line, line
    assert line in host_refusals(facts, parse_tokens("9.0a"), str(venv))
    assert torch_problem(facts, str(venv), f"{venv}/bin/python3", "fp4_kernels") is None
    assert not any("torch" in n.text for n in venv_warnings(facts)), venv_warnings(facts)
    assert silent_python_problem(facts, None) is None  # no venv var: the system's python, not the host's venv


def test_an_incomplete_torch_is_reported_not_fatal(tmp_path):
    venv = _make_venv(tmp_path / "venv", "raise ImportError('libtorch_cuda.so: cannot open shared object file')\n")
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    py = facts["python"]
    assert py["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert py["torch"] is None
    assert py["torch_error"].startswith("torch at ") and "version.py, lib/libc10.so" in py["torch_error"]


def test_a_torch_without_its_shared_objects_still_has_a_version(tmp_path):
    """version.py decides the version; only the ABI and the arch list need libc10.so and
    libtorch_python.so (a stand-in torch, as the staged tests install, has neither)."""
    venv = _make_venv(tmp_path / "venv", "from .version import __version__\n")
    site = Path(glob.glob(str(venv / "lib" / "python3*" / "site-packages"))[0])
    (site / "torch" / "version.py").write_text("__version__ = '2.3.0'\ncuda = '13.0'\n")
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    py = facts["python"]
    assert (py["torch"], py["torch_cuda"], py["torch_error"]) == ("2.3.0", "13.0", None)
    assert py["torch_cxx11_abi"] is None and py["torch_arch_list"] is None


def test_torch_facts_equal_what_import_torch_says():
    """The reader against the controller's real torch: every value equals ``import torch``'s."""
    pytest.importorskip("torch")
    ns: dict = {}
    exec(fs.TORCH_READER, ns)
    read = ns["read_torch"]()
    code = ("import json, torch; print(json.dumps({'torch': str(torch.__version__), 'cuda': torch.version.cuda, "
            "'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI), 'archs': torch.cuda.get_arch_list(), "
            "'flags': getattr(torch._C, '_cuda_getArchFlags', lambda: None)(), 'file': torch.__file__}))")
    said = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                     text=True).stdout)
    assert read["torch_error"] is None
    assert read["torch"] == said["torch"]
    assert read["torch_cuda"] == said["cuda"]
    assert read["torch_cxx11_abi"] is said["abi"]
    # the compiled arch flags: what torch.cuda.get_arch_list() returns on a host with a GPU
    assert read["torch_arch_list"] == (said["flags"].split() if said["flags"] else [])
    if said["archs"]:
        assert read["torch_arch_list"] == said["archs"]
    assert os.path.realpath(read["torch_file"]) == os.path.realpath(said["file"])


def test_elf_reader_finds_the_abi_and_arch_flags_of_real_shared_objects(tmp_path):
    """The reader on a torch-shaped folder whose libraries are built here with each C++ ABI and hold
    an arch flags string compiled as torch/csrc/cuda/Module.cpp does (``C10_STRINGIZE``)."""
    src = tmp_path / "m.cpp"
    src.write_text('#include <string>\n#define S_(x) #x\n#define S(x) S_(x)\n'
                   'extern "C" const char* flags() { static const char* f = S(CUDA_ARCH_FLAGS); return f; }\n'
                   'std::string twice(const std::string& s) { return s + s; }\n')
    for abi in (0, 1):
        torch_dir = tmp_path / f"abi{abi}" / "torch"
        (torch_dir / "lib").mkdir(parents=True)
        (torch_dir / "__init__.py").write_text("raise SystemExit('never imported')\n")
        (torch_dir / "version.py").write_text("__version__ = '2.99.0+cu130'\ncuda = '13.0'\nhip = None\n")
        lib = torch_dir / "lib" / "libc10.so"
        subprocess.run(["g++", "-shared", "-fPIC", "-O1", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                        "-DCUDA_ARCH_FLAGS=sm_80 sm_90 sm_90a compute_90", "-o", str(lib), str(src)], check=True)
        shutil.copyfile(lib, torch_dir / "lib" / "libtorch_python.so")
        code = fs.TORCH_READER + "\nimport json\nprint(json.dumps(read_torch()))\n"
        out = subprocess.run([sys.executable, "-S", "-c", code], check=True, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(torch_dir.parent)}).stdout
        read = json.loads(out)
        assert read["torch"] == "2.99.0+cu130" and read["torch_cuda"] == "13.0" and read["torch_error"] is None
        assert read["torch_cxx11_abi"] is bool(abi)
        assert read["torch_arch_list"] == ["sm_80", "sm_90", "sm_90a", "compute_90"]


def test_venv_without_torch(tmp_path):
    venv = _make_venv(tmp_path / "venv", None)
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    assert facts["python"]["torch"] is None
    assert facts["python"]["torch_error"] == "ModuleNotFoundError: No module named 'torch'"


def test_missing_venv_is_reported(tmp_path):
    facts, proc = run_script("--workdir", tmp_path, "--venv", tmp_path / "nope")
    py = facts["python"]
    assert py["exists"] is False
    assert py["executable"] == str(tmp_path / "nope" / "bin" / "python3")
    assert py["error"] == f"{tmp_path / 'nope' / 'bin' / 'python3'}: no such interpreter"
    assert py["version"] is None and py["torch"] is None


def test_system_facts(tmp_path, light_venv):
    facts, _ = run_script("--workdir", tmp_path / "not" / "yet", venv=light_venv)
    assert facts["script_version"] == fs.SCRIPT_VERSION
    assert facts["disk_free_path"] == str(tmp_path)
    assert isinstance(facts["disk_free_mib"], int) and facts["disk_free_mib"] >= 0
    assert facts["cpu_count"] == len(os.sched_getaffinity(0))
    assert facts["mem_total_mib"] > 0 and 0 <= facts["mem_available_mib"] <= facts["mem_total_mib"]
    assert facts["hostname"]
    assert facts["errors"] == []
    assert set(facts["cmake"]) == {"path", "version", "error"}
    assert "path" in facts["ninja"] and "path" in facts["uv"]
    if shutil.which("cmake", path=SYSTEM_PATH):
        assert facts["cmake"]["version"]


def test_venv_tools_come_first(tmp_path):
    venv = _make_venv(tmp_path / "venv", None)
    (venv / "bin" / "cmake").write_text("#!/bin/sh\necho 'cmake version 4.1.2'\n")
    (venv / "bin" / "cmake").chmod(0o755)
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    assert facts["cmake"] == {"path": str(venv / "bin" / "cmake"), "version": "4.1.2", "error": None}


def test_unknown_arguments_do_not_crash(tmp_path, light_venv):
    facts, _ = run_script("--workdir", tmp_path, "--future-flag", "x", venv=light_venv)
    assert facts["errors"] == ["unknown arguments ignored: --future-flag x"]


def _python38():
    """A working Python 3.8 interpreter (the oldest the script must run on), or None."""
    candidates = sorted(glob.glob(os.path.join(REAL_HOME, ".pyenv/versions/3.8*/bin/python3")))
    candidates += [p for p in (shutil.which("python3.8"),) if p]
    for candidate in candidates:
        try:
            out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out == "(3, 8)":
            return candidate
    return None


PYTHON38 = _python38()


@pytest.mark.skipif(PYTHON38 is None, reason="no Python 3.8 here")
def test_runs_on_python38(tmp_path, smi_dir):
    write_fake_nvidia_smi(smi_dir, [H200, RTX_PRO_6000])
    facts, _ = run_script("--workdir", tmp_path, "--venv", Path(sys.executable).resolve().parent.parent,
                          path_dirs=[smi_dir], python=PYTHON38)
    assert [g["compute_cap"] for g in facts["gpus"]] == ["9.0", "12.0"]
    assert facts["python"]["version"] == "%d.%d.%d" % sys.version_info[:3]


# --------------------------------------------------------------------------------------------
# fleetctl.facts.gather: gather_facts over a test double of the connection seam
# --------------------------------------------------------------------------------------------


class SubprocessConnection:
    """A minimal test double of fleetctl.connection.base.Connection: local subprocesses."""

    def __init__(self, host: str, home: Path, path_dirs=(), env=None, extra=None):
        self.host = host
        self.home = str(home)
        self.path_dirs = list(path_dirs)
        self.extra_env = dict(env or {})
        self.extra = dict(extra or {})
        self.puts: list[tuple[str, str, int | None]] = []
        self.argvs: list[list[str]] = []

    def extra_facts(self):
        return dict(self.extra)

    async def put(self, local_path, remote_path, *, mode=None):
        self.puts.append((local_path, remote_path, mode))
        Path(remote_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, remote_path)
        if mode is not None:
            os.chmod(remote_path, mode)

    async def run(self, argv, *, env=None, cwd=None, timeout_s=None, on_line=None, stdin=None):
        from fleetctl.connection.base import CommandResult

        self.argvs.append(list(argv))
        full_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
        full_env["PATH"] = ":".join([str(d) for d in self.path_dirs] + [SYSTEM_PATH])
        full_env.update(self.extra_env)
        full_env.update(env or {})
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=full_env, cwd=cwd)
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        return CommandResult(list(argv), proc.returncode, out, err)


def test_gather_facts_end_to_end(tmp_path, smi_dir):
    write_fake_nvidia_smi(smi_dir, [H200, RTX_PRO_6000])
    conn = SubprocessConnection("node01", tmp_path / "home", path_dirs=[smi_dir])
    facts = asyncio.run(gather_facts(conn, workdir="fleetctl-work", python=sys.executable))
    remote = str(tmp_path / "home" / "fleetctl-work" / "facts.py")
    assert conn.puts == [(str(SCRIPT), remote, 0o644)]
    assert conn.argvs == [[sys.executable, remote, "--workdir", str(tmp_path / "home" / "fleetctl-work")]]
    assert facts["reachable"] is True
    assert [g["compute_cap"] for g in facts["gpus"]] == ["9.0", "12.0"]
    build = facts["build"]
    assert build["torch_cuda_arch_list"] == "9.0a;12.0a"
    assert build["cuda_architectures"] == "90a;120a"
    assert build["mixed_sm"] is True and build["source"] == "gpus"
    assert build["max_jobs"] >= 1
    # the facts contract keys
    for key in ("gpus", "driver_version", "cuda", "python", "cmake", "cpu_count", "mem_total_mib",
                "disk_free_mib", "build"):
        assert key in facts
    for key in ("home", "nvcc", "version"):
        assert key in facts["cuda"]
    for key in ("executable", "version", "torch", "torch_cuda"):
        assert key in facts["python"]


def test_gather_facts_no_gpu_uses_fallback_and_passes_vars(tmp_path, smi_dir):
    smi_dir.mkdir()  # no nvidia-smi, no driver: a build host
    home = write_fake_cuda(tmp_path / "cuda")
    conn = SubprocessConnection("node02", tmp_path / "home", path_dirs=[smi_dir])
    facts = asyncio.run(gather_facts(conn, workdir="/" + str(tmp_path / "abs").lstrip("/"), cuda_home=str(home),
                                     venv=str(tmp_path / "nope"), python=sys.executable, fallback_archs="10.0a",
                                     gpu_timeout_s=7))
    assert conn.argvs[0][2:] == ["--workdir", str(tmp_path / "abs"), "--venv", str(tmp_path / "nope"),
                                 "--cuda-home", str(home), "--gpu-timeout-s", "7"]
    assert facts["gpu_stack"]["status"] == "none"
    assert facts["build"]["source"] == "fallback"
    assert facts["build"]["torch_cuda_arch_list"] == "10.0a"
    assert facts["build"]["notes"][0] == "no GPU found (no NVIDIA driver: a build host): building for fallback_archs 10.0a"
    # the fake nvcc 12.4 lists no compute_100
    assert facts["build"]["unsupported"] == ["compute_100a"]
    assert facts["python"]["exists"] is False


def test_gather_facts_a_node_whose_gres_has_gpus_but_no_driver_fails_unless_verify_device_cpu(tmp_path, smi_dir):
    """Slurm's GRES (the connection's view of the node) says GPUs; the node has no nvidia-smi and no
    driver: broken, in one line naming the GRES and what facts found (new-user trial: such nodes
    built for fallback_archs, verified on the CPU and ended "ok"). ``verify_device: cpu`` opts in."""
    if glob.glob("/dev/nvidia*") or os.path.exists("/proc/driver/nvidia"):
        pytest.fail("this machine has an NVIDIA driver: the no-driver case cannot be run here")
    smi_dir.mkdir()  # no nvidia-smi on PATH
    view = {"node": "n7", "state": "idle", "gres": ["gpu:h200:2(S:0-1)"]}
    conn = SubprocessConnection("n7", tmp_path / "home", path_dirs=[smi_dir], extra={"slurm": view})
    with pytest.raises(GpuStackBroken) as err:
        asyncio.run(gather_facts(conn, workdir="w", python=sys.executable))
    line = str(err.value)
    assert line.startswith("n7: GPU stack broken: Slurm GRES gpu:h200:2(S:0-1) for node n7, but nvidia-smi: not "
                           "found on PATH, and no NVIDIA driver is loaded there"), line
    assert "\n" not in line and "set the host var verify_device: cpu" in line
    assert err.value.facts["slurm"] == view and "build" not in err.value.facts  # kept for the run record
    # verify_device: cpu, the explicit opt-in: built for fallback_archs (and verified on the CPU)
    facts = asyncio.run(gather_facts(conn, workdir="w", python=sys.executable, fallback_archs="10.0a",
                                     verify_device="cpu"))
    assert facts["build"]["source"] == "fallback" and facts["slurm"] == view
    unmet = [n for n in facts["build"]["env_notes"] if n.startswith("warning: ")]  # told by every play
    assert unmet == ["warning: Slurm GRES gpu:h200:2(S:0-1) for node n7 gives it 2 GPUs, but facts found none "
                     "(nvidia-smi: not found on PATH; no /proc/driver/nvidia, /dev/nvidia*): run as a host without "
                     "GPUs (fallback_archs, verify on the CPU) because the host var verify_device: cpu says so; if n7 "
                     "should have its GPUs, its NVIDIA driver is gone (reinstall it, or drain the node)"]
    assert unmet[0] in facts["build"]["notes"]
    # the inventory's word: verify_device: cuda on a host without a driver
    plain = SubprocessConnection("b1", tmp_path / "home", path_dirs=[smi_dir])
    with pytest.raises(GpuStackBroken, match=r"^b1: GPU stack broken: the host var verify_device: cuda, but "
                                             r"nvidia-smi: not found on PATH"):
        asyncio.run(gather_facts(plain, workdir="w", python=sys.executable, verify_device="cuda"))
    # nothing says GPUs (no GRES, or GRES without a GPU): a build host, as before
    for extra in ({}, {"slurm": {"node": "c1", "gres": ["mps:100"]}}, {"slurm": None}):
        cpu_node = SubprocessConnection("c1", tmp_path / "home", path_dirs=[smi_dir], extra=extra)
        assert asyncio.run(gather_facts(cpu_node, workdir="w", python=sys.executable))["build"]["source"] == "fallback"


@pytest.mark.parametrize("gres, count", [
    ("gpu:h200:8", 8), ("gpu:h200:8(S:0-1)", 8), ("gpu:2", 2), ("gpu:h200", 1), ("gpu", 1),
    ("gpu:a100:4(IDX:0-3)", 4), ("gpu:h200:0", 0), ("mps:100", 0), ("(null)", 0), ("gpus:2", 0),
])
def test_gres_gpu_count(gres, count):
    from fleetctl.build.gpustack import gres_gpu_count

    assert gres_gpu_count(gres) == count


def test_gather_facts_picks_the_newest_toolkit_that_builds_the_hosts_archs(tmp_path, smi_dir):
    write_fake_nvidia_smi(smi_dir, [RTX_PRO_6000])
    old = write_fake_cuda(tmp_path / "cuda-12.4", archs=("compute_80", "compute_90"))  # knows no compute_120
    conn = SubprocessConnection("node03", tmp_path / "home", path_dirs=[smi_dir], env={"CUDA_HOME": str(old)})
    facts = asyncio.run(gather_facts(conn, workdir="w", python=sys.executable))
    assert facts["cuda"]["home"].startswith("/usr/local/cuda") and facts["cuda"]["version"].startswith("13.")  # CI's toolkit
    assert facts["build"]["unsupported"] == []
    assert facts["build"]["notes"][0].startswith(f"nvcc 12.4 at {old}/bin/nvcc cannot build 12.0a: using nvcc")
    pinned = asyncio.run(gather_facts(conn, workdir="w", python=sys.executable, cuda_home=str(old)))
    assert pinned["cuda"]["home"] == str(old) and pinned["build"]["unsupported"] == ["compute_120a"]


def test_gather_facts_without_python_names_host_and_stderr(tmp_path):
    fake_python = tmp_path / "python3"
    fake_python.write_text("#!/bin/sh\necho 'bash: line 1: python3: command not found' >&2\nexit 127\n")
    fake_python.chmod(0o755)
    conn = SubprocessConnection("node03", tmp_path / "home")
    with pytest.raises(TaskFailed) as info:
        asyncio.run(gather_facts(conn, workdir="w", python=str(fake_python)))
    assert str(info.value) == ("node03: facts script printed no JSON object (exit 127): "
                               "bash: line 1: python3: command not found")
    assert info.value.host == "node03"


def test_parse_facts_output():
    assert parse_facts_output("h", 0, 'banner\n{"gpus": []}\n', "") == {"gpus": []}
    with pytest.raises(TaskFailed, match=r"^h: facts script printed no JSON object \(exit 127\): "
                                         r"bash: line 1: python3: command not found$"):
        parse_facts_output("h", 127, "", "bash: line 1: python3: command not found\nmore\n")
    with pytest.raises(TaskFailed, match=r"\(exit 0\): \{not json$"):
        parse_facts_output("h", 0, "{not json\n", "")
    with pytest.raises(TaskFailed, match="killed by a signal"):
        parse_facts_output("h", None, "", "")
    with pytest.raises(TaskFailed, match=r"\(exit 1\): Traceback"):
        parse_facts_output("h", 1, '{"partial": 1}\n', "Traceback (most recent call last):\n")


def test_a_facts_script_that_crashes_is_named_by_its_exception_not_the_traceback_header(tmp_path):
    """A host whose python3 dies in a traceback (a quota, a broken stdlib) is failed with the exception
    line, not ``Traceback (most recent call last):``, which says nothing."""
    crashing = tmp_path / "python3"
    crashing.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"raise OSError(122, 'Disk quota exceeded')\"\n")
    crashing.chmod(0o755)
    conn = SubprocessConnection("node04", tmp_path / "home")
    with pytest.raises(TaskFailed) as info:
        asyncio.run(gather_facts(conn, workdir="w", python=str(crashing)))
    assert str(info.value) == ("node04: facts script printed no JSON object (exit 1): "
                               "OSError: [Errno 122] Disk quota exceeded")


def test_remote_workdir_and_argv():
    assert remote_workdir("~", "/home/u") == "/home/u"
    assert remote_workdir("~/fleetctl", "/home/u") == "/home/u/fleetctl"
    assert remote_workdir("work/x/", "/home/u") == "/home/u/work/x"
    assert remote_workdir("/opt/w/../w2", "/home/u") == "/opt/w2"
    assert facts_argv("python3", "/w/facts.py", workdir="/w") == ["python3", "/w/facts.py", "--workdir", "/w"]
    assert facts_argv("py", "s", workdir="w", venv="/v", cuda_home="/c") == [
        "py", "s", "--workdir", "w", "--venv", "/v", "--cuda-home", "/c"]


def test_script_path(monkeypatch, tmp_path):
    assert script_path("facts.py") == SCRIPT
    with pytest.raises(FleetError, match="host script nope.py not found in"):
        script_path("nope.py")
    with pytest.raises(FleetError, match="invalid script name"):
        script_path("../facts.py")
    (tmp_path / "facts.py").write_text("#")
    monkeypatch.setenv("FLEETCTL_SCRIPTS_DIR", str(tmp_path))
    assert script_path("facts.py") == tmp_path / "facts.py"


def test_toolkit_only_on_the_interactive_login_path_is_found(tmp_path, monkeypatch):
    home = write_fake_cuda(tmp_path / "opt-cuda", version="12.9")
    shell = tmp_path / "bin" / "bash"  # stands in for `bash -l -i -c CMD`: what ~/.bashrc would add
    shell.parent.mkdir()
    shell.write_text(f"#!/bin/sh\necho Welcome!\necho '@@FLEETCTL_PATH@@/usr/bin:{home}/bin@@FLEETCTL_PATH@@'\n")
    shell.chmod(0o755)
    monkeypatch.setenv("SHELL", str(shell))
    monkeypatch.setattr(fs, "_nvcc_home_candidates", lambda h: iter([("/usr/local/cuda", str(tmp_path / "none"))]))
    cuda = fs.probe_cuda(None)
    assert cuda["home"] == str(home) and cuda["source"] == "interactive login PATH" and cuda["version"] == "12.9"
    assert fs.parse_login_path("motd\n@@FLEETCTL_PATH@@/a:/b@@FLEETCTL_PATH@@\nbye") == "/a:/b"
    monkeypatch.setenv("SHELL", "/bin/tcsh")
    assert fs.login_path_nvcc() == (None, "login shell /bin/tcsh not asked")


def test_versioned_toolkits_newest_first(tmp_path):
    for name in ("cuda-12.9", "cuda-13.0", "cuda-12.10", "cuda-11.8"):
        (tmp_path / name).mkdir()
    got = [Path(p).name for p in fs.versioned_toolkits(str(tmp_path / "cuda-*"))]
    assert got == ["cuda-13.0", "cuda-12.10", "cuda-12.9", "cuda-11.8"]


MOUNTINFO_V1 = """\
30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
35 30 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct
"""
MOUNTINFO_V2_CONTAINER = "1093 1083 0:29 /kubepods/pod1/ctr /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n"


def test_cgroup_parsers():
    assert fs.parse_proc_cgroup("12:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n") == {
        "v2": "/", "v1": {"memory": "/docker/abc", "cpu": "/docker/abc", "cpuacct": "/docker/abc"}}
    mounts = fs.parse_mountinfo_cgroups(MOUNTINFO_V1)
    assert mounts["v2"] == ("/", "/sys/fs/cgroup/unified")
    assert mounts["v1"] == {"memory": ("/", "/sys/fs/cgroup/memory"), "cpu": ("/", "/sys/fs/cgroup/cpu,cpuacct")}
    assert fs.cgroup_dir(mounts["v1"]["memory"], "/docker/abc") == "/sys/fs/cgroup/memory/docker/abc"
    inner = fs.parse_mountinfo_cgroups(MOUNTINFO_V2_CONTAINER)["v2"]
    assert fs.cgroup_dir(inner, "/kubepods/pod1/ctr") == "/sys/fs/cgroup"  # a container sees its cgroup as /
    assert fs.parse_memory_max("9223372036854771712\n") is None  # cgroup v1's "unlimited"
    assert fs.parse_memory_max("536870912") == 512
    assert fs.parse_cfs_quota("-1", "100000") is None and fs.parse_cfs_quota("150000", "100000") == 1.5
    assert fs.parse_memory_stat_inactive_file("anon 5\ninactive_file 1048576\n", 2) == 1048576
    assert fs.parse_memory_stat_inactive_file("cache 9\ntotal_inactive_file 2097152\n", 1) == 2097152


def _cgroup_tree(root: Path, version: int, limits: dict, usage: int) -> tuple[Path, Path]:
    """A recorded cgroup file tree (what the kernel shows) and its /proc files."""
    if version == 2:
        mount = root / "sys" / "fs" / "cgroup"
        (mount / "a" / "b").mkdir(parents=True)
        (mount / "cgroup.controllers").write_text("cpu memory pids\n")
        for rel, text in limits.items():
            (mount / rel).write_text(text)
        (mount / "a" / "b" / "memory.current").write_text(str(usage))
        (mount / "a" / "b" / "memory.stat").write_text("inactive_file 0\n")
        proc, info = "0::/a/b\n", f"31 30 0:27 / {mount} rw - cgroup2 cgroup2 rw\n"
    else:
        mount = root / "memory"
        (mount / "a" / "b").mkdir(parents=True)
        for rel, text in limits.items():
            (mount / rel).write_text(text)
        (mount / "a" / "b" / "memory.usage_in_bytes").write_text(str(usage))
        proc, info = "4:memory:/a/b\n", f"35 30 0:31 / {mount} rw - cgroup cgroup rw,memory\n"
    (root / "cgroup").write_text(proc)
    (root / "mountinfo").write_text(info)
    return root / "cgroup", root / "mountinfo"


@pytest.mark.parametrize("version,limits", [
    (2, {"a/memory.max": "1073741824\n", "a/b/memory.max": "max\n", "a/b/cpu.max": "200000 100000\n"}),
    (1, {"a/memory.limit_in_bytes": "1073741824\n", "a/b/memory.limit_in_bytes": "9223372036854771712\n"}),
])
def test_the_lowest_limit_up_the_tree_applies(tmp_path, version, limits):
    proc, info = _cgroup_tree(tmp_path, version, limits, usage=256 * 1024 * 1024)
    cg = fs.probe_cgroup(str(proc), str(info))
    assert cg["version"] == version and cg["memory_limit_mib"] == 1024 and cg["memory_used_mib"] == 256
    assert cg["memory_limit_file"].endswith("/a/" + ("memory.max" if version == 2 else "memory.limit_in_bytes"))
    assert cg["cpu_quota"] == (2.0 if version == 2 else None)


def test_tmp_workdir_and_login_env_facts(tmp_path, light_venv):
    facts, _ = run_script("--workdir", tmp_path, venv=light_venv,
                          env={"TMPDIR": str(tmp_path), "VIRTUAL_ENV": "/stray/venv", "CONDA_PREFIX": "/opt/conda"})
    assert facts["tmp"]["path"] == str(tmp_path) and facts["tmp"]["noexec"] is False and facts["tmp"]["writable"]
    assert facts["workdir_fs"]["path"] == str(tmp_path) and facts["workdir_fs"]["free_mib"] > 0
    assert facts["login_env"] == {"VIRTUAL_ENV": "/stray/venv", "CONDA_PREFIX": "/opt/conda", "TMPDIR": str(tmp_path)}
    assert facts["python"]["prefix"] == str(light_venv)  # the probe did not run in the stray environment


@pytest.mark.parametrize("smi_rc, smi_message, fix", [
    (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95",
     "reboot the host, or reload the nvidia kernel modules"),
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.", "modprobe nvidia"),
    (6, "No devices were found", "Xid"),
], ids=["mismatch", "no-driver-loaded", "no-devices"])
def test_gather_facts_refuses_a_broken_stack_never_the_fallback(tmp_path, smi_dir, smi_rc, smi_message, fix):
    write_failing_nvidia_smi(smi_dir, rc=smi_rc, message=smi_message)
    conn = SubprocessConnection("node09", tmp_path / "home", path_dirs=[smi_dir])
    with pytest.raises(GpuStackBroken) as err:
        asyncio.run(gather_facts(conn, workdir="w", python=sys.executable, fallback_archs="10.0a"))
    assert str(err.value).startswith(f"node09: GPU stack broken: nvidia-smi: exit {smi_rc}: {smi_message.splitlines()[0]}")
    assert fix in str(err.value)
    assert err.value.facts["gpu_stack"]["status"] == "broken" and "build" not in err.value.facts


@pytest.mark.parametrize("body, reason, fix", [
    ("exit 0", "nvidia-smi: exit 0 but it listed no GPU (no output)", "a stub or wrapper on PATH?"),
    ("ulimit -c 0; kill -SEGV $$", "nvidia-smi: killed by SIGSEGV: no output", "nvidia-smi crashed"),
], ids=["silent-exit-0", "sigsegv"])
def test_an_nvidia_smi_that_is_silent_or_crashes_is_named_as_it_ended(tmp_path, smi_dir, body, reason, fix):
    """nvidia-smi that exits 0 printing nothing, and one that dies by SIGSEGV: the host is broken,
    and the line says how nvidia-smi ended (new-user trial: "exit 6: No devices were found" for the
    first, "exit -11" for the second)."""
    smi_dir.mkdir(parents=True, exist_ok=True)
    smi = smi_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body + "\n")
    smi.chmod(0o755)
    conn = SubprocessConnection("node09", tmp_path / "home", path_dirs=[smi_dir])
    with pytest.raises(GpuStackBroken) as err:
        asyncio.run(gather_facts(conn, workdir="w", python=sys.executable, fallback_archs="10.0a"))
    assert str(err.value).startswith(f"node09: GPU stack broken: {reason}; fix: "), str(err.value)
    assert fix in str(err.value) and "exit 6" not in str(err.value) and "exit -" not in str(err.value)
    assert err.value.facts["gpu_stack"]["status"] == "broken"


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_lost_gpu_is_named_never_the_healthy_gpus_row(tmp_path, smi_dir, stream):
    """GPU 1 fallen off the bus (Xid 79): nvidia-smi prints GPU 0's row, then "Unable to determine
    the device handle for GPU ...: GPU is lost" and exits 15 (new-user trial: the failure quoted
    GPU 0's healthy row)."""
    write_lost_gpu_nvidia_smi(smi_dir, [H200], stream=stream)
    conn = SubprocessConnection("node09", tmp_path / "home", path_dirs=[smi_dir])
    with pytest.raises(GpuStackBroken) as err:
        asyncio.run(gather_facts(conn, workdir="w", python=sys.executable))
    assert str(err.value).startswith(f"node09: GPU stack broken: nvidia-smi: exit 15: {gpu_lost_message(1)}")
    assert "NVIDIA H200" not in str(err.value)
    assert "reboot of the host" in str(err.value) and "nvidia-smi -r" in str(err.value)


def test_a_driver_before_r510_without_compute_cap_is_too_old_not_broken(tmp_path, smi_dir):
    """R470's nvidia-smi answers ``Field "compute_cap" is not a valid field to query.`` (exit 2):
    the driver is too old, named with its version; not "GPU stack broken: exit 2"."""
    write_fake_nvidia_smi(smi_dir, [H200], driver="470.182.03", unknown_fields=("compute_cap",))
    conn = SubprocessConnection("node09", tmp_path / "home", path_dirs=[smi_dir])
    with pytest.raises(GpuStackBroken) as err:
        asyncio.run(gather_facts(conn, workdir="w", python=sys.executable))
    assert str(err.value).startswith("node09: driver too old (compute_cap needs R510+; NVIDIA nvidia-smi docs): "
                                     "nvidia-smi of driver 470.182.03 answers")
    assert "GPU stack broken" not in str(err.value) and "exit 2" not in str(err.value)
    assert "update the NVIDIA driver to R510 or newer" in str(err.value)
    assert err.value.facts["gpu_stack"]["too_old"] is True


def test_build_plan_refuses_the_fallback_for_a_broken_stack():
    from fleetctl.build.archs import build_plan

    broken = {"gpus": [], "gpu_stack": {"status": "broken", "reason": "nvidia-smi: exit 18: mismatch"}}
    with pytest.raises(ValueError, match="only for hosts without an NVIDIA driver"):
        build_plan(broken)
    old_script = {"gpus": [], "gpu_error": "nvidia-smi: exit 9: NVIDIA-SMI has failed"}  # facts without gpu_stack
    with pytest.raises(ValueError, match="GPU stack is broken"):
        build_plan(old_script)
    assert build_plan({"gpus": [], "gpu_stack": {"status": "none"}})["source"] == "fallback"


@pytest.mark.parametrize("traces, nvml_gpus, status", [
    ([], None, "none"),
    (["/proc/driver/nvidia/version", "/dev/nvidiactl"], None, "broken"),  # a driver, no nvidia-smi, NVML failing
    (["/dev/nvidia0"], [{"index": 0}], "ok"),                              # NVML lists the GPUs
    ([], [], "broken"),                                                    # NVML answers: no GPU
])
def test_gpu_stack_without_nvidia_smi(traces, nvml_gpus, status):
    smi = {"gpus": None, "missing": True, "error": "nvidia-smi: not found on PATH", "rc": None, "hung": False}
    stack = fs.gpu_stack(smi, nvml_gpus, "nvml: libnvidia-ml.so.1: cannot open" if nvml_gpus is None else None,
                         traces, [], loaded="580.82.07")
    assert stack["status"] == status
    if status == "broken":
        assert "nvidia-smi is not on PATH" in stack["reason"] and "580.82.07" in stack["fix"]


def test_parse_proc_stat_and_stuck_probes(tmp_path):
    assert fs.parse_proc_stat("588 (nvidia-smi) D 1 588 588 0 -1 4194304 64 0 0 0 0 0 0 0 20 0 1 0 9000 1 2") == ("D", 9000)
    assert fs.parse_proc_stat("7 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 42 x") == ("S", 42)
    assert fs.parse_proc_stat("junk") == (None, None)
    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "uptime").write_text("1000.00 50.00\n")
    for pid, comm, state, start_s in ((10, "nvidia-smi", "D", 900), (11, "nvidia-smi", "S", 100),
                                      (12, "nvidia-smi", "D", 999.5), (13, "python3", "D", 1)):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "comm").write_text(comm + "\n")
        (d / "stat").write_text(f"{pid} ({comm}) {state} " + " ".join(["0"] * 18) + f" {int(start_s * ticks)} 0\n")
    assert fs.stuck_gpu_probes(5, proc_root=str(tmp_path)) == [{"pid": 10, "age_s": 100.0, "state": "D"}]


def test_smi_failure_names_the_loaded_and_library_versions():
    reason, fix = fs.smi_failure(18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                     "NVML library version: 580.95", loaded="580.82.07")
    assert reason == ("nvidia-smi: exit 18: Failed to initialize NVML: Driver/library version mismatch "
                      "(loaded kernel module 580.82.07, NVML library 580.95)")
    assert "reboot the host" in fix and "modprobe nvidia" in fix
    reason, _ = fs.smi_failure(None, "", timeout_s=5)
    assert reason == "nvidia-smi did not answer in 5 s: a GPU may have fallen off the bus; see dmesg for Xid"


#: ``--query-gpu=index,name,compute_cap,memory.total,driver_version,uuid,pci.bus_id,mig.mode.current``
#: of a host with GPU 1 in an error state (after an Xid 79 or an uncorrectable ECC error), exit 0
SMI_ERROR_STATE = ("0, NVIDIA H100 80GB HBM3, 9.0, 81559, 580.95.05, GPU-aaaa, 00000000:18:00.0, Disabled\n"
                   "1, NVIDIA H100 80GB HBM3, [Unknown Error], [Unknown Error], 580.95.05, GPU-bbbb, 00000000:3C:00.0, "
                   "[Unknown Error]\n")


@pytest.mark.parametrize("field, value, fault", [
    ("compute_cap", "[Unknown Error]", "[Unknown Error]"),
    ("memory.total", "[GPU requires reset]", "[GPU requires reset]"),
    ("mig.mode.current", "[GPU is lost]", "[GPU is lost]"),
    ("name", "[Unknown Error]", "[Unknown Error]"),
    # normal on healthy GPUs: no MIG, a board the driver does not name, memory shared with the system
    ("mig.mode.current", "[N/A]", None), ("compute_cap", "[N/A]", None), ("memory.total", "[Not Supported]", None),
    ("driver_version", "[N/A]", None),
    # answered for every GPU the driver manages: a placeholder there is a GPU that did not answer
    ("uuid", "[N/A]", "[N/A]"), ("pci.bus_id", "[Not Supported]", "[Not Supported]"),
    ("compute_cap", "9.0", None), ("name", "NVIDIA H100 80GB HBM3", None),
])
def test_smi_field_fault_is_decided_per_field(field, value, fault):
    assert fs.smi_field_fault(field, value) == fault


def test_a_gpu_in_an_error_state_is_a_broken_stack_never_ok():
    """Operator trial: nvidia-smi listed a healthy H100 and one whose fields read ``[Unknown Error]``,
    exit 0: facts said ``ok``, the GPU "compute capability unknown; not a target", and --plan built."""
    gpus, driver = fs.parse_nvidia_smi_csv(SMI_ERROR_STATE, fs.GPU_QUERY_FIELDS + fs.GPU_DETAIL_FIELDS)
    assert driver == "580.95.05" and "fault" not in gpus[0]
    assert gpus[1]["fault"] == {"compute_cap": "[Unknown Error]", "memory.total": "[Unknown Error]",
                                "mig.mode.current": "[Unknown Error]"}
    smi = {"gpus": gpus, "missing": False, "error": None, "rc": 0, "hung": False}
    stack = fs.gpu_stack(smi, None, None, ["/dev/nvidia0", "/dev/nvidia1"], [])
    assert stack["status"] == "broken"
    assert stack["reason"] == ("nvidia-smi: a GPU is in an error state: GPU 1 (NVIDIA H100 80GB HBM3, bus "
                               "00000000:3C:00.0): compute_cap [Unknown Error], memory.total [Unknown Error], "
                               "mig.mode.current [Unknown Error]")
    assert stack["fix"].startswith("reset the GPU (nvidia-smi -r -i 00000000:3C:00.0, with no process using it) or "
                                   "reboot the node; see dmesg for Xid errors (79: fallen off the bus")
    healthy = fs.parse_nvidia_smi_csv(SMI_DETAIL, SMI_DETAIL_FIELDS)[0]  # an L40S without MIG: [N/A]
    assert fs.gpu_stack({"gpus": healthy}, None, None, [], [])["status"] == "ok"


def test_cause_line_is_the_error_not_what_was_printed_before_it():
    """Operator trial: the first line a failed tool printed was quoted as its cause, though it was
    context (nvidia-smi's GPU line before NVML's error, Python's ``Traceback`` head)."""
    gpu = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"
    nvml = "Failed to initialize NVML: Driver/library version mismatch"
    assert fs.cause_line(gpu + "\n", nvml + "\n") == nvml
    assert fs.smi_failure(18, gpu, err=nvml)[0] == "nvidia-smi: exit 18: " + nvml
    assert fs.smi_failure(15, "0, NVIDIA H200, 9.0\nUnable to determine the device handle for GPU1: GPU is lost",
                          err="")[0].endswith("Unable to determine the device handle for GPU1: GPU is lost")
    tb = ("Traceback (most recent call last):\n  File \"<string>\", line 2, in <module>\n"
          "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n")
    assert fs.cause_line("", tb) == "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
    assert fs.cause_line("nvcc: NVIDIA (R) Cuda compiler driver\n",
                         "nvcc warning : ok\nnvcc fatal   : Unknown option '--version'\n") \
        == "nvcc fatal   : Unknown option '--version'"
    assert fs.cause_line("only stdout\n", "") == "only stdout" and fs.cause_line("", "") == ""


def test_python_probe_quotes_the_interpreters_exception(monkeypatch):
    """A login environment with a bad PYTHONIOENCODING: the real interpreter dies before the probe
    runs, printing ``Fatal Python error: ...`` and then the exception that is the cause."""
    monkeypatch.setenv("PYTHONIOENCODING", "no-such-codec")
    py = fs.probe_python(None)
    assert py["error"].startswith("probe exited 1: "), py["error"]
    assert "LookupError: unknown encoding: no-such-codec" in py["error"], py["error"]


def test_more_device_files_than_gpus_listed_is_a_warning():
    smi = {"gpus": [{"index": 0}], "missing": False, "error": None, "rc": 0, "hung": False}
    stack = fs.gpu_stack(smi, None, None, ["/proc/driver/nvidia/version", "/dev/nvidia0", "/dev/nvidia1",
                                           "/dev/nvidiactl", "/dev/nvidia-uvm"], [])
    assert stack["status"] == "ok"
    assert stack["warnings"] == ["2 GPU device files (/dev/nvidia0, /dev/nvidia1) but 1 GPU(s) listed: a GPU may be "
                                 "missing; see dmesg for Xid"]


def test_a_bounded_probe_past_its_deadline_leaves_no_child_behind(tmp_path):
    """A wrapper (a site's nvidia-smi script, a fake one) past the GPU probe's bound goes with its
    whole session: no ``sleep`` of it is left running on the host (found by a new user's trial)."""
    import os
    import time

    pidfile = tmp_path / "child.pid"
    res = fs.run_bounded(["sh", "-c", f'sleep 300 & echo $! > {pidfile}; wait'], 0.5)
    assert res["timed_out"] and not res["stuck"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        try:  # gone, or a zombie waiting for init to reap it
            if open(f"/proc/{child}/stat").read().rpartition(")")[2].split()[0] == "Z":
                break
        except OSError:
            break
        time.sleep(0.05)
    alive = os.path.exists(f"/proc/{child}") and open(f"/proc/{child}/stat").read().rpartition(")")[2].split()[0] != "Z"
    assert not alive, "the probe's child is still running"
