"""The commands operators reach for first (issue 25), end to end through the real CLI against real
sshd test hosts, ``local`` hosts and the real Slurm test cluster: ``run -b`` and the summary line,
``copy``/``fetch`` (SFTP, the exec fallback of a server without ``Subsystem sftp``, sbcast),
``logs`` (every host, ``--host``, ``--follow`` on a live run), ``runs show``, and ``-o``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.slurm import counting_launcher, slurm_cluster, slurm_cluster_session, tool_calls  # noqa: F401
from tests.support.sshd import free_port

pytestmark = pytest.mark.sshd


def _greet(host, text: str, rc: int = 0) -> None:
    """A `greet` program on the host's PATH printing ``text`` (stdout) and ``warn`` (stderr)."""
    script = host.bin_dir / "greet"
    script.write_text(f"#!/bin/sh\necho '{text}'\necho warn >&2\nexit {rc}\n")
    script.chmod(0o755)


def _record(home: Path) -> dict:
    return json.loads((last_run(home) / "run.json").read_text())


# -- run -b and the summary line -----------------------------------------------------------------

def test_run_b_gathers_identical_outputs_under_the_folded_node_set(sshd_farm, tmp_path):
    hosts = {}
    for name, text, rc in (("gpu01", "same", 0), ("gpu02", "same", 0), ("gpu03", "same", 3), ("gpu04", "other", 0)):
        h = sshd_farm.start(name)
        _greet(h, text, rc)
        hosts[name] = h.inventory_vars(sshd_farm.known_hosts)
    dead = {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "known_hosts": str(sshd_farm.known_hosts)}
    hosts["gpu05"], hosts["gpu06"] = dead, dict(dead)
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": hosts})
    res = fleetctl("-i", str(inv), "run", "--hosts", "gpu", "-b", "--", "greet", home=tmp_path)
    assert res.returncode == 1, res.stderr
    rule = "-" * 15
    assert res.stdout == (f"{rule}\ngpu[01-02] (2)\n{rule}\nsame\nwarn\n"
                          f"{rule}\ngpu03 (1) rc=3\n{rule}\nsame\nwarn\n"
                          f"{rule}\ngpu04 (1)\n{rule}\nother\nwarn\n"), res.stdout
    # the failures gathered too, as clush -b folds identical lines: one line for both dead hosts
    assert "gpu[05-06]: UNREACHABLE: connection refused by 127.0.0.1:" in res.stderr, res.stderr
    assert "gpu05: " not in res.stderr and "gpu03: FAILED: rc=3" in res.stderr, res.stderr
    assert res.stderr.splitlines()[-1] == "ok 3, failed 1, unreachable 2"
    # without -b: each line prefixed as it comes, and the same summary line last on stderr
    plain = fleetctl("-i", str(inv), "run", "--hosts", "gpu01,gpu02", "--", "greet", home=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert sorted(plain.stdout.splitlines()) == ["gpu01 | same", "gpu01 | warn", "gpu02 | same", "gpu02 | warn"]
    assert plain.stderr.splitlines()[-1] == "ok 2, failed 0, unreachable 0"
    # --json: stdout is one document, unchanged; the summary is on stderr
    doc = fleetctl("-i", str(inv), "run", "--hosts", "gpu01,gpu02", "--json", "-b", "--", "greet", home=tmp_path)
    assert json.loads(doc.stdout)["gpu01"]["stdout"] == "same\n"
    assert doc.stderr.splitlines()[-1] == "ok 2, failed 0, unreachable 0"


def test_run_b_says_when_a_block_is_the_end_of_a_longer_output(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"l1": {"ansible_connection": "local"},
                                                        "l2": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "-b", "--", "python3", "-c",
                   "import sys\nfor i in range(30000): print(f'{i:08d}' + 'x' * 64)", home=tmp_path)
    assert res.returncode == 0, res.stderr
    head = res.stdout.splitlines()[1]
    assert head == "l[1-2] (2) (the end of the output: fleetctl logs RUN HOST has every byte)", head
    assert res.stdout.endswith(f"{29999:08d}{'x' * 64}\n")
    log = (last_run(tmp_path) / "logs" / "l1.log").read_bytes()
    assert log.count(b"\n") == 30001 and log.startswith(b"out| 00000000")  # the log kept every line
    assert log.endswith(b"\n==> host OK: rc=0\n")  # and the host's outcome, last


def test_piped_facts_say_each_host_once_and_a_wide_terminal_gets_the_table(tmp_path):
    """Operator trial 10: piped (80 columns), ``fleetctl facts`` printed each host's line as it
    came in, then the table's fallback: a block per host with the same cells again."""
    from tests.support.hostvenv import make_venv

    # two names of this machine, each with its own venv (two on one venv are refused, facts too)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "l1": {"ansible_connection": "local"},
        "l2": {"ansible_connection": "local", "venv": make_venv(tmp_path / "venv2", "venv")}}})
    narrow = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stdout + narrow.stderr
    lines = narrow.stdout.splitlines()
    for host in ("l1", "l2"):
        assert sum(line.startswith(f"{host}: ") and "; cores " in line for line in lines) == 1, narrow.stdout
        assert host not in lines, narrow.stdout  # no block headed by the host's name
    assert not any(line.startswith("  cores: ") for line in lines), narrow.stdout
    wide = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    assert wide.returncode == 0 and "\u2503 host" in wide.stdout, wide.stdout


