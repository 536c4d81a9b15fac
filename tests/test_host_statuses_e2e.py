"""One set of host statuses (fresh operator's trial): the same deploy (``--serial 1
--max-fail-percentage 0``, the first batch failing) gives each host the same word in the CLI's
``--json``, run.json and the Python API's ``HostResult.status`` (the API said ``failed`` for
hosts the CLI and the record call ``not started``), and that word is one the schema lists.
``local`` hosts, each its own workdir."""

from __future__ import annotations

import json

from fleetctl.api import Fleet
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory

PLAY = ("name: q\nhosts: all\ngather_facts: false\ntasks:\n"
        "  - name: t\n    command: {argv: [sh, -c, '{{ script }}']}\n")


def test_a_stopped_rolling_deploy_gives_each_host_one_status_in_the_cli_the_api_and_the_record(
        tmp_path, monkeypatch):
    scripts = {"g01": "exit 3", "g02": "true", "g03": "true"}
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": {
        h: {"ansible_connection": "local", "workdir": str(tmp_path / f"w-{h}"), "script": s}
        for h, s in scripts.items()}})
    play = tmp_path / "p.yaml"
    play.write_text(PLAY)
    cli = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu", "--playbook", str(play), "--serial", "1",
                   "--max-fail-percentage", "0", "--json", home=tmp_path / "cli", timeout_s=120)
    assert cli.returncode == 1, cli.stderr[-2000:]
    from_cli = {h: o["status"] for h, o in json.loads(cli.stdout)["hosts"].items()}
    record = json.loads((last_run(tmp_path / "cli") / "run.json").read_text())
    assert {h: o["status"] for h, o in record["hosts"].items()} == from_cli

    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "api"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)
    res = Fleet.from_inventory(str(inv)).select("gpu").deploy(str(play), serial=1, max_fail_percentage=0)
    from_api = {h: r.status for h, r in res.items()}
    assert from_api == from_cli == {"g01": "failed", "g02": "not started", "g03": "not started"}
    assert (res.failed, res.not_started, res.summary()) == (["g01"], ["g02", "g03"],
                                                            "ok 0, failed 1, unreachable 0, not started 2")
    schema = json.loads((REPO / "docs" / "schema" / "run.schema.json").read_text())
    words = set(schema["$defs"]["HostOutcome"]["properties"]["status"]["enum"])
    assert set(from_api.values()) <= words
    contracts = (REPO / "docs" / "contracts.md").read_text()
    assert all(f"`{w}`" in contracts.partition("## Inventory")[0] for w in words), words  # the --json paragraph
