"""An API deploy and a CLI deploy of the same play on the same sshd host write the same run record
(both valid against docs/schema/*.json; equal but for ids, times, pids and the command line), and
the API's plan / dry run / deploy agree as the CLI's do (tests/test_agreement_e2e.py)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import jsonschema
import pytest

from fleetctl import Fleet
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY, actions
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

#: Keys whose values are times, ids or this process's: left out of the comparison (so is every
#: ``*_s`` key: a duration in seconds).
VOLATILE = {"run_id", "started", "finished", "start", "controller_pid", "controller_start", "command", "timestamp"}


def normalized(value, run_id: str):
    """``value`` without :data:`VOLATILE` keys, the run id in strings replaced by ``RUN``, and the
    facts reduced to their keys (free memory and disk change between two runs)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in VOLATILE or k.endswith("_s"):
                continue
            out[k] = sorted(v) if k == "facts" and isinstance(v, dict) else normalized(v, run_id)
        return out
    if isinstance(value, list):
        return [normalized(v, run_id) for v in value]
    if isinstance(value, str):
        return value.replace(run_id, "RUN")
    return value


def differences(a, b, path: str = "") -> list[str]:
    """The paths where ``a`` and ``b`` differ, with both values (for the assertion message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in dict.fromkeys([*a, *b]) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.200} != {b!r:.200}"]


def _validate(record: Path) -> tuple[dict, list[dict]]:
    run = json.loads((record / "run.json").read_text())
    events = [json.loads(ln) for ln in (record / "events.jsonl").read_text().splitlines()]
    jsonschema.validate(run, json.loads((REPO / "docs/schema/run.schema.json").read_text()))
    schema = json.loads((REPO / "docs/schema/events.schema.json").read_text())
    for ev in events:
        jsonschema.validate(ev, schema)
    return run, events


def test_an_api_deploy_and_a_cli_deploy_write_the_same_record(sshd_farm, tmp_path, monkeypatch):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    h = sshd_farm.start("node")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    host = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
            "venv": make_host_venv(tmp_path / "venv")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"node": host}})
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path))           # the CLI helper's state and cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)

    # both deploys start from the same state: the host's workdir and venv, and the controller's cache
    state = [tmp_path / "work", Path(host["venv"]), tmp_path / "cache"]
    for p in state:
        p.mkdir(parents=True, exist_ok=True)
        shutil.copytree(p, f"{p}.before", symlinks=True)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--force", "--json",
                   home=tmp_path, timeout_s=900)
    assert res.returncode == 0, res.stdout + res.stderr
    cli_record = last_run(tmp_path)

    for p in state:
        shutil.rmtree(p)
        shutil.copytree(f"{p}.before", p, symlinks=True)
    api = Fleet.from_inventory(inv).select("fleet").deploy(play, force=True)
    assert api.ok and api.record_dir.parent == cli_record.parent and api.run_id != cli_record.name
    assert [t.status for t in api["node"].tasks if t.action != "facts"] == ["changed", "changed", "changed"]

    cli_run, cli_events = _validate(cli_record)
    api_run, api_events = _validate(api.record_dir)
    assert api_run == json.loads(json.dumps(api.model.as_json()))  # the result is the record
    a, b = normalized(cli_run, cli_run["run_id"]), normalized(api_run, api_run["run_id"])
    diff = differences(a, b)
    assert not diff, "\n".join(diff)
    assert [e["event"] for e in cli_events] == [e["event"] for e in api_events]

    # the API's plan, dry run and deploy agree on the host's action (all: skip, it is up to date)
    nodes = Fleet.from_inventory(inv).select("fleet")
    plan, dry, real = (nodes.deploy(play, mode=m) for m in ("plan", "dry_run", "apply"))
    assert actions(dry.model.as_json()["hosts"]) == actions(real.model.as_json()["hosts"]) == {"node": "skip"}
    assert plan.plan["node"]["builds"][0]["action"] == "skip" and plan.ok and dry.ok and real.ok