# -- copy and fetch ------------------------------------------------------------------------------

def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "payload"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"alpha\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 4000)  # 1 MB, every byte value
    tool = src / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    return src


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "exec-fallback"])
def test_copy_then_fetch_a_folder_with_every_byte(sshd_farm, tmp_path, sftp):
    src = _source(tmp_path)
    h = sshd_farm.start("c1", sftp=sftp)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"c1": h.inventory_vars(sshd_farm.known_hosts)}})
    dst = h.root / "home" / "dst"  # absolute: SFTP's relative paths are the passwd home, here the real one
    res = fleetctl("-i", str(inv), "copy", "--hosts", "g", str(src) + "/", f"{dst}/", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == "c1: ok: 3 files, 1024026 bytes\n"
    assert res.stderr.splitlines()[-1] == "ok 1, failed 0, unreachable 0"
    want = _tree(src)
    assert _tree(dst) == want
    assert (dst / "tool.sh").stat().st_mode & 0o111  # modes kept
    assert ("subsystem request for sftp" in h.log) is not sftp  # the fault is real: the fallback carried it
    rec = _record(tmp_path)
    assert rec["kind"] == "copy" and rec["status"] == "ok"
    size = sum(len(b) for b in want.values())
    assert rec["hosts"]["c1"]["bytes"] == size and len(rec["hosts"]["c1"]["files"]) == 3
    log = (last_run(tmp_path) / "logs" / "c1.log").read_text()
    assert f"-> {dst}/sub/b.bin ({len(want['sub/b.bin'])} bytes)" in log
    # fetch the folder itself back, one folder per host
    got = tmp_path / "got"
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", str(dst), str(got / "{host}") + "/", "--json",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["c1"]["status"] == "ok" and doc["c1"]["bytes"] == size
    assert _tree(got / "c1" / "dst") == want
    assert (got / "c1" / "dst" / "tool.sh").stat().st_mode & 0o111  # and back: the exec bit kept, as scp -r
    assert _record(tmp_path)["kind"] == "fetch"


def _own_disk(folder: Path, size: str = "256k") -> list[str]:
    """An sshd ``wrap`` giving that host its own small, empty tmpfs at ``folder`` (a private mount
    namespace): a host where other hosts' files are missing, and whose disk fills up."""
    folder.mkdir(parents=True, exist_ok=True)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs -o size={size} tmpfs "$0" && exec "$@"', str(folder)]


def test_copy_and_fetch_faults_name_the_path(sshd_farm, tmp_path):
    shared = tmp_path.parent / f"{tmp_path.name}-disk"  # readable by sshd (pytest's tmp_path is 0700)
    h = sshd_farm.start("f1")
    small = sshd_farm.start("f2", wrap=_own_disk(shared))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "f1": h.inventory_vars(sshd_farm.known_hosts),
        "f2": small.inventory_vars(sshd_farm.known_hosts),
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "known_hosts": str(sshd_farm.known_hosts)}}})
    try:
        # a missing SRC on the controller: bad input, one line, nothing run
        res = fleetctl("-i", str(inv), "copy", "--hosts", "g", str(tmp_path / "nope"), "x", home=tmp_path)
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr == f"fleetctl: error: copy: {tmp_path / 'nope'}: no such file or folder on this controller\n"
        assert not (tmp_path / "runs").exists()
        # a missing SRC on a host fails that host, naming the path; the others go on
        here = shared / "here.txt"  # f1 sees it; f2 has its own empty disk there
        here.write_text("x\n")
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "f1,f2", str(here), str(tmp_path / "out"), home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        assert (tmp_path / "out" / "f1" / str(here).lstrip("/")).read_text() == "x\n"  # DEST/<host>/<path>
        assert not (tmp_path / "out" / "f2").exists()
        assert f"f2: FAILED: fetch {here}: no such file or folder on the host" in res.stderr
        assert res.stderr.splitlines()[-1] == "ok 1, failed 1, unreachable 0"
        # a full disk names the error, the path and its cause; an unreachable host is counted as such
        big = tmp_path / "big.bin"
        big.write_bytes(b"\0" * (1 << 20))
        res = fleetctl("-i", str(inv), "copy", "--hosts", "f1,f2,gone", str(big), f"{shared}/big.bin",
                       home=tmp_path)
        assert res.returncode == 1
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("f2: FAILED: "))
        assert "No space left on device (ENOSPC)" in line and f"{shared}/" in line, line
        assert "gone: UNREACHABLE: " in res.stderr
        assert res.stderr.splitlines()[-1] == "ok 1, failed 1, unreachable 1"
        assert (shared / "big.bin").stat().st_size == 1 << 20  # f1 (same disk as here) got it whole
    finally:
        import shutil

        shutil.rmtree(shared, ignore_errors=True)


