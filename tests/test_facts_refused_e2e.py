"""A host whose facts show a problem a deploy refuses it for is never "ok": ``fleetctl facts
--json`` gives ``"status": "failed"`` with ``error`` naming the cause and exits 1, the API's
``HostFacts`` reads ``failed`` with the lines in ``warnings``, and the fleet's ``on_warning`` gets
them (fresh operator trial: a venv that was not there read ``status ok``, ``r.ok True``, exit 0).
Benign warnings (a builder-only problem) leave the host ok. Real sshd test hosts, real venvs.
"""

from __future__ import annotations

import json

import pytest

from fleetctl.api import Fleet
from fleetctl.facts.refusals import builder_warning, refusal_error, refused_by_deploy, warning
from fleetctl.facts.workdir import workdir_warning
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, write_inventory
from tests.support.hostvenv import make_venv

NOT_THERE = "the host var venv names an environment that is not there"


def test_the_lines_a_deploy_refuses_on_fail_the_host_and_builder_only_ones_do_not():
    refused = warning("venv /x: no interpreter: the host var venv names an environment that is not there")
    builder = builder_warning("pip 20.3.4 in the venv /x is too old to build")
    wd = workdir_warning({"workdir": "/w", "workdir_fs": {"path": "/w", "readonly": True}})
    assert refused_by_deploy(refused) and refused_by_deploy(wd) and not refused_by_deploy(builder)
    assert not refused_by_deploy("warning: Slurm GRES gpu:h200:1 for node n1 gives it 1 GPU, but facts found none")
    assert refusal_error([builder]) is None and refusal_error([]) is None
    assert refusal_error([builder, refused, wd]) == refused[len("warning: "):] + " (and 1 more: see warnings)"


@pytest.fixture
def broken_fleet(sshd_farm, tmp_path, monkeypatch):
    """Two inventory hosts on one real sshd: ``novenv1`` whose venv var names a folder that is not
    there, ``notorch`` with a ``python3 -m venv`` venv without torch."""
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    h = sshd_farm.start("refused")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    notorch = make_venv(tmp_path / "notorch", "venv", torch=False, build_tools=True)
    conn = h.inventory_vars(sshd_farm.known_hosts)
    return write_inventory(tmp_path / "inv.yaml", {"g": {
        "novenv1": {**conn, "workdir": str(tmp_path / "w1"), "venv": str(tmp_path / "gone")},
        "notorch": {**conn, "workdir": str(tmp_path / "w2"), "venv": notorch}}})


@pytest.mark.sshd
def test_facts_json_of_a_missing_venv_and_a_missing_torch_fail_the_hosts_and_exit_1(broken_fleet, tmp_path):
    res = fleetctl("-i", str(broken_fleet), "facts", "--hosts", "g", "--json", home=tmp_path / "state")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    novenv, notorch = doc["novenv1"], doc["notorch"]
    assert novenv["status"] == "failed" and novenv["reachable"] is True and novenv["gpus"], novenv
    assert NOT_THERE in novenv["error"], novenv["error"]
    assert any(NOT_THERE in w for w in novenv["warnings"]), novenv["warnings"]
    assert notorch["status"] == "failed" and "torch does not import" in notorch["error"], notorch
    # the text output says the same: not ok, the cause below
    text = fleetctl("-i", str(broken_fleet), "facts", "--hosts", "g", home=tmp_path / "state",
                    env={"COLUMNS": "250"})
    assert text.returncode == 1 and "novenv1: FAILED" in text.stdout and "novenv1: ok" not in text.stdout, text.stdout
    flat = " ".join(text.stdout.replace("│", " ").split())
    assert NOT_THERE in flat, text.stdout
    # each cause once: the FAILED line gives it, the notes after it do not repeat it as a warning
    assert flat.count("torch does not import") == 1 and flat.count(NOT_THERE) == 1, text.stdout


@pytest.mark.sshd
def test_the_api_reads_such_hosts_failed_with_their_warnings_and_calls_on_warning(broken_fleet):
    told: list[str] = []
    res = Fleet.from_inventory(broken_fleet, on_warning=told.append).select("g").facts()
    assert not res.ok
    for name, cause in (("novenv1", NOT_THERE), ("notorch", "torch does not import")):
        r = res[name]
        assert not r.ok and r.status == "failed" and cause in (r.error or ""), (name, r.status, r.error)
        hf = res.facts[name]
        assert hf.status == "failed" and cause in (hf.error or "") and any(cause in w for w in hf.warnings), hf
        assert any(line.startswith(f"{name}: warning: ") and cause in line for line in told), told


@pytest.mark.sshd
def test_verify_of_a_missing_venv_names_the_cause_in_facts_words_not_envs_raw_line(broken_fleet, tmp_path):
    res = fleetctl("-i", str(broken_fleet), "verify", "--hosts", "novenv1", home=tmp_path / "state",
                   env={"COLUMNS": "250"})
    said = " ".join((res.stdout + res.stderr).replace("│", " ").split())
    assert res.returncode == 1 and NOT_THERE in said, res.stdout + res.stderr
    assert "/usr/bin/env:" not in said and "bin/python3': No such file" not in said, res.stdout + res.stderr
