"""The folded terminal report of more than 8 hosts (fresh operator's trial, 9 hosts,
``fleetctl deploy --hosts all > out.txt 2>&1``): a host that fails before its first task (a
driver/library mismatch at facts) is among ``failures:`` with its cause and fix, as with 4 hosts;
its log holds that line (``fleetctl logs RUN HOST`` was empty); output that is no terminal streams
a line per finished task and per finished host as they happen (it printed nothing until the
end); ``fleetctl runs`` counts unreachable hosts as unreachable, not failed, as the run's summary.

Ten inventory hosts, cheaply: g01-g07 are seven names for one sshd test host (each its own
workdir; a fake H200), h-nvml another sshd host whose nvidia-smi fails as on a driver/library
version mismatch, u1-u2 two ports where nothing listens. g07 waits for a gate file, so the run is
still going while the test reads what was printed so far.

With 8 hosts or fewer (the nightly's ``--json``, stdout and stderr to files), each failed or
unreachable host has one line as it ends, a facts failure's with its cause (only the final table
named it).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi, write_mismatched_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.sshd import free_port

pytestmark = pytest.mark.sshd

PLAY = ("name: greet\nhosts: all\ntasks:\n"
        "  - name: greet\n    command: {argv: [sh, -c, '{{ script }}']}\n")


def _lines(proc: subprocess.Popen, stream=None) -> queue.Queue:
    """The process's stdout lines (or ``stream``'s) as they come (None at its end), read by a thread."""
    q: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream or proc.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=read, daemon=True).start()
    return q


def test_more_than_8_hosts_stream_to_a_pipe_and_name_every_cause_logs_and_runs_agree(sshd_farm, tmp_path):
    good, bad = sshd_farm.start("good"), sshd_farm.start("nvml")
    write_fake_nvidia_smi(good.bin_dir, [H200])
    write_mismatched_nvidia_smi(bad.bin_dir)
    gate = tmp_path / "gate"
    hosts = {f"g0{i}": {**good.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / f"g0{i}"),
                        "script": "true"} for i in range(1, 8)}
    hosts["g07"]["script"] = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    hosts["h-nvml"] = {**bad.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / "nvml"),
                       "script": "true"}
    for name in ("u1", "u2"):  # nothing listens there
        hosts[name] = {**good.inventory_vars(sshd_farm.known_hosts), "ansible_port": free_port(), "script": "true"}
    inv = write_inventory(tmp_path / "inv.yaml", {"lab": hosts})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "all",
                             "--playbook", str(play)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = _lines(proc)
        seen: list[str] = []
        deadline = time.monotonic() + 120

        def streamed() -> bool:
            return (any(ln.startswith("g01    | CHANGED     greet") for ln in seen)
                    and any(ln.startswith("h-nvml | FAILED      host done") for ln in seen)
                    and sum(ln.startswith(("u1 ", "u2 ")) and "UNREACHABLE" in ln for ln in seen) == 2)

        while not streamed():
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None and time.monotonic() < deadline, "\n".join(seen)
            seen.append(line)
        # printed as it happened: g07 is still waiting for its gate, the run is not over
        assert proc.poll() is None, "\n".join(seen)
        assert not any(ln.startswith("g07    | CHANGED") for ln in seen), "\n".join(seen)
        gate.touch()
        rest = []
        while (line := lines.get(timeout=120)) is not None:
            rest.append(line)
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "\n".join(seen + rest)
    # a line per finished task per host, and per host's end, each host's own
    for i in range(1, 8):
        assert f"g0{i}    | CHANGED     greet" in out, out
        assert f"g0{i}    | OK          host done in " in out, out
    # the failures: the host that failed at facts with its whole cause and fix, as with 4 hosts
    failures = out.partition("\nfailures:\n")[2]
    assert "h-nvml: FAILED: GPU stack broken: nvidia-smi: exit 18: Failed to initialize NVML: Driver/library " \
           "version mismatch" in failures and "reboot" in failures, out
    assert failures.count(": UNREACHABLE: ") == 2, out
    # its log holds the failure line: `fleetctl logs RUN h-nvml` is not empty
    run_id = last_run(tmp_path).name
    assert f"fleetctl logs {run_id} " in out
    log = (last_run(tmp_path) / "logs" / "h-nvml.log").read_text()
    assert log.startswith("==> host FAILED: GPU stack broken: nvidia-smi: exit 18") and log.count("\n") == 1, log
    logs = fleetctl("logs", run_id, "h-nvml", home=tmp_path, timeout_s=60)
    assert logs.returncode == 1, logs.stderr  # the host's status
    assert "host FAILED: GPU stack broken" in logs.stdout and "reboot" in logs.stdout, logs.stdout
    # fleetctl runs: the run's own words and counts (one status set)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    statuses = sorted(o["status"] for o in record["hosts"].values())
    assert statuses == ["failed"] + ["ok"] * 7 + ["unreachable"] * 2, statuses
    (row,) = json.loads(fleetctl("runs", "--json", home=tmp_path).stdout)
    assert (row["hosts"], row["ok"], row["failed"], row["unreachable"]) == (10, 7, 1, 2), row
    line = fleetctl("runs", home=tmp_path).stdout.splitlines()[0]
    assert line.endswith("10 hosts  1 failed  2 unreachable"), line


def test_a_few_hosts_name_each_failed_host_once_as_it_ends_json_or_not(sshd_farm, tmp_path):
    """Operator trial, the nightly's own ExecStart (``deploy --hosts all --playbook ... --json``,
    stdout to one file, stderr to another): with 8 hosts or fewer, a host that failed at facts (a
    driver/library mismatch) had no line on stderr, nor on stdout without ``--json``: only the
    final table named it. Each failed or unreachable host has one line as it ends, in both modes:
    the facts failure's with its cause and fix, while another host is still running."""
    good, bad = sshd_farm.start("good"), sshd_farm.start("nvml")
    write_fake_nvidia_smi(good.bin_dir, [H200])
    write_mismatched_nvidia_smi(bad.bin_dir)
    gate = tmp_path / "gate"
    hosts = {"slow": {**good.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / "slow"),
                      "script": f"while [ ! -e {gate} ]; do sleep 0.05; done"},
             "task3": {**good.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / "task3"),
                       "script": "exit 3"},
             "h-nvml": {**bad.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / "nvml"),
                        "script": "true"},
             "u1": {**good.inventory_vars(sshd_farm.known_hosts), "ansible_port": free_port(), "script": "true"}}
    inv = write_inventory(tmp_path / "inv.yaml", {"lab": hosts})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    nvml = ("h-nvml | FAILED      host done in ", ": GPU stack broken: nvidia-smi: exit 18: Failed to initialize NVML: "
                                                 "Driver/library version mismatch")

    def ends(text: str) -> dict[str, list[str]]:
        """host -> its live lines saying it failed or was unreachable."""
        return {h: [ln for ln in text.splitlines() if ln.startswith(f"{h:<6} | FAILED ")
                    or ln.startswith(f"{h:<6} | UNREACHABLE ")] for h in hosts}

    for as_json in (True, False):
        gate.unlink(missing_ok=True)
        with open(tmp_path / "stdout.txt", "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "all",
                                     "--playbook", str(play), *(["--json"] if as_json else [])], cwd=REPO, env=env,
                                    stdout=out if as_json else subprocess.PIPE,
                                    stderr=subprocess.PIPE if as_json else subprocess.DEVNULL, text=True)
        try:
            lines = _lines(proc, proc.stderr if as_json else proc.stdout)
            seen: list[str] = []
            deadline = time.monotonic() + 120
            while not (any(ln.startswith(nvml[0]) for ln in seen) and any(ln.startswith("u1 ") for ln in seen)
                       and any(ln.startswith("task3  | FAILED ") for ln in seen)):
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                assert line is not None and time.monotonic() < deadline, (as_json, "\n".join(seen))
                seen.append(line)
            assert proc.poll() is None, "\n".join(seen)  # as it happened: "slow" still waits for its gate
            gate.touch()
            rest = []
            while (line := lines.get(timeout=120)) is not None:
                rest.append(line)
            assert proc.wait(timeout=60) == 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        said = ends("\n".join(seen + rest))
        assert [len(said[h]) for h in ("h-nvml", "u1", "task3", "slow")] == [1, 1, 1, 0], (as_json, said)
        assert nvml[1] in said["h-nvml"][0] and "; fix: the driver was updated" in said["h-nvml"][0], said
        assert said["u1"][0].startswith("u1     | UNREACHABLE "), said
        if as_json:
            assert set(json.loads((tmp_path / "stdout.txt").read_text())["hosts"]) == set(hosts)
