"""The API's ``copy``/``fetch`` and ``ssh_options``: the same paths as ``fleetctl copy``/``fetch``/``-o``,
against real sshd hosts (one without ``Subsystem sftp``, so the exec fallback carries the bytes)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from fleetctl import Fleet, InputError
from tests.support.fleet import fleetctl as cli, write_inventory

pytestmark = pytest.mark.sshd


@pytest.fixture
def home(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("FLEETCTL_HOME", str(state))
    return state


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_copy_sync_and_fetch_async_move_every_byte_over_sftp_and_its_fallback(sshd_farm, tmp_path, home):
    hosts = {"withsftp": sshd_farm.start("withsftp").inventory_vars(sshd_farm.known_hosts),
             "nosftp": sshd_farm.start("nosftp", sftp=False).inventory_vars(sshd_farm.known_hosts)}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    src = tmp_path / "payload"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(300_000))
    (src / "sub" / "b.txt").write_bytes(b"line one\nline two\n")
    remote = tmp_path / "remote-{host}"  # each sshd host here is this machine: one folder per host
    fleet = Fleet.from_inventory(inv, connect_timeout=20)

    copied = {}
    for name in hosts:
        res = fleet.select(name).copy(src, str(remote).replace("{host}", name) + "/")
        assert res.ok and res.kind == "copy" and res[name].bytes == 300_000 + 18 and len(res[name].files) == 2
        copied[name] = res
    for name in hosts:
        assert _tree(Path(str(remote).replace("{host}", name)) / "payload") == _tree(src)

    async def fetch_all():
        return await fleet.aselect("fleet").fetch(str(tmp_path / "remote-withsftp" / "payload" / "sub" / "b.txt"),
                                                  str(tmp_path / "out" / "{host}") + "/")

    fetched = asyncio.run(fetch_all())
    assert fetched.kind == "fetch" and fetched.ok, fetched
    got = tmp_path / "out" / "nosftp" / "b.txt"
    assert got.read_bytes() == b"line one\nline two\n" and [f["dest"] for f in fetched["nosftp"].files] == [str(got)]

    # the records are the CLI's: `fleetctl runs --json` lists them with their kinds
    listed = json.loads(cli("runs", "--json", home=home).stdout)
    kinds = {r["run_id"]: r.get("kind") for r in listed}
    assert kinds[fetched.run_id] == "fetch" and all(kinds[r.run_id] == "copy" for r in copied.values())

    # a missing SRC is the CLI's bad input, before any host is touched
    with pytest.raises(InputError) as err:
        fleet.select("fleet").copy(tmp_path / "nope", "/tmp/x/")
    line = cli("-i", str(inv), "copy", "--hosts", "fleet", str(tmp_path / "nope"), "/tmp/x/", home=home)
    assert line.returncode == 2 and f"fleetctl: error: {err.value}" in line.stderr


def test_ssh_options_are_checked_as_dash_o_and_change_where_the_api_connects(sshd_farm, tmp_path, home):
    h = sshd_farm.start("oo")
    hvars = h.inventory_vars(sshd_farm.known_hosts)
    port = hvars["ansible_port"]
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"oo": {**hvars, "ansible_port": 1}}})  # a dead port
    with pytest.raises(InputError) as err:
        Fleet.from_inventory(inv, ssh_options=["Ciphers=aes128-ctr"])
    line = cli("-i", str(inv), "-o", "Ciphers=aes128-ctr", "run", "--hosts", "fleet", "--", "true", home=home)
    assert line.returncode == 2 and f"fleetctl: error: {err.value}" in line.stderr
    dead = Fleet.from_inventory(inv, connect_timeout=10).select("fleet").run(["true"])
    assert dead.unreachable == ["oo"]
    res = Fleet.from_inventory(inv, connect_timeout=20, ssh_options=[f"Port={port}"]).select("fleet").run(
        ["sh", "-c", "echo reached"])
    assert res.ok and res["oo"].stdout == "reached\n"


def test_a_callback_and_the_record_get_run_started_first_for_run_facts_copy_and_fetch(sshd_farm, tmp_path, home):
    """Every run kind begins with ``run.started`` (api.observe lists it; a deploy always had it): an
    operator's callback on ``run``/``copy``/``facts`` got ``host.started`` first, and those runs'
    events.jsonl lacked it."""
    inv = write_inventory(tmp_path / "inv.yaml",
                          {"fleet": {"ev": sshd_farm.start("ev").inventory_vars(sshd_farm.known_hosts)}})
    sel = Fleet.from_inventory(inv, connect_timeout=20).select("fleet")
    src = tmp_path / "one.txt"
    src.write_text("one\n")
    calls = {"run": lambda obs: sel.run(["true"], observers=obs),
             "facts": lambda obs: sel.facts(observers=obs),
             "copy": lambda obs: sel.copy(src, str(tmp_path / "copied") + "/", observers=obs),
             "fetch": lambda obs: sel.fetch(str(src), str(tmp_path / "fetched") + "/", observers=obs)}
    for kind, call in calls.items():
        seen: list = []
        res = call(seen.append)
        names = [e.name for e in seen if e.name != "output.line"]
        assert names[0] == "run.started" and names.count("run.started") == 1 and names[-1] == "run.finished", \
            (kind, names)
        assert seen[0].data == {"kind": kind, "mode": "apply", "hosts": 1, "tasks": [], "batches": []}, kind
        lines = [json.loads(ln) for ln in (res.record_dir / "events.jsonl").read_text().splitlines()]
        assert [ln["event"] for ln in lines][0] == "run.started" and lines[0]["kind"] == kind, (kind, lines[:2])
