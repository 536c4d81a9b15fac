"""``fleetctl facts`` and ``fleetctl run`` end to end: the real CLI against real sshd test hosts."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.support.fake_gpu import B200, H200, RTX_PRO_6000, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.sshd import free_port

pytestmark = pytest.mark.sshd


def test_facts_on_a_mixed_fleet_with_a_dead_host(sshd_farm, tmp_path):
    caps = {"n90": [H200], "n120": [RTX_PRO_6000], "n100": [B200]}
    hosts = {}
    for name, gpus in caps.items():
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, gpus)
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name)}
    hosts["dead"] = {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "known_hosts": str(sshd_farm.known_hosts)}
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": hosts})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "gpu-nodes", "--json", home=tmp_path)
    assert res.returncode == 1, res.stderr
    facts = json.loads(res.stdout)
    assert [g["compute_cap"] for g in facts["n90"]["gpus"]] == ["9.0"]
    assert facts["n90"]["build"]["torch_cuda_arch_list"] == "9.0a"
    assert facts["n120"]["build"]["torch_cuda_arch_list"] == "12.0a"
    assert facts["n100"]["build"]["torch_cuda_arch_list"] == "10.0a"
    assert facts["n100"]["build"]["cuda_architectures"] == "100a"
    assert facts["dead"]["reachable"] is False
    assert "connection refused" in facts["dead"]["error"]
    for name in caps:
        f = facts[name]
        for key in ("driver_version", "cuda", "python", "cmake", "cpu_count", "mem_total_mib", "disk_free_mib"):
            assert key in f, (name, key)
        assert f["cuda"]["home"] == "/usr/local/cuda"  # nvcc is not on PATH over SSH; found anyway
    run_json = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert run_json["hosts"]["dead"]["reachable"] is False


def test_two_gpus_of_different_sms_are_a_union_not_gpu0(sshd_farm, tmp_path):
    h = sshd_farm.start("mixed")
    write_fake_nvidia_smi(h.bin_dir, [H200, RTX_PRO_6000])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"mixed": h.inventory_vars(sshd_farm.known_hosts)}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "mixed", "--json", home=tmp_path)
    assert res.returncode == 0, res.stderr
    build = json.loads(res.stdout)["mixed"]["build"]
    assert build["torch_cuda_arch_list"] == "9.0a;12.0a"
    assert build["mixed_sm"] is True


def test_cuda_home_var_finds_nvcc_that_only_interactive_shells_have(sshd_farm, tmp_path):
    """nvcc put on PATH by ~/.bashrc only for interactive shells is invisible over SSH: cuda_home finds it."""
    h = sshd_farm.start("cudahome", shell="bash")
    cuda = h.root / "opt-cuda-13"  # readable by the test user, unlike pytest's tmp_path
    (cuda / "bin").mkdir(parents=True)
    nvcc = cuda / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexec /usr/local/cuda/bin/nvcc \"$@\"\n")
    nvcc.chmod(0o755)
    os.chmod(h.root, 0o755)
    home = os.path.expanduser(f"~{h.user}")
    bashrc = os.path.join(home, ".bashrc")
    with open(bashrc, "w") as fh:
        fh.write(f'case $- in *i*) export PATH="{cuda}/bin:$PATH";; esac\n')
    hv = {**h.inventory_vars(sshd_farm.known_hosts), "cuda_home": str(cuda), "workdir": f"{home}/fleetctl-work"}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"cudahome": hv}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "cudahome", "--json", "--", "sh", "-c", "command -v nvcc || true",
                   home=tmp_path)
    assert json.loads(res.stdout)["cudahome"]["stdout"].strip() != str(nvcc)
    res = fleetctl("-i", str(inv), "facts", "--hosts", "cudahome", "--json", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    cuda_facts = json.loads(res.stdout)["cudahome"]["cuda"]
    assert cuda_facts["home"] == str(cuda)
    assert cuda_facts["source"] == "cuda_home var"
    assert cuda_facts["version"] == "13.0"


HOSTILE = ["it's", 'say "hi"', "$(touch /tmp/pwned)", "`id`", "a\nb", "*", "--help", "-n", "", "tab\there",
           "semi;colon", "back\\slash", "é漢🚀", "$HOME", "!!"]


@pytest.mark.parametrize("shell", [None, "dash", "zsh"])
def test_run_round_trips_hostile_argv_exactly(sshd_farm, tmp_path, shell):
    h = sshd_farm.start(f"run-{shell or 'me'}", shell=shell)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": h.inventory_vars(sshd_farm.known_hosts)}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "h", "--json", "--", "/usr/bin/printf", "%s\\0", *HOSTILE,
                   home=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["h"]
    assert out["rc"] == 0
    assert out["stdout"].split("\0")[:-1] == HOSTILE
    assert not os.path.exists("/tmp/pwned")


def test_run_exit_codes_and_host_prefixed_lines(sshd_farm, tmp_path):
    a, b = sshd_farm.start("a"), sshd_farm.start("b")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"a": a.inventory_vars(sshd_farm.known_hosts),
                                                        "b": b.inventory_vars(sshd_farm.known_hosts)}})
    ok = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "sh", "-c", 'echo "hello from $FLEETCTL_TEST_HOST"',
                  home=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "a | hello from a" in ok.stdout and "b | hello from b" in ok.stdout
    assert (last_run(tmp_path) / "logs" / "a.log").read_bytes() == b"out| hello from a\n==> host OK: rc=0\n"
    bad = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "sh", "-c", 'test "$FLEETCTL_TEST_HOST" = a',
                   home=tmp_path)
    assert bad.returncode == 1
    assert "b: FAILED: rc=1" in bad.stderr
    assert json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["b"]["rc"] == 1


def test_run_json_gives_each_hosts_status_as_deploys_json_does(sshd_farm, tmp_path):
    """run --json had rc/stdout per host but no ``status`` (new-user trial), while deploy's, copy's
    and fetch's JSON have it: ok (rc 0), failed (rc != 0), unreachable (no sshd on its port)."""
    a, b = sshd_farm.start("ja"), sshd_farm.start("jb")
    dead = {**b.inventory_vars(sshd_farm.known_hosts), "ansible_port": free_port()}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"a": a.inventory_vars(sshd_farm.known_hosts),
                                                        "b": b.inventory_vars(sshd_farm.known_hosts), "c": dead}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "sh", "-c", 'test "$FLEETCTL_TEST_HOST" = ja',
                   home=tmp_path)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert {h: doc[h]["status"] for h in doc} == {"a": "ok", "b": "failed", "c": "unreachable"}, doc
    assert doc["a"]["rc"] == 0 and doc["b"]["rc"] == 1 and doc["c"]["unreachable"] is True
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert {h: record["hosts"][h]["status"] for h in doc} == {h: doc[h]["status"] for h in doc}


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n    a:\n      ansible_port: seventy\n")
    res = fleetctl("-i", str(inv), "facts", "--hosts", "a", home=tmp_path)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "inv.yaml:4" in res.stderr and "ansible_port" in res.stderr
    assert "Traceback" not in res.stderr
    good = tmp_path / "good.yaml"
    good.write_text("all:\n  children:\n    gpu-nodes:\n      hosts:\n        a:\n")
    res = fleetctl("-i", str(good), "facts", "--hosts", "gpu-nodez", home=tmp_path)
    assert res.returncode == 2 and "did you mean 'gpu-nodes'" in res.stderr