def test_fetch_without_host_in_dest_gets_a_host_level_and_symlinks_are_skipped(tmp_path):
    src = _source(tmp_path)
    (src / "link").symlink_to("a.txt")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"m1": {"ansible_connection": "local"},
                                                        "m2": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", str(src), str(tmp_path / "out"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    for name in ("m1", "m2"):  # as Ansible's fetch: DEST/<host>/<the path on the host>
        assert _tree(tmp_path / "out" / name / str(src).lstrip("/")) == _tree(src)  # link skipped, not followed
        assert not (tmp_path / "out" / name / str(src).lstrip("/") / "link").exists()
    logs = fleetctl("logs", last_run(tmp_path).name, home=tmp_path)
    assert f"m1: skipped {src / 'link'}: not a regular file (symlinks are never followed)" in logs.stdout
    # the record of a transfer follows the published schemas
    import jsonschema

    from fleetctl.reporting.schema import events_schema, run_schema

    record = _record(tmp_path)
    jsonschema.validate(record, run_schema())
    assert record["kind"] == "fetch" and record["hosts"]["m1"]["bytes"] == sum(len(b) for b in _tree(src).values())
    for line in (last_run(tmp_path) / "events.jsonl").read_text().splitlines():
        jsonschema.validate(json.loads(line), events_schema())


def _slurm_cli(*args: str, home: Path, launcher: str) -> subprocess.CompletedProcess:
    """The CLI with the cluster's launcher for the ``slurm:`` source, HOME and XDG under ``home``."""
    for sub in ("home", "state", "config"):
        (home / sub).mkdir(exist_ok=True)
    return fleetctl(*args, home=home, env={"FLEETCTL_SLURM_LAUNCHER": launcher, "HOME": str(home / "home"),
                                           "XDG_STATE_HOME": str(home / "state"),
                                           "XDG_CONFIG_HOME": str(home / "config")}, timeout_s=600)


