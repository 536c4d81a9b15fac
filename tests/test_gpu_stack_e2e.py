"""GPU hosts as they are really found, over real sshd test hosts (issue 23): a broken NVIDIA stack
fails the host at facts (never a GPU-less host built for fallback_archs), a hanging nvidia-smi is
bounded and named and never started twice, every GPU of a mixed host is listed and built for.

The GPUs are fake ``nvidia-smi`` programs (tests/support/fake_gpu.py) failing as the real one does:
exit 18 and NVML's message on a driver/library version mismatch; a process frozen in a cgroup v1
freezer (state D, SIGKILL pending) for a GPU off the bus.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from fleetctl.reporting.plan_table import plan_rows
from tests.support.fake_gpu import (
    H100,
    H200,
    RTX_PRO_6000,
    FrozenCgroup,
    fake_bus_id,
    fake_uuid,
    GPU_LINE_FIRST,
    loaded_module_wrap,
    write_fake_nvidia_smi,
    write_gpu_line_then_mismatch_nvidia_smi,
    write_hanging_nvidia_smi,
    write_mismatched_nvidia_smi,
    write_unrunnable_nvidia_smi,
)
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY  # the toy play: upload, build, install
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd


def _host(farm, name, tmp_path, wrap=None, **extra):
    h = farm.start(name, wrap=wrap)
    return h, {**h.inventory_vars(farm.known_hosts), "workdir": str(tmp_path / "work" / name), **extra}


#: Operator trial: GPU 1 after an Xid 79 / uncorrectable ECC error, GPU 2 needing a reset; nvidia-smi
#: prints their rows with these markers in the fields' places and exits 0 (GPU 0 is healthy).
ERROR_STATE = {1: {"compute_cap": "[Unknown Error]", "memory.total": "[Unknown Error]",
                   "mig.mode.current": "[Unknown Error]", "pci.bus_id": "00000000:3C:00.0"},
               2: {"compute_cap": "[GPU requires reset]", "memory.total": "[GPU requires reset]",
                   "mig.mode.current": "[GPU requires reset]", "pci.bus_id": "00000000:4D:00.0"}}
ERROR_STATE_REASON = ("nvidia-smi: 2 GPUs are in an error state: GPU 1 (NVIDIA H100 80GB HBM3, bus 00000000:3C:00.0): "
                      "compute_cap [Unknown Error], memory.total [Unknown Error], mig.mode.current [Unknown Error]; "
                      "GPU 2 (NVIDIA H100 80GB HBM3, bus 00000000:4D:00.0): compute_cap [GPU requires reset], "
                      "memory.total [GPU requires reset], mig.mode.current [GPU requires reset]")
ERROR_STATE_FIX = ("reset the GPU (nvidia-smi -r -i 00000000:3C:00.0; nvidia-smi -r -i 00000000:4D:00.0, with no "
                   "process using it) or reboot the node; see dmesg for Xid errors")


def _error_state_host(farm, tmp_path, **extra):
    h, hv = _host(farm, "errgpu", tmp_path, **extra)
    write_fake_nvidia_smi(h.bin_dir, [H100, H100, H100], driver="580.95.05", values=ERROR_STATE)
    return h, hv


def test_mismatched_driver_fails_at_facts_others_succeed(sshd_farm, tmp_path):
    # the mismatch host's loaded module (its /proc/driver/nvidia/version, in its own mount namespace)
    # is 575.57.08, its NVML library 580.95 (operator trial: the module's version was named nowhere)
    bad, bad_vars = _host(sshd_farm, "mismatch", tmp_path, wrap=loaded_module_wrap(tmp_path / "proc-driver", "575.57.08"))
    good, good_vars = _host(sshd_farm, "mixed", tmp_path)
    nodrv, nodrv_vars = _host(sshd_farm, "buildhost", tmp_path)  # no nvidia-smi, no /dev/nvidia*: no driver
    err, err_vars = _error_state_host(sshd_farm, tmp_path)
    write_mismatched_nvidia_smi(bad.bin_dir)
    write_fake_nvidia_smi(good.bin_dir, [H200, RTX_PRO_6000])
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"mismatch": bad_vars, "mixed": good_vars,
                                                            "buildhost": nodrv_vars, "errgpu": err_vars}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", "--json", home=tmp_path, timeout_s=300)
    human = fleetctl("-i", str(inv), "facts", "--hosts", "mismatch,errgpu", home=tmp_path, timeout_s=300)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    text = json.dumps(doc["mismatch"])
    assert "Driver/library version mismatch" in text and "exit 18" in text
    assert "reboot the host, or reload the nvidia kernel modules" in text
    assert "fallback_archs" not in text or "only for hosts without an NVIDIA driver" not in text
    assert doc["mismatch"]["gpu_stack"]["status"] == "broken"
    assert doc["mismatch"]["gpu_stack"]["reason"] == ("nvidia-smi: exit 18: Failed to initialize NVML: Driver/library "
                                                      "version mismatch (loaded kernel module 575.57.08, NVML library "
                                                      "580.95)")
    assert doc["mismatch"]["driver_version"] == doc["mismatch"]["driver_module_version"] == "575.57.08"
    assert doc["mixed"]["driver_module_version"] is None  # no /proc/driver/nvidia there
    assert human.returncode == 1
    assert "mismatch: FAILED: GPU stack broken: nvidia-smi: exit 18: Failed to initialize NVML: Driver/library version " \
           "mismatch (loaded kernel module 575.57.08, NVML library 580.95); fix: the driver was updated" \
           in human.stdout + human.stderr, human.stdout + human.stderr
    # GPUs in an error state (listed, exit 0) are a broken stack too, named with their markers
    errgpu = doc["errgpu"]
    assert errgpu["status"] == "failed" and errgpu["gpu_stack"]["status"] == "broken"
    assert errgpu["gpu_stack"]["reason"] == ERROR_STATE_REASON
    assert errgpu["gpu_stack"]["fix"].startswith(ERROR_STATE_FIX)
    assert [g.get("fault") for g in errgpu["gpus"]] == [None, *[{f: v for f, v in ERROR_STATE[i].items()
                                                                 if f != "pci.bus_id"} for i in (1, 2)]]
    assert "build" not in errgpu
    assert f"errgpu: FAILED: GPU stack broken: {ERROR_STATE_REASON}; fix: {ERROR_STATE_FIX}" \
        in human.stdout + human.stderr, human.stdout + human.stderr
    assert "not a target" not in human.stdout + human.stderr
    # every GPU counts: each listed with uuid and bus id, the build is for the union
    mixed = doc["mixed"]
    assert [(g["index"], g["compute_cap"], g["uuid"], g["pci_bus_id"]) for g in mixed["gpus"]] == [
        (0, "9.0", fake_uuid(0), fake_bus_id(0)), (1, "12.0", fake_uuid(1), fake_bus_id(1))]
    assert mixed["gpu_stack"]["status"] == "ok"
    assert mixed["build"]["torch_cuda_arch_list"] == "9.0a;12.0a" and mixed["build"]["mixed_sm"] is True
    # a host without any NVIDIA driver is the one case for fallback_archs
    assert doc["buildhost"]["gpu_stack"]["status"] == "none"
    assert doc["buildhost"]["build"]["source"] == "fallback"


def test_nvml_error_is_the_cause_when_a_gpu_line_comes_first(sshd_farm, tmp_path):
    """Operator trial: an nvidia-smi that printed ``GPU 0: ...`` on stdout before NVML's ``Failed to
    initialize NVML: Driver/library version mismatch`` on stderr (exit 18) failed the host quoting
    the GPU line; the NVML line was nowhere. The cause quoted is the error line, in every field."""
    host, host_vars = _host(sshd_farm, "nvml18", tmp_path)
    write_gpu_line_then_mismatch_nvidia_smi(host.bin_dir)
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"nvml18": host_vars}})
    nvml = "Failed to initialize NVML: Driver/library version mismatch"
    res = fleetctl("-i", str(inv), "facts", "--hosts", "nvml18", "--json", home=tmp_path, timeout_s=300)
    assert res.returncode == 1, res.stderr
    facts = json.loads(res.stdout)["nvml18"]
    assert facts["gpu_probe_errors"][0] == f"nvidia-smi: exit 18: {nvml}", facts["gpu_probe_errors"]
    assert nvml in facts["gpu_error"] and nvml in facts["gpu_stack"]["reason"]
    assert GPU_LINE_FIRST not in facts["gpu_stack"]["reason"]
    human = fleetctl("-i", str(inv), "facts", "--hosts", "nvml18", home=tmp_path, timeout_s=300)
    assert human.returncode == 1
    assert f"nvml18: FAILED: GPU stack broken: nvidia-smi: exit 18: {nvml}; fix: the driver was updated" \
        in human.stdout + human.stderr, human.stdout + human.stderr


def test_an_nvidia_smi_that_may_not_be_executed_is_named_as_found_not_missing(sshd_farm, tmp_path):
    """New-user trial: an nvidia-smi on the host's PATH without its x bit (or whose exec is denied)
    was reported as "not found" and the host taken for a build host. Facts say what is true: found
    at PATH but not executable (permission denied), and the host fails at facts with the chmod."""
    hosts = {}
    for name, how in (("nox", "mode"), ("noexec", "exec")):
        h, hvars = _host(sshd_farm, name, tmp_path)
        hosts[name] = (write_unrunnable_nvidia_smi(h.bin_dir, how), hvars)
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {n: v for n, (_, v) in hosts.items()}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", "--json", home=tmp_path, timeout_s=300)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    for name, detail in (("nox", ": mode 0644"), ("noexec", "")):
        smi = hosts[name][0]
        found = f"nvidia-smi: found at {smi} but not executable (permission denied{detail})"
        assert doc[name]["status"] == "failed" and doc[name]["gpu_stack"]["status"] == "broken"
        assert doc[name]["gpu_probe_errors"][0] == found
        assert f"GPU stack broken: {found}; fix: make {smi} executable" in doc[name]["error"], doc[name]["error"]
        assert "not found" not in doc[name]["error"]


def test_plan_dry_run_and_deploy_agree_on_a_broken_stack(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    bad, bad_vars = _host(sshd_farm, "mismatch", tmp_path, venv=make_host_venv(tmp_path / "venv-bad"))
    good, good_vars = _host(sshd_farm, "good", tmp_path, venv=make_host_venv(tmp_path / "venv-good"))
    _, err_vars = _error_state_host(sshd_farm, tmp_path, venv=make_host_venv(tmp_path / "venv-err"))
    write_mismatched_nvidia_smi(bad.bin_dir)
    write_fake_nvidia_smi(good.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"mismatch": bad_vars, "good": good_vars,
                                                            "errgpu": err_vars}})

    def deploy(*extra):
        return fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=900)

    plan, dry, real = deploy("--plan", "--json"), deploy("--dry-run", "--json"), deploy("--json")
    assert plan.returncode == dry.returncode == real.returncode == 1, (plan.stderr, dry.stderr, real.stderr)
    plan_doc, dry_doc = json.loads(plan.stdout), json.loads(dry.stdout)["hosts"]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    for where in (plan_doc["mismatch"], dry_doc["mismatch"], record["mismatch"]):
        assert where["status"] == "failed"
        assert "GPU stack broken" in where["error"] and "Driver/library version mismatch" in where["error"]
        assert "reboot the host" in where["error"]
    for where in (plan_doc["errgpu"], dry_doc["errgpu"], record["errgpu"]):  # a GPU in an error state: the same
        assert where["status"] == "failed"
        assert where["error"] == f"GPU stack broken: {ERROR_STATE_REASON}; fix: {ERROR_STATE_FIX}" \
            " (79: fallen off the bus; 48, 94, 95: uncorrectable ECC)", where["error"]
    assert not (tmp_path / "work" / "errgpu" / "src").exists()
    assert plan_doc["good"]["status"] == "ok" and dry_doc["good"]["status"] == "ok"
    assert record["good"]["status"] in ("ok", "changed")
    assert plan_rows(record)["good"]["builds"][0]["action"] == "build"
    assert not (tmp_path / "work" / "mismatch" / "src").exists()  # failed at facts: nothing uploaded
    # the broken host's facts are kept in the record, its cause with them
    assert record["mismatch"]["facts"]["gpu_stack"]["status"] == "broken"


def test_hanging_nvidia_smi_is_bounded_named_and_not_started_twice(sshd_farm, tmp_path):
    frozen = FrozenCgroup(f"fltest-gpu-{os.getpid()}")
    try:
        hang, hang_vars = _host(sshd_farm, "offbus", tmp_path, gpu_probe_timeout_s=2)
        good, good_vars = _host(sshd_farm, "good", tmp_path)
        starts = tmp_path / "nvidia-smi.starts"
        write_hanging_nvidia_smi(hang.bin_dir, frozen, starts)
        write_fake_nvidia_smi(good.bin_dir, [H200])
        inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"offbus": hang_vars, "good": good_vars}})
        # timeout_s=170: under the run's facts deadline (180 s), so the bound is the probe's own
        first = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", "--json", home=tmp_path, timeout_s=170)
        assert first.returncode == 1, first.stderr
        doc = json.loads(first.stdout)
        assert "nvidia-smi did not answer in 2 s: a GPU may have fallen off the bus; see dmesg for Xid" \
            in json.dumps(doc["offbus"])
        assert doc["good"]["gpu_stack"]["status"] == "ok"
        # the other facts came back while nvidia-smi hung (kept with the refused host)
        assert doc["offbus"]["reachable"] is True and doc["offbus"]["status"] == "failed"
        assert doc["offbus"]["python"]["version"] and doc["offbus"]["cpu_count"] >= 1
        assert doc["offbus"]["cuda"]["version"]
        stuck = frozen.pids()
        assert len(stuck) == 1 and starts.read_text().split() == [str(stuck[0])]
        # the killed one is still there (SIGKILL pending in the kernel): the next run names it, starts none
        second = fleetctl("-i", str(inv), "facts", "--hosts", "offbus", "--json", home=tmp_path, timeout_s=170)
        assert second.returncode == 1
        text = json.dumps(json.loads(second.stdout)["offbus"])
        assert f"an earlier nvidia-smi (pid {stuck[0]}) has been stuck in the kernel" in text
        assert "not starting another" in text
        assert starts.read_text().split() == [str(stuck[0])] and frozen.pids() == stuck
    finally:
        frozen.close()
    assert not Path(frozen.path).exists()


def test_facts_of_a_host_whose_venv_is_not_there_carries_a_warning(sshd_farm, tmp_path):
    """The host var venv names a folder that is not on the host (moved away, a typo): a deploy
    refuses the host, so its facts are failed (fresh operator trial: they read ok), with a warning
    line on screen and in the record naming the venv (new-user trial: 'python / torch: - / torch -'
    and nothing else)."""
    h, hv = _host(sshd_farm, "novenv", tmp_path, venv=str(tmp_path / "gone-venv"))
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"novenv": hv}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", home=tmp_path, timeout_s=300)
    assert res.returncode == 1, res.stdout + res.stderr  # a deploy refuses the host: failed, never ok
    want = f"venv {tmp_path / 'gone-venv'}: {tmp_path / 'gone-venv'}/bin/python3: no such interpreter"
    assert f"novenv: FAILED: {want}" in res.stdout + res.stderr, res.stdout + res.stderr
    record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["novenv"]
    assert record["status"] == "failed" and record["error"].startswith(want), record.get("error")
    assert [w for w in record["warnings"] if w.startswith(f"warning: {want}")], record.get("warnings")


def test_a_gpu_whose_inforom_is_corrupted_is_listed_and_warned_of_not_broken(sshd_farm, tmp_path):
    """nvidia-smi on a board whose infoROM is corrupted prints ``WARNING: infoROM is corrupted at
    gpu BUS`` before its rows and exits 14 (``nvidia-smi -h``, RETURN VALUE); the GPU answers and
    runs work (NVIDIA/DCGM#2: the diagnostics pass). Facts list every GPU and warn of that board by
    its bus id with NVIDIA's remedy; the host is not a broken stack (operator trial: it read
    "GPU stack broken ... a stub or wrapper on PATH?")."""
    h, hv = _host(sshd_farm, "inforom", tmp_path, verify_device="cpu")
    write_fake_nvidia_smi(h.bin_dir, [H100, H100], inforom_corrupt=(1,))
    hv["venv"] = make_host_venv(tmp_path / "venv")
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"inforom": hv}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", "--json", home=tmp_path, timeout_s=300)
    assert res.returncode == 0, res.stdout + res.stderr
    f = json.loads(res.stdout)["inforom"]
    assert f["status"] == "ok" and [g["pci_bus_id"] for g in f["gpus"]] == [fake_bus_id(0), fake_bus_id(1)], f
    assert f["gpu_stack"]["status"] == "ok", f["gpu_stack"]
    warned = [w for w in f["warnings"] if f"infoROM is corrupted at gpu {fake_bus_id(1)}" in w]
    assert warned and "nvidia-smi (exit 14)" in warned[0] and "NVIDIA support" in warned[0], f["warnings"]
    text = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", home=tmp_path, timeout_s=300)
    assert text.returncode == 0 and "inforom: WARNING (below)" in text.stdout, text.stdout + text.stderr
    assert f"inforom: warning: nvidia-smi (exit 14): infoROM is corrupted at gpu {fake_bus_id(1)}" in text.stdout
