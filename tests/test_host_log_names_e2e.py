"""Two hosts never share a file made from their names (operator trial: inventory hosts ``a@b`` and
``a_b``, both local, ran into one ``logs/a_b.log``; ``fleetctl logs RUN a@b`` printed both hosts'
lines and ``a@b: ok``): :func:`fleetctl.util.paths.safe_name` is one-to-one, and a real run's
record, ``fleetctl logs`` and the report find each host's own log."""

from __future__ import annotations

import re
from pathlib import Path

from fleetctl.util.paths import host_folder, host_of, safe_name
from tests.support.fleet import fleetctl, last_run, write_inventory

#: Names that read alike once their odd characters are dropped, and names on the edges of the rule.
ALIKE = ["a@b", "a_b", "x/y", "x_y", "a%40b", "a%2540b", "a b", "a\x00b", "", "%", ".", "..", "...",
         "%2E", "_", "__", "a/../../b", "a_.._.._b", "n:1", "n_1", "gpu01", "node[01]", "é-1", "a\udcffb"]


def test_no_two_host_names_share_a_file_or_folder_name_and_safe_names_keep_theirs() -> None:
    for rule in (safe_name, host_folder):
        made = [rule(n) for n in ALIKE]
        assert len(set(made)) == len(ALIKE), [(n, m) for n, m in zip(ALIKE, made) if made.count(m) > 1]
        for name, part in zip(ALIKE, made):
            assert part and "/" not in part and "\x00" not in part and part not in (".", ".."), (name, part)
    for kept in ("a_b", "x_y", "gpu01", "node[01]", "n-1.ib", "...", "é-1", "_", "__"):
        assert safe_name(kept) == kept and host_folder(kept) == kept  # earlier runs' files stay theirs
    assert [safe_name(n) for n in ("a@b", "x/y", "..", "", "a%40b")] == ["a%40b", "x%2Fy", "%2E%2E", "%", "a%2540b"]
    assert (host_folder("node:7"), host_folder("x/y"), host_folder("50%")) == ("node:7", "x%2Fy", "50%25")
    assert [host_of(safe_name(n)) for n in ALIKE] == ALIKE  # a log file names its host (a live run's new host)
    assert [host_of(p) for p in ("a_b", "50%zz", "%2f", "%C3")] == ["a_b", "50%zz", "%2f", "%C3"]  # no host's


def test_a_run_gives_each_host_its_own_log_and_logs_shows_that_one(tmp_path: Path) -> None:
    hosts = ["a@b", "a_b", "x/y", "x_y"]
    inv = write_inventory(tmp_path / "coll.yaml", {"g": {h: {"ansible_connection": "local"} for h in hosts}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "all", "--", "sh", "-c", "echo I am $$", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    said = dict(re.findall(r"^(\S+) \| (I am \d+)$", res.stdout, re.M))  # live lines: not read from the record
    assert sorted(said) == sorted(hosts) and len(set(said.values())) == 4, res.stdout
    run = last_run(tmp_path)
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["a%40b.log", "a_b.log", "x%2Fy.log", "x_y.log"]
    for host in hosts:
        assert (run / "logs" / f"{safe_name(host)}.log").read_text() == f"out| {said[host]}\n==> host OK: rc=0\n"
        one = fleetctl("logs", run.name, host, home=tmp_path)
        assert one.returncode == 0, one.stderr
        assert one.stdout == f"out| {said[host]}\n==> host OK: rc=0\n", (host, one.stdout)
        assert one.stderr == f"run {run.name}: {host}: ok\n"
    every = fleetctl("logs", run.name, home=tmp_path)
    assert sorted(line for line in every.stdout.splitlines() if " I am " in line) == sorted(
        f"{h}: {said[h]}" for h in hosts), every.stdout

    from fleetctl.reporting.report_model import load_report

    rows = {row.name: row for row in load_report(run).hosts}
    for host in hosts:
        log = run / rows[host].log_rel
        assert said[host] in log.read_text() and rows[host].log_size_bytes == log.stat().st_size, host