def test_copy_and_fetch_over_slurm(slurm_cluster, tmp_path):
    src = _source(tmp_path)
    dest = str(slurm_cluster.local / "dst")
    calls = tmp_path / "calls.log"
    res = _slurm_cli("-i", "slurm:", "copy", "--hosts", "n1,n2", str(src) + "/", dest + "/", home=tmp_path,
                     launcher=counting_launcher(slurm_cluster, calls))
    assert res.returncode == 0, res.stdout + res.stderr
    assert tool_calls(calls).count("sbcast") == 3  # one sbcast per file for both nodes, not one per node
    for node in ("n1", "n2"):
        assert _tree(slurm_cluster.node_disk(node) / "dst") == _tree(src)
    assert not (slurm_cluster.node_disk("n3") / "dst").exists()
    assert slurm_cluster.jobs() == []
    res = _slurm_cli("-i", "slurm:", "fetch", "--hosts", "n1,n2", dest + "/sub/b.bin", str(tmp_path / "got" / "{host}.bin"),
              home=tmp_path, launcher=slurm_cluster.launcher_text)
    assert res.returncode == 0, res.stdout + res.stderr
    for node in ("n1", "n2"):
        assert (tmp_path / "got" / f"{node}.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert slurm_cluster.jobs() == []
    # a single file onto a DEST that is an existing folder on the nodes: it goes inside, as cp
    res = _slurm_cli("-i", "slurm:", "copy", "--hosts", "n1,n2", str(src / "tool.sh"), dest + "/sub",
                     home=tmp_path, launcher=slurm_cluster.launcher_text)
    assert res.returncode == 0, res.stdout + res.stderr
    for node in ("n1", "n2"):
        assert (slurm_cluster.node_disk(node) / "dst" / "sub" / "tool.sh").read_text() == "#!/bin/sh\necho tool\n"
    assert slurm_cluster.jobs() == []


# -- logs and runs show --------------------------------------------------------------------------

def test_logs_follow_a_live_run_to_its_end(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"l1": {"ansible_connection": "local"},
                                                        "l2": {"ansible_connection": "local"}}})
    gate = tmp_path / "gate"
    script = f"echo a; while [ ! -e {gate} ]; do sleep 0.05; done; echo b; exit $1"
    env = {"FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    import os

    for rc, want in ((0, 0), (4, 1)):
        if gate.exists():
            gate.unlink()
        before = set(_records(tmp_path))
        # --forks 1: l2 starts only once l1 is done, so its log appears while the follower runs
        run = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "g", "--forks", "1",
                                "--",
                                "sh", "-c", script, "sh", str(rc)], cwd=REPO, env={**os.environ, **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            run_dir = _wait(lambda: next(iter(set(_records(tmp_path)) - before), None))
            log1 = run_dir / "logs" / "l1.log"
            _wait(lambda: log1.exists() and b"a" in log1.read_bytes())
            assert not (run_dir / "logs" / "l2.log").exists()
            follow = subprocess.Popen([sys.executable, "-m", "fleetctl", "logs", "--follow"], cwd=REPO,
                                      env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            first = follow.stdout.readline()  # the follower is live before the run goes on
            gate.touch()
            rest = follow.stdout.read()  # not communicate(): it reads past readline's buffer
            err = follow.stderr.read()
            follow.wait(timeout=120)
        finally:
            run.wait(timeout=120)
        lines = sorted([first.rstrip("\n"), *rest.splitlines()])
        end = "OK: rc=0" if rc == 0 else f"FAILED: rc={rc}"
        assert lines == ["l1: ==> host " + end, "l1: a", "l1: b", "l2: ==> host " + end, "l2: a", "l2: b"], (first, rest, err)
        assert follow.returncode == want, err
        assert err.splitlines()[-1] == f"run {run_dir.name}: {'ok' if want == 0 else 'failed'}"


def test_logs_follow_with_a_host_follows_that_hosts_live_run_not_the_newest(tmp_path):
    """Operator trial: ``logs --follow --host me`` followed the newest run of all (a failed run on
    another host that came after), printed nothing of ``me`` and exited 1; ``logs --host me``
    already picked me's newest run. Both pick it (one helper): here me's run is live, the other
    host's run came after it and failed, and the follower shows me's lines to the end, exit 0."""
    import os

    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"me": {"ansible_connection": "local"},
                                                        "you": {"ansible_connection": "local"}}})
    gate = tmp_path / "gate"
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    live, run_dir = _gated_run(tmp_path, inv, env, gate, "me", "me")
    try:
        other = fleetctl("-i", str(inv), "run", "--hosts", "you", "--", "sh", "-c", "echo other; exit 3", home=tmp_path)
        assert other.returncode == 1 and last_run(tmp_path).name != run_dir.name, other.stderr
        follow = subprocess.Popen([sys.executable, "-m", "fleetctl", "logs", "--follow", "--host", "me"], cwd=REPO,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = follow.stdout.readline()  # the follower is live before the run goes on
        gate.touch()
        rest, err = follow.stdout.read(), follow.stderr.read()
        follow.wait(timeout=120)
    finally:
        gate.touch()
        live.wait(timeout=120)
    assert [first.rstrip("\n"), *rest.splitlines()] == ["me: a", "me: b", "me: ==> host OK: rc=0"], (first, rest, err)
    assert follow.returncode == 0, err
    assert err.splitlines() == [f"fleetctl: note: run {run_dir.name}: the newest run with a log for me",
                                f"run {run_dir.name}: me: ok"], err


def test_logs_follow_a_live_run_names_why_a_silent_host_failed(tmp_path):
    """Operator trial: following a live run with an unreachable host printed the reachable host's
    lines and ``run ...: failed``, never why the other failed; it ends with the cause line that
    ``fleetctl logs RUN`` prints (one rendering)."""
    import os

    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"l1": {"ansible_connection": "local"},
                                                        "gone": {"ansible_host": "127.0.0.1",
                                                                 "ansible_port": free_port()}}})
    gate = tmp_path / "gate"
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    live, run_dir = _gated_run(tmp_path, inv, env, gate, "g", "l1")
    try:
        follow = subprocess.Popen([sys.executable, "-m", "fleetctl", "logs", "--follow"], cwd=REPO,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = follow.stdout.readline()  # the follower is live before the run goes on
        gate.touch()
        rest, err = follow.stdout.read(), follow.stderr.read()
        follow.wait(timeout=120)
    finally:
        gate.touch()
        live.wait(timeout=120)
    got = [first.rstrip("\n"), *rest.splitlines()]
    mine = [ln for ln in got if ln.startswith("l1: ")]
    assert mine == ["l1: a", "l1: b", "l1: ==> host OK: rc=0"] and len(got) == 4, (got, err)
    gone = next(ln for ln in got if not ln.startswith("l1: "))  # its log's outcome line names the cause
    assert gone.startswith("gone: ==> host UNREACHABLE: ") and "127.0.0.1" in gone, got
    assert fleetctl("logs", run_dir.name, home=tmp_path).stdout.splitlines() == [gone, *mine]  # the same lines
    assert follow.returncode == 1 and err.splitlines()[-1] == f"run {run_dir.name}: failed", err


def _gated_run(tmp_path: Path, inv: Path, env: dict, gate: Path, pattern: str, first: str):
    """A live ``fleetctl run`` on ``pattern`` whose command prints ``a``, waits for ``gate`` to exist,
    then prints ``b``: (its process, its run folder) once ``first``'s log holds ``a``."""
    live = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", pattern, "--", "sh",
                             "-c", f"echo a; while [ ! -e {gate} ]; do sleep 0.05; done; echo b"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_dir = _wait(lambda: next(iter(_records(tmp_path)), None))
        log = run_dir / "logs" / f"{first}.log"
        _wait(lambda: log.exists() and b"a" in log.read_bytes())
    except BaseException:
        gate.touch()
        live.wait(timeout=120)
        raise
    return live, run_dir


def _records(home: Path) -> list[Path]:
    """The run record folders under ``home/runs`` (not the order counter, ``runs/.seq``)."""
    return [p for p in (home / "runs").iterdir() if p.is_dir()] if (home / "runs").is_dir() else []


def _wait(fn, timeout_s: float = 60.0):
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_logs_every_host_prefixed_one_host_exact_and_runs_show(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h1": {"ansible_connection": "local"},
                                                        "h2": {"ansible_connection": "local"},
                                                        "gone": {"ansible_host": "127.0.0.1",
                                                                 "ansible_port": free_port()}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "sh", "-c", "printf 'x\\033[31my\\n'; echo e >&2; exit 2",
                   home=tmp_path)
    assert res.returncode == 1
    run_id = last_run(tmp_path).name
    logs = fleetctl("logs", run_id, home=tmp_path)
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines[0].startswith("gone: ==> host UNREACHABLE: ")  # hosts in name order, each outcome last
    lines = lines[1:] + lines[:1]
    assert lines[:6] == ["h1: x[31my", "h1: e", "h1: ==> host FAILED: rc=2",  # markers gone, control bytes dropped,
                         "h2: x[31my", "h2: e", "h2: ==> host FAILED: rc=2"]  # each host's outcome last
    # --follow on the finished run: the same lines, the unreachable host's cause included (operator
    # trial: it printed only the run's status); with a host, that host's line
    follow = fleetctl("logs", "--follow", run_id, home=tmp_path)
    assert follow.returncode == 1 and follow.stdout == logs.stdout, follow.stdout + follow.stderr
    assert follow.stderr.splitlines()[-1] == f"run {run_id}: failed"
    one = fleetctl("logs", "--follow", run_id, "gone", home=tmp_path)
    assert one.stdout == lines[6] + "\n", one.stdout + one.stderr
    assert (one.returncode, one.stderr) == (1, f"run {run_id}: gone: unreachable\n"), one.stderr
    exact = fleetctl("logs", run_id, "--host", "h1", home=tmp_path)
    # one host: the exact bytes, as before, then its outcome (operator's trial: a run's rc was in no log)
    assert exact.stdout == "out| x\x1b[31my\nerr| e\n==> host FAILED: rc=2\n"
    assert (exact.returncode, exact.stderr) == (1, f"run {run_id}: h1: failed\n"), exact.stderr
    assert fleetctl("logs", run_id, "h1", home=tmp_path).stdout == exact.stdout
    # with a host, --follow and plain logs exit by that host's status, not the run's (operator's
    # trial: `logs --follow --host hz` exited 1, `run ...: failed`, for an ok hz: another host was unreachable)
    okrun = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "true", home=tmp_path)
    assert okrun.returncode == 1, okrun.stderr  # gone: unreachable
    ok_id = last_run(tmp_path).name
    for argv in (("logs", "--follow", "--host", "h2", ok_id), ("logs", "--host", "h2", ok_id)):
        got = fleetctl(*argv, home=tmp_path)
        assert (got.returncode, got.stderr) == (0, f"run {ok_id}: h2: ok\n"), (argv, got.stderr)
        assert got.stdout.splitlines()[-1].endswith("==> host OK: rc=0"), got.stdout
    whole = fleetctl("logs", "--follow", ok_id, home=tmp_path)
    assert (whole.returncode, whole.stderr) == (1, f"run {ok_id}: failed\n"), whole.stderr  # the run's, without a host
    for argv in (("logs", "--host", ""), ("logs", ok_id, ""), ("logs", "--follow", "--host", " ")):
        empty = fleetctl(*argv, home=tmp_path)
        assert (empty.returncode, empty.stdout, empty.stderr.count("\n")) == (2, "", 1), (argv, empty.stderr)
        assert empty.stderr.startswith("fleetctl: error: logs: ") and "an empty host name" in empty.stderr
    show = fleetctl("runs", "show", run_id, home=tmp_path)
    assert show.returncode == 0, show.stderr
    out = show.stdout
    for want in (f"run:      {run_id}", "kind:     run", "pattern:  g", "status:   failed", "duration: "):
        assert want in out, out
    assert "h[1-2] (2): rc=2" in out
    assert any(ln.startswith("gone ") and "unreachable" in ln for ln in out.splitlines())
    assert f"fleetctl logs {run_id} h1" in out
    assert json.loads(fleetctl("runs", "show", run_id, "--json", home=tmp_path).stdout)["run_id"] == run_id


