"""``fleetctl run``'s live lines on stdout, into a file and a pipe (operator trial: ``run --hosts box
-- seq 1 3000 > out.txt`` kept 2,001 lines, ending ``... 999 line(s) of box not shown here (the
display fell behind; ...)``; 2 hosts x 200,000 lines kept 2,111. The valve printed at most 2,000
lines a second and dropped the newest lines once 2,000 waited, whatever the sink: the end of the
output, where the error usually is, was the part lost).

Now (:mod:`fleetctl.reporting.livevalve`): a sink that takes the lines gets every one, in order;
only a reader that stops reading loses lines, from the middle of each host's output, never its
end, said once per host with the pointer to ``fleetctl logs``. Real CLI runs on local hosts."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

from fleetctl.reporting.livevalve import TAIL_LINES
from tests.support.fleet import REPO, fleetctl_env, fleetctl_read_late, last_run, write_inventory

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


def test_a_reader_that_stops_reading_loses_the_middle_of_each_host_never_its_end_and_is_told_once(tmp_path):
    """``run -- seq 1 50000 | less``, the screen full: nothing reads stdout until the run has ended.
    The run is not held up (it ends while nothing reads); then each host's lines come in order, one
    notice per host where its lines are missing, counting them and naming ``fleetctl logs RUN HOST``,
    and then its last lines, the very end included."""
    hosts = {h: {"ansible_connection": "local", "workdir": str(tmp_path / h)} for h in ("box", "crate")}
    inv = write_inventory(tmp_path / "hosts.yaml", {"g": hosts})
    state = tmp_path / "state"
    res = fleetctl_read_late("-i", str(inv), "run", "--hosts", "g", "--", "seq", "1", str(N), home=state)
    assert res.returncode == 0, res.stderr[-2000:]
    run_id = last_run(state).name
    assert res.stderr.splitlines()[-1] == "ok 2, failed 0, unreachable 0" and "not shown" not in res.stderr
    seen: dict[str, list[int | str]] = defaultdict(list)  # each host's numbers, and its notices where they stand
    for ln in res.stdout.splitlines():
        host, _, rest = ln.partition(" | ")
        seen[host.strip()].append(int(rest) if rest.isdigit() else rest)
    assert set(seen) == set(hosts), list(seen)
    for h, items in seen.items():
        notices = [i for i, x in enumerate(items) if isinstance(x, str)]
        assert len(notices) == 1, [items[i] for i in notices]  # told once
        at = notices[0]
        notice, before, after = items[at], items[:at], items[at + 1:]
        m = re.fullmatch(rf"\.\.\. (\d+) line\(s\) of {h} not shown here \(the reader of this output took none "
                         rf"for 1 s; all are in fleetctl logs {run_id} {h}\)", notice)
        assert m, notice
        numbers = before + after
        assert numbers == sorted(set(numbers)), h  # in order, none twice
        # the notice stands where the lines are missing, and counts them
        assert (after[0] - (before[-1] if before else 0) - 1) == int(m[1]) == N - len(numbers), (h, notice)
        assert after[-TAIL_LINES:] == list(range(N - TAIL_LINES + 1, N + 1)), (h, after[-3:])  # the end is kept
        assert not before or before == list(range(1, len(before) + 1)), h
