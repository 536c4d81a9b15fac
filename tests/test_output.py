"""Output that scales: host-prefixed lines for a handful of hosts, folded output for many."""

from __future__ import annotations

import textwrap

from tests.support.fleet import fleetctl, last_run

PLAY = textwrap.dedent("""\
    name: folded
    hosts: all
    gather_facts: false
    tasks:
      - name: build
        command: {argv: [sh, -c, 'echo "[1/2] compiling"; echo "warning: variable set but not used" >&2']}
      - name: fail some
        command: {argv: [sh, -c, 'case "$H" in gpu0[37]|gpu08|gpu09) echo "nvcc fatal : Unsupported gpu architecture compute_120a" >&2; exit 1;; esac']}
        env: {H: "{{ host }}"}
    """)


def inventory(tmp_path, n):
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  children:\n    gpus:\n      hosts:\n        gpu[01:{n:02d}]:\n          ansible_connection: local\n")
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    return inv, play


def test_many_hosts_fold_identical_lines_and_errors(tmp_path):
    inv, play = inventory(tmp_path, 12)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    assert "gpu[01-12]: warning: variable set but not used" in res.stdout
    assert "gpu[03,07-09]: nvcc fatal : Unsupported gpu architecture compute_120a" in res.stdout
    assert "gpu[03,07-09]: FAILED fail some" in res.stdout
    # no output line streamed at this size; to a pipe (not a terminal) each task's and host's end,
    # as it happens
    assert "gpu07 | nvcc fatal" not in res.stdout and "gpu07 | [1/2] compiling" not in res.stdout
    assert "gpu07 | CHANGED     build" in res.stdout and "gpu07 | FAILED      fail some" in res.stdout
    assert "gpu07 | FAILED      host done in " in res.stdout and "gpu01 | OK          host done in " in res.stdout
    # the per-host logs stay complete
    log = (last_run(tmp_path) / "logs" / "gpu07.log").read_bytes()
    assert b"out| [1/2] compiling" in log and b"err| nvcc fatal" in log


def test_a_handful_of_hosts_stream_prefixed_lines(tmp_path):
    inv, play = inventory(tmp_path, 3)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1  # gpu03 fails
    assert "gpu02 | [1/2] compiling" in res.stdout
    assert "gpu03 | nvcc fatal : Unsupported gpu architecture compute_120a" in res.stdout
    assert "gpu03 | warning: variable set but not used" in res.stdout
