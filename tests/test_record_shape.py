"""A ``run.json`` edited by hand or by another tool into another shape (operator trial 10: ``"hosts"``
a list) is one line naming the file in every command that reads records, never a traceback:
``runs`` lists it as unreadable (and goes on with the others), ``runs show`` and ``report``
refuse it (exit 2), ``logs`` of the run and of a host do not crash on it. The real CLI, on a real
state folder."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet import fleetctl

GOOD = "20261201T000000.000Z-a00001"
BAD = "20261202T000000.000Z-b00002"

SHAPES = {
    "hosts-a-list": {"run_id": BAD, "status": "ok", "hosts": ["a", "b"]},
    "host-a-string": {"run_id": BAD, "status": "ok", "hosts": {"a": "ok"}},
    "not-an-object": ["a", "b"],
    "cut-short": '{"run_id": "2026',  # written as it is: not JSON (a fresh trial: the line named no file)
}
WHY = {"hosts-a-list": "'hosts' is a list, not an object of host -> outcome",
       "host-a-string": "host 'a' is a str, not an object",
       "not-an-object": "not a JSON object but list",
       "cut-short": "not JSON: Unterminated string starting at: line 1 column 12 (char 11)"}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_run_json_of_another_shape_is_one_line_never_a_traceback(tmp_path, shape):
    good = tmp_path / "runs" / GOOD
    (good / "logs").mkdir(parents=True)
    (good / "run.json").write_text(json.dumps({"run_id": GOOD, "kind": "run", "status": "ok", "started": "x",
                                               "hosts": {"a": {"status": "ok"}}}))
    (good / "logs" / "a.log").write_text("out| hello\n")
    bad = tmp_path / "runs" / BAD
    (bad / "logs").mkdir(parents=True)
    text = SHAPES[shape]
    (bad / "run.json").write_text(text if isinstance(text, str) else json.dumps(text))
    (bad / "logs" / "a.log").write_text("out| from the bad run\n")
    path = bad / "run.json"

    listed = fleetctl("runs", home=tmp_path, timeout_s=60)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    lines = listed.stdout.splitlines()
    assert f"{BAD}  unreadable: {path}: {WHY[shape]}" in lines, lines
    assert any(ln.startswith(GOOD) and "1 hosts" in ln for ln in lines), lines  # the others still listed
    as_json = json.loads(fleetctl("runs", "--json", home=tmp_path, timeout_s=60).stdout)
    assert {"run_id": BAD, "error": f"{path}: {WHY[shape]}"} in as_json, as_json

    for argv in (("runs", "show", BAD), ("report", BAD)):
        res = fleetctl(*argv, home=tmp_path, timeout_s=60)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (argv, res.stderr)
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith("fleetctl: error: ") and line.endswith(f"{path}: {WHY[shape]}"), (argv, line)

    for argv in (("logs", BAD), ("logs", BAD, "a")):
        res = fleetctl(*argv, home=tmp_path, timeout_s=60)
        assert "Traceback" not in res.stderr, (argv, res.stderr)
        assert "from the bad run" in res.stdout, (argv, res.stdout, res.stderr)  # the log itself is kept and shown
