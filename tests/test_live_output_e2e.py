"""``fleetctl run``'s live lines on stdout, into a file and a pipe (operator trial: ``run --hosts box
-- seq 1 3000 > out.txt`` kept 2,001 lines, ending ``... 999 line(s) of box not shown here (the
display fell behind; ...)``; 2 hosts x 200,000 lines kept 2,111. The valve printed at most 2,000
lines a second and dropped the newest lines once 2,000 waited, whatever the sink: the end of the
output, where the error usually is, was the part lost).

Now (:mod:`fleetctl.reporting.livevalve`): a sink that takes the lines gets every one, in order;
only a reader that stops reading loses lines, from the middle of each host's output, never its
end, said once per host with the pointer to ``fleetctl logs``. Real CLI runs on local hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from tests.support.fleet import REPO, fleetctl_env, last_run, write_inventory

N = 50_000


def _per_host(text: str) -> tuple[dict[str, list[int]], list[str]]:
    """``host | line`` lines -> each host's numbers in the order printed, and every other line."""
    numbers: dict[str, list[int]] = defaultdict(list)
    other = []
    for ln in text.splitlines():
        host, sep, rest = ln.partition(" | ")
        if sep and rest.isdigit():
            numbers[host.strip()].append(int(rest))
        else:
            other.append(ln)
    return numbers, other


def test_run_into_a_file_gets_every_line_of_every_host_in_order(tmp_path):
    hosts = {h: {"ansible_connection": "local", "workdir": str(tmp_path / h)} for h in ("box", "crate")}
    inv = write_inventory(tmp_path / "hosts.yaml", {"g": hosts})
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.run([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "g", "--",
                               "seq", "1", str(N)], stdout=stdout, stderr=stderr, cwd=REPO,
                              env=fleetctl_env(tmp_path / "state"), timeout=120)
    assert proc.returncode == 0, err.read_text()[-2000:]
    numbers, other = _per_host(out.read_text())
    assert not other, other[:5]  # stdout holds what the hosts printed and nothing else
    for h in hosts:
        assert numbers[h] == list(range(1, N + 1)), (h, len(numbers[h]), numbers[h][-3:])
    assert "not shown" not in err.read_text()
    assert err.read_text().splitlines()[-1] == "ok 2, failed 0, unreachable 0"