# -- -o ------------------------------------------------------------------------------------------

def test_o_port_user_identityfile_change_where_fleetctl_connects(sshd_farm, tmp_path, client_key):
    h = sshd_farm.start("oo")
    _greet(h, "reached")
    dead = free_port()
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"oo": {
        "ansible_host": "127.0.0.1", "ansible_port": dead, "ansible_user": "nobody-here",
        "known_hosts": str(sshd_farm.known_hosts), "workdir": str(h.root / "home" / "work")}}})
    # as the inventory says: nothing listens there
    res = fleetctl("-i", str(inv), "run", "--hosts", "oo", "--", "greet", home=tmp_path)
    assert res.returncode == 1 and "connection refused" in res.stderr.lower(), res.stderr
    res = fleetctl("-i", str(inv), "-o", f"Port={h.port}", "-o", f"User {h.user}", "-o", f"identityfile={client_key}",
                   "run", "--hosts", "oo", "--", "greet", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "oo | reached\noo | warn\n"
    # a deploy, its --plan and --dry-run reach the host the same way (the same scopes, ConnectOptions.ssh_options)
    play = tmp_path / "play.yaml"
    play.write_text("name: o\nhosts: all\ngather_facts: false\ntasks:\n  - name: greet\n"
                    "    command: {argv: [greet]}\n")
    where = ["-o", f"Port={h.port}", "-o", f"User={h.user}", "-o", f"IdentityFile={client_key}"]
    for mode in (["--plan"], ["--dry-run"], []):
        dep = fleetctl("-i", str(inv), *where, "deploy", "--playbook", str(play), "--hosts", "oo", *mode,
                       home=tmp_path)
        assert dep.returncode == 0, (mode, dep.stdout + dep.stderr)
        assert _record(tmp_path)["hosts"]["oo"]["status"] == "ok"
    assert "reached" in (last_run(tmp_path) / "logs" / "oo.log").read_text()  # the deploy ran greet there
    # the inventory's key would not do: -o IdentityFile is what logged in
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    res = fleetctl("-i", str(inv), "-o", f"Port={h.port}", "-o", f"User={h.user}", "-o", f"IdentityFile={wrong}",
                   "-o", "IdentitiesOnly=yes", "run", "--hosts", "oo", "--", "greet", home=tmp_path)
    assert res.returncode == 1 and "oo: UNREACHABLE: " in res.stderr, res.stderr


RELAY = """import os, socket, sys, threading
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
open(sys.argv[3], "a").write("relayed %s:%s\\n" % (sys.argv[1], sys.argv[2]))
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            s.shutdown(socket.SHUT_WR)
            return
        s.sendall(data)
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    os.write(1, data)
"""


def test_o_proxycommand_is_the_way_in(sshd_farm, tmp_path):
    """-o ProxyCommand is used (it was parsed, then never given to the connection: a direct login
    said ok): a relay with %h %p gets there and says so; /bin/false fails the host; none undoes it."""
    import sys

    h = sshd_farm.start("pc")
    _greet(h, "via")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"pc": h.inventory_vars(sshd_farm.known_hosts)}})
    relay, seen = tmp_path / "relay.py", tmp_path / "relayed.txt"
    relay.write_text(RELAY)
    res = fleetctl("-i", str(inv), "-o", f"ProxyCommand={sys.executable} {relay} %h %p {seen}", "run", "--hosts", "pc",
                   "--", "greet", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("pc | via") and seen.read_text() == f"relayed 127.0.0.1:{h.port}\n"
    res = fleetctl("-i", str(inv), "-o", "ProxyCommand=/bin/false", "run", "--hosts", "pc", "--", "greet", home=tmp_path)
    assert res.returncode == 1 and "pc: UNREACHABLE: " in res.stderr, res.stderr
    res = fleetctl("-i", str(inv), "-o", "ProxyCommand=none", "run", "--hosts", "pc", "--", "greet", home=tmp_path)
    assert res.returncode == 0 and seen.read_text().count("relayed") == 1, res.stderr


def test_o_refuses_what_fleetctl_does_not_honour_and_accept_new_is_the_flag(sshd_farm, tmp_path):
    h = sshd_farm.start("kk")
    _greet(h, "hi")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"kk": {**h.inventory_vars(sshd_farm.known_hosts),
                                                               "known_hosts": str(empty)}}})
    for opt, why in (("StrictHostKeyChecking=no", "a changed key is always refused"),
                     ("stricthostkeychecking ask", "a changed key is always refused"),
                     ("Ciphers=aes128-ctr", "-o Ciphers: fleetctl does not honour this ssh option"),
                     ("Port=http", "-o Port=http: not a TCP port"),
                     ("Port", "expected OPTION=VALUE")):
        for cmd in (["run", "--hosts", "kk", "--", "true"], ["facts", "--hosts", "kk"]):
            res = fleetctl("-i", str(inv), "-o", opt, *cmd, home=tmp_path)
            assert res.returncode == 2, (opt, res.stderr)
            assert len(res.stderr.splitlines()) == 1 and why in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()
    res = fleetctl("-i", str(inv), "run", "--hosts", "kk", "--", "greet", home=tmp_path)
    assert res.returncode == 1 and "--accept-new-host-keys" in res.stderr  # unknown key refused
    res = fleetctl("-i", str(inv), "-o", "StrictHostKeyChecking=accept-new", "run", "--hosts", "kk", "--", "greet",
                   home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert h.known_hosts_line.split()[2] in empty.read_text()  # recorded, as --accept-new-host-keys does


def test_accept_new_host_keys_before_the_command_as_after_it(sshd_farm, tmp_path):
    # fresh-operator trial: `fleetctl -i X --accept-new-host-keys run ...` was click's "No such option",
    # though -i and -o go there
    h = sshd_farm.start("kn")
    _greet(h, "hi")
    for where in ("before", "after"):
        known = tmp_path / f"known_hosts_{where}"
        known.write_text("")
        inv = write_inventory(tmp_path / f"inv_{where}.yaml", {"g": {"kn": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                            "known_hosts": str(known)}}})
        cmd = ["run", "--hosts", "kn", "--", "greet"]
        argv = ["--accept-new-host-keys", *cmd] if where == "before" else [*cmd[:3], "--accept-new-host-keys", *cmd[3:]]
        res = fleetctl("-i", str(inv), *argv, home=tmp_path)
        # greet's stdout and stderr lines are two streams: either may arrive first
        assert res.returncode == 0 and "kn | hi" in res.stdout.splitlines(), (where, res.stdout, res.stderr)
        assert h.known_hosts_line.split()[2] in known.read_text(), where  # recorded either way
    res = fleetctl("-i", str(inv), "--help", home=tmp_path)
    assert "--accept-new-host-keys" in res.stdout


def test_extra_vars_and_connect_timeout_before_the_command_as_after_it(sshd_farm, tmp_path):
    # fresh-operator trial: `fleetctl -i hosts.yaml -e archs=9.0a deploy ...` was click's "No such
    # option '-e'" (so was --connect-timeout), though -i, -o and --accept-new-host-keys go there; an
    # Ansible user writes options in any order (ansible-playbook -i hosts.yaml -e x=1 site.yml)
    from tests.support.netfaults import SilentServer

    h = sshd_farm.start("ke")
    _greet(h, "hi")
    silent = SilentServer()
    try:
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {
            "ke": {**h.inventory_vars(sshd_farm.known_hosts), "ansible_port": silent.port},  # the wrong port
            "hung": {**h.inventory_vars(sshd_farm.known_hosts), "ansible_port": silent.port}}})
        res = fleetctl("-i", str(inv), "-e", f"ansible_port={h.port}", "run", "--hosts", "ke", "--", "greet",
                       home=tmp_path)
        assert res.returncode == 0 and res.stdout.startswith("ke | hi\n"), res.stderr
        # both: those before the command first, so the one after it wins, as a later -e in Ansible
        res = fleetctl("-i", str(inv), "-e", "ansible_port=1", "run", "--hosts", "ke", "-e", f"ansible_port={h.port}",
                       "--", "greet", home=tmp_path)
        assert res.returncode == 0 and res.stdout.startswith("ke | hi\n"), res.stderr
        start = time.monotonic()  # a hung sshd waits out the connect timeout: 1 s, not the default 30
        res = fleetctl("-i", str(inv), "--connect-timeout", "1", "run", "--hosts", "hung", "--", "greet", home=tmp_path)
        assert res.returncode == 1 and "UNREACHABLE" in res.stdout + res.stderr, res.stdout + res.stderr
        assert time.monotonic() - start < 20, res.stderr
    finally:
        silent.close()
    for argv, why in (("-e x=1 hosts", "-e is not an option of hosts (it is one of copy, deploy, facts, fetch, "
                                       "rollback, run, schedule, verify)"),
                      ("--connect-timeout 5 logs", "--connect-timeout is not an option of logs")):
        res = fleetctl("-i", str(inv), *argv.split(), "--hosts", "ke", home=tmp_path)
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and why in res.stderr, res.stderr


def test_copy_never_follows_a_symlink_in_the_source_and_names_it_skipped(tmp_path):
    # Ansible's copy follows a source's symlinks by default (local_follow: yes); fleetctl never does,
    # and a symlink to a folder was dropped without a word (os.walk lists it, never enters it)
    src = _source(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not for the hosts\n")
    (src / "linkdir").symlink_to(outside)
    (src / "linkfile").symlink_to("a.txt")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"m1": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "copy", "--hosts", "g", f"{src}/", str(tmp_path / "dest"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert _tree(tmp_path / "dest") == _tree(src) and not (tmp_path / "dest" / "linkdir").exists()
    assert not (tmp_path / "dest" / "linkfile").exists()
    logs = fleetctl("logs", last_run(tmp_path).name, home=tmp_path).stdout
    for name in ("linkdir", "linkfile"):
        assert f"m1: skipped {src / name}: not a regular file (symlinks are never followed)" in logs, logs
