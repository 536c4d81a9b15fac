"""Transport faults made real on loopback, one test per kind (no timed assertions: speed lives in bench/).

- SYN-blackholed ports listed before live hosts: the live hosts finish before any dead one gives up;
- a port that accepts but never sends a banner: a deploy's good host runs its tasks before it gives up;
- a host printing 200 MiB: the controller's peak RSS, measured by the kernel (wait4), stays under
  100 MiB; the log holds every byte; a 3 MiB line is kept whole with its splits marked; --json says
  what was not kept;
- a host with ``MaxSessions 1`` gets a whole deploy (facts, uploads, commands, the deploy lock) done;
- handshakes dropped before login (sshd's MaxStartups): retried, counted in the run record, labelled;
- a login user whose home folder does not exist: told to set ``workdir``;
- two deploys started at once from two folders (two controllers, and one user twice): never on the
  same host at once; run records are the user's wherever a run starts; stale locks are taken over.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.netfaults import BlackHole, DropServer, SilentServer, SlowDropServer
from tests.support.sshd import ensure_homeless_user

pytestmark = pytest.mark.sshd
TIME = "/usr/bin/time"  # GNU time (Debian's ``time``; .ci/run installs it)


def wait_for(cond, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)  # polling an outside process's state
    return False


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_dead_hosts_listed_first_never_delay_the_live_ones(sshd_farm, tmp_path):
    holes = [BlackHole() for _ in range(16)]
    try:
        hosts = {f"dead{i:02d}": {"ansible_host": "127.0.0.1", "ansible_port": h.port,
                                  "known_hosts": str(sshd_farm.known_hosts)} for i, h in enumerate(holes)}
        for i in range(4):
            live = sshd_farm.start(f"live{i}")
            hosts[f"live{i}"] = live.inventory_vars(sshd_farm.known_hosts)
        inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--connect-timeout", "20", "--", "echo", "up",
                       home=tmp_path)
    finally:
        for h in holes:
            h.close()
    out = json.loads(res.stdout)
    assert res.returncode == 1
    assert all(out[f"live{i}"]["stdout"] == "up\n" for i in range(4))
    assert all("no TCP connection" in out[f"dead{i:02d}"]["error"] for i in range(16)), {h: out[h]["error"] for h in out}
    finished = [e["host"] for e in events(last_run(tmp_path)) if e["event"] == "host.finished"]
    # every live host was done before the first dead one gave up: no dead host held a slot they needed
    assert max(finished.index(f"live{i}") for i in range(4)) < min(finished.index(f"dead{i:02d}") for i in range(16))



def test_a_host_that_never_sends_a_banner_delays_no_other_host_of_a_deploy(sshd_farm, tmp_path):
    """The good host's first task starts before the hung host is declared unreachable (deploy,
    not only ``run``: the arch classes are not settled over hosts still connecting)."""
    hung = SilentServer()
    try:
        good = sshd_farm.start("good")
        hosts = {"hung": {"ansible_host": "127.0.0.1", "ansible_port": hung.port,
                          "known_hosts": str(sshd_farm.known_hosts)},
                 "good": good.inventory_vars(sshd_farm.known_hosts)}
        inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
        play = tmp_path / "play.yaml"
        play.write_text("name: t\nhosts: all\ntasks:\n  - name: t\n    command: {argv: [echo, up]}\n")
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json",
                       "--connect-timeout", "15", home=tmp_path)
    finally:
        hung.close()
    out = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr[-2000:]
    assert out["hosts"]["good"]["status"] == "ok" and out["hosts"]["hung"]["status"] == "unreachable"
    evs = [(e["event"], e.get("host")) for e in events(last_run(tmp_path))]
    assert evs.index(("facts.gathered", "good")) < evs.index(("task.started", "good"))
    assert evs.index(("task.finished", "good")) < evs.index(("host.finished", "hung"))


def test_names_of_one_hung_address_share_one_connect_attempt_and_its_cause(sshd_farm, tmp_path):
    """12 names for one address that accepts TCP and never sends a banner: one connect attempt
    waits out the connect timeout, the other names wait for it (holding no handshake slot) and
    fail at once with its cause; the healthy host is not delayed. (A trial: 12 names took two
    connect timeouts, 24 names three, each name printing its own timeout: one handshake slot of 8
    per name, each attempt its own.)"""
    hung = SilentServer()
    try:
        good = sshd_farm.start("good")
        hosts = {f"hang{i:02d}": {"ansible_host": "127.0.0.1", "ansible_port": hung.port,
                                  "known_hosts": str(sshd_farm.known_hosts)} for i in range(12)}
        hosts["good"] = good.inventory_vars(sshd_farm.known_hosts)
        inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
        started = time.monotonic()
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--connect-timeout", "3", "--forks", "20",
                       "--", "echo", "up", home=tmp_path)
        elapsed = time.monotonic() - started
        accepted = len(hung.held)
    finally:
        hung.close()
    out = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr[-2000:]
    assert out["good"]["stdout"] == "up\n"
    errors = {out[f"hang{i:02d}"]["error"] for i in range(12)}
    assert len(errors) == 1 and "sent no SSH banner" in next(iter(errors)), errors
    assert accepted == 1  # one attempt for all 12 names
    assert elapsed < 3 * 2  # one connect timeout (3 s), not two, plus slack
    finished = [e["host"] for e in events(last_run(tmp_path)) if e["event"] == "host.finished"]
    assert finished[0] == "good"


# 200 MiB of 1000-byte lines on stdout, a 3 MiB line without a newline in it halfway, a little stderr.
CHATTY = r"""
import sys
out = sys.stdout.buffer
n = 200 * 1024 * 1024 // 1000
for i in range(n):
    out.write(b"%09d " % i + b"x" * 989 + b"\n")
    if i == n // 2:
        out.write(b"L" * (3 * 1024 * 1024) + b"\n")
out.flush()
sys.stderr.write("done\n")
"""


def expected_stdout_sha256() -> tuple[str, int]:
    h = hashlib.sha256()
    n = 200 * 1024 * 1024 // 1000
    size = 0
    for i in range(n):
        line = b"%09d " % i + b"x" * 989 + b"\n"
        h.update(line)
        size += len(line)
        if i == n // 2:
            big = b"L" * (3 * 1024 * 1024) + b"\n"
            h.update(big)
            size += len(big)
    return h.hexdigest(), size


def stdout_from_log(log: Path) -> tuple[str, int, int]:
    """Rebuild the stdout bytes from a host log (``out| `` lines; ``out+ `` continues the previous
    piece, whose newline fleetctl added): sha256, size, and how many continuation pieces."""
    h = hashlib.sha256()
    size = 0
    pending = b""
    pieces = 0
    with open(log, "rb") as fh:
        for raw in fh:
            tag, data = raw[:5], raw[5:]
            if tag == b"out| ":
                h.update(pending)
                size += len(pending)
                pending = data
            elif tag == b"out+ ":
                pending = pending[:-1] + data
                pieces += 1
    h.update(pending)
    size += len(pending)
    return h.hexdigest(), size, pieces


def test_a_host_printing_200_mib_keeps_the_controller_small_and_the_log_whole(sshd_farm, tmp_path):
    host = sshd_farm.start("chatty")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"chatty": host.inventory_vars(sshd_farm.known_hosts)}})
    json_out, rss_out = tmp_path / "out.json", tmp_path / "maxrss"
    # GNU time reports the kernel's peak RSS of the process it starts (wait4's ru_maxrss). It must be
    # time that forks it: a child forked from this big pytest process would inherit its peak.
    with open(json_out, "wb") as stdout:
        proc = subprocess.run([TIME, "-f", "%M", "-o", str(rss_out), sys.executable, "-m", "fleetctl", "-i", str(inv),
                               "run", "--hosts", "g", "--json", "--", "python3", "-c", CHATTY], cwd=REPO, stdout=stdout,
                              stderr=subprocess.DEVNULL, env={**os.environ, "FLEETCTL_HOME": str(tmp_path)})
    assert proc.returncode == 0, json_out.read_text()[-2000:]
    peak_mib = int(rss_out.read_text().split()[-1]) / 1024
    print(f"controller peak RSS for 203 MiB printed: {peak_mib:.1f} MiB")
    assert peak_mib < 100, f"controller peak RSS {peak_mib:.1f} MiB"
    out = json.loads(json_out.read_text())["chatty"]
    expected_sha, expected_size = expected_stdout_sha256()
    # --json keeps the tail only, and says so
    assert out["output_truncated"]["stdout_dropped_bytes"] + len(out["stdout"].encode()) == expected_size
    assert out["stdout"].endswith("x" * 989 + "\n") and out["stderr"] == "done\n"
    # the log holds every byte; the long line's splits are marked
    sha, size, pieces = stdout_from_log(last_run(tmp_path) / "logs" / "chatty.log")
    assert (sha, size) == (expected_sha, expected_size)
    assert pieces >= 2  # the 3 MiB line arrived in pieces of about 1 MiB: one out| and the rest out+


def test_a_host_with_max_sessions_1_gets_a_whole_deploy_done(sshd_farm, tmp_path):
    host = sshd_farm.start("onesession", extra_config="MaxSessions 1")
    src = tmp_path / "payload"
    src.mkdir()
    for i in range(5):
        (src / f"f{i}.txt").write_text(f"file {i}\n" * 100)
    hv = {**host.inventory_vars(sshd_farm.known_hosts), "workdir": str(host.home / "work")}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"one": hv}})
    play = tmp_path / "play.yaml"
    play.write_text(f"""\
name: one session
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/payload"}}
  - name: list
    command: {{argv: [ls, "{{{{ workdir }}}}/payload"]}}
  - name: upload again (a second SFTP session after commands)
    copy: {{src: {src}/f0.txt, dest: "{{{{ workdir }}}}/again.txt"}}
  - name: check
    shell: {{cmd: 'test "$(cat {host.home}/work/again.txt | wc -l)" = 100'}}
""")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    statuses = [t["status"] for t in record["hosts"]["one"]["tasks"]]
    assert statuses[0] == "ok" and all(s in ("ok", "changed") for s in statuses), statuses  # facts first
    assert (host.home / "work" / "payload" / "f4.txt").read_text() == "file 4\n" * 100
    assert any(e["event"] == "lock.acquired" for e in events(last_run(tmp_path)))


def test_handshakes_dropped_before_login_are_retried_counted_and_labelled(sshd_farm, tmp_path):
    # a real sshd dropping everything past 2 unauthenticated connections
    crowded = sshd_farm.start("crowded", extra_config="MaxStartups 2:100:2")
    hosts = {f"n{i:02d}": crowded.inventory_vars(sshd_farm.known_hosts) for i in range(10)}
    drop = DropServer()  # drops every connection, as sshd past MaxStartups
    hosts["always-dropped"] = {"ansible_host": "127.0.0.1", "ansible_port": drop.port,
                               "known_hosts": str(sshd_farm.known_hosts)}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    try:
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", "ok", home=tmp_path)
    finally:
        drop.close()
    out = json.loads(res.stdout)
    assert res.returncode == 1
    assert all(out[f"n{i:02d}"]["stdout"] == "ok\n" for i in range(10)), out
    assert "drop connection" in crowded.log  # sshd really dropped some (its log says MaxStartups)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    retried = sum(record["hosts"][f"n{i:02d}"].get("connection", {}).get("handshake_retries", 0) for i in range(10))
    assert retried >= 1
    err = out["always-dropped"]["error"]
    assert "closed the connection before login 6 times" in err and "MaxStartups" in err
    assert record["hosts"]["always-dropped"]["connection"]["handshake_retries"] == 5
    assert drop.accepted == 7  # 6 handshakes, and the one probe of its protocol after the first drop


def test_the_connect_timeout_bounds_all_handshake_attempts_together(tmp_path):
    """A server that takes 0.4 s to drop each handshake: with ``--connect-timeout 1`` the retries
    stop when that second is spent (a new user's trial: ``--connect-timeout 3`` took ~22 s, six
    attempts each with the whole timeout and the backoff between them), and the message says so."""
    slow = SlowDropServer(hold_s=0.4)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": {"ansible_host": "127.0.0.1", "ansible_port": slow.port,
                                                              "known_hosts": str(tmp_path / "kh")}}})
    try:
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--connect-timeout", "1", "--json", "--", "true",
                       home=tmp_path)
    finally:
        slow.close()
    assert res.returncode == 1, res.stderr[-2000:]
    err = json.loads(res.stdout)["h"]["error"]
    # six attempts take at least 6 x 0.4 s plus 6.2 s of backoff: far more than the 1 s allowed
    assert 2 <= slow.accepted < 7, (slow.accepted, err)
    assert err.endswith("; the connect timeout (1 s, for all attempts together) ended the retries") or \
        err.endswith("; the connect timeout (1 s, for all attempts together) ended the retries (attempt "
                     f"{slow.accepted} was cut short by it)"), err
    assert err.startswith(f"127.0.0.1:{slow.port} closed the connection before login "), err
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    # the first handshake, the one probe of its protocol after the first drop (ssh_route), the retries
    assert record["hosts"]["h"].get("connection", {}).get("handshake_retries", 0) == slow.accepted - 2


def test_a_user_without_a_home_folder_is_told_to_set_workdir(sshd_farm, tmp_path):
    user = ensure_homeless_user()
    host = sshd_farm.start("homeless", login_user=user)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"nohome": host.inventory_vars(sshd_farm.known_hosts)}})
    play = tmp_path / "play.yaml"
    play.write_text("name: t\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json", home=tmp_path)
    assert res.returncode == 1
    error = json.loads(res.stdout)["hosts"]["nohome"]["error"]
    assert f"home folder /nonexistent/{user}" in error and "set the workdir var" in error
    work = Path(f"/tmp/fltest-nohome-{os.getpid()}")
    inv = write_inventory(tmp_path / "inv2.yaml", {"g": {"nohome": {**host.inventory_vars(sshd_farm.known_hosts),
                                                                     "workdir": str(work)}}})
    try:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
        assert res.returncode == 0, res.stdout[-2000:]
        assert (work / "deploy.lock").exists()  # the lock lives beside the workdir then
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


SLOW = """\
name: slow
hosts: all
gather_facts: false
tasks:
  - name: work
    command: {argv: [sh, -c, 'echo "start {{ run_id }}" >> "$1"; n=0; while [ ! -e "$2" ] && [ $n -lt 1200 ]; do
                     sleep 0.1; n=$((n+1)); done; echo "end {{ run_id }}" >> "$1"', sh, ORDER, GO]}
"""


def _start(inv: Path, play: Path, cwd: Path, state: Path) -> subprocess.Popen:
    env = {**os.environ, "FLEETCTL_HOME": str(state)}
    return subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "g", "--playbook",
                             str(play), "--json"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_two_deploys_from_two_folders_never_run_on_one_host_at_once(sshd_farm, tmp_path):
    host = sshd_farm.start("shared")
    order = host.home / "order.log"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"shared": host.inventory_vars(sshd_farm.known_hosts)}})
    play = tmp_path / "slow.yaml"
    go = tmp_path / "go"  # the first run holds the host until the others are done (however slow they start)
    play.write_text(SLOW.replace("ORDER", str(order)).replace("GO", str(go)))
    lock_file = host.home / ".fleetctl" / "shared" / "deploy.lock"  # in the host's default workdir
    folders = {n: tmp_path / n for n in ("a", "b", "c")}
    for f in folders.values():
        f.mkdir()
    state_a, state_b = tmp_path / "state-a", tmp_path / "state-b"  # two controllers (or two people)

    first = _start(inv, play, folders["a"], state_a)
    assert wait_for(lambda: lock_file.exists() and lock_file.read_text().strip())  # it holds the host's lock
    other_controller = _start(inv, play, folders["b"], state_b)
    same_user_elsewhere = _start(inv, play, folders["c"], state_a)
    out_b, _ = other_controller.communicate(timeout=300)
    out_c, err_c = same_user_elsewhere.communicate(timeout=300)
    go.touch()
    out_a, err_a = first.communicate(timeout=300)
    assert first.returncode == 0, err_a[-2000:]
    run_a = json.loads(out_a)["run_id"]
    assert other_controller.returncode == 1
    error_b = json.loads(out_b)["hosts"]["shared"]["error"]
    assert f"deploy lock {lock_file} is held by run {run_a}" in error_b
    assert same_user_elsewhere.returncode == 1 and "shared locked by run" in err_c  # the user's own lock
    lines = order.read_text().splitlines()
    assert lines == [f"start {run_a}", f"end {run_a}"]  # nothing ran beside the first deploy
    assert lock_file.read_text() == ""  # released

    # run records are the user's, wherever the run started: XDG_STATE_HOME, no FLEETCTL_HOME
    env = {k: v for k, v in os.environ.items() if k != "FLEETCTL_HOME"}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg-state")
    quick = tmp_path / "quick.yaml"
    quick.write_text("name: q\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    ids = []
    for f in ("a", "b"):
        res = subprocess.run([sys.executable, "-m", "fleetctl", "-i", str(inv), "deploy", "--hosts", "g", "--playbook",
                              str(quick), "--json"], cwd=folders[f], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-2000:]
        ids.append(json.loads(res.stdout)["run_id"])
    listed = subprocess.run([sys.executable, "-m", "fleetctl", "runs", "--json"], cwd=folders["c"], env=env,
                            capture_output=True, text=True)
    assert {r["run_id"] for r in json.loads(listed.stdout)} >= set(ids)
    assert not (folders["a"] / "runs").exists() and not (folders["a"] / "locks").exists()
    assert (tmp_path / "xdg-state" / "fleetctl" / "runs" / ids[0] / "run.json").is_file()

    # a controller killed mid-run: the host's lock process goes with its connection
    go.unlink()
    killed = _start(inv, play, folders["a"], state_a)
    assert wait_for(lambda: lock_file.exists() and lock_file.read_text().strip())
    killed.kill()
    killed.communicate(timeout=60)
    go.touch()  # the orphaned task on the host ends too
    assert wait_for(lambda: lock_file.read_text() == "")
    # a lock left by a run whose lock process died (kill -9, reboot) is taken over with a warning
    lock_file.write_text('4242 {"run_id": "dead-run", "controller": "elsewhere", "pid": 1, "started": "then"}\n')
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(quick), home=tmp_path / "state-d")
    assert res.returncode == 0, res.stdout[-2000:]
    assert "taking over the stale deploy lock of run dead-run" in res.stdout
    assert any(e["event"] == "lock.stale_taken_over" and e["previous"]["run_id"] == "dead-run"
               for e in events(last_run(tmp_path / "state-d")))


HOLD = """\
name: hold
hosts: all
gather_facts: false
tasks:
  - name: hold
    command: {argv: [sh, -c, 'n=0; while [ ! -e "$1" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done', sh, GO]}
"""


def test_a_deploy_lock_held_by_something_else_than_fleetctl_is_named_so(sshd_farm, tmp_path):
    """`flock deploy.lock sleep` on the host (a backup script, an operator by hand; new-user trial:
    'held by run ? (controller ?, pid ?, user ?, started ?)'): the host fails in one line saying no
    fleetctl run holds it and how to find what does; the other host of the deploy is done."""
    held, free = sshd_farm.start("held"), sshd_farm.start("free")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {h.name: h.inventory_vars(sshd_farm.known_hosts)
                                                        for h in (held, free)}})
    play = tmp_path / "pb.yaml"
    play.write_text("name: p\nhosts: g\ngather_facts: false\ntasks:\n  - name: hi\n    command: {argv: [\"true\"]}\n")
    lock_file = held.home / ".fleetctl" / "held" / "deploy.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(["flock", str(lock_file), "sleep", "120"])
    try:
        assert wait_for(lambda: subprocess.run(["flock", "-n", str(lock_file), "true"]).returncode != 0)
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json",
                       home=tmp_path / "state")
    finally:
        holder.kill()
        holder.wait()
    assert res.stdout.startswith("{"), res.stderr[-2000:]
    hosts = json.loads(res.stdout)["hosts"]
    assert res.returncode == 1 and hosts["free"]["status"] == "ok", res.stdout[-2000:]
    assert hosts["held"]["error"] == (
        f"deploy lock {lock_file} is held by a process that left no fleetctl run record in the file (not a "
        f"fleetctl run): find it on the host with: fuser -v {lock_file} (or lsof {lock_file}); wait for it to end, "
        "or stop it if nothing should hold the host"), hosts["held"]["error"]


def test_a_machine_locked_by_another_run_fails_alone_and_the_lock_is_per_machine(sshd_farm, tmp_path):
    """The controller-side lock: keyed by the machine the connection reaches, not the inventory
    name; a locked host fails at once naming the holder, the other hosts run, --json still gives
    one document; lock files go with their run."""
    a, b = sshd_farm.start("machine-a"), sshd_farm.start("machine-b")
    go = tmp_path / "go"
    hold = tmp_path / "hold.yaml"
    hold.write_text(HOLD.replace("GO", str(go)))
    quick = tmp_path / "quick.yaml"
    quick.write_text("name: q\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    kh = sshd_farm.known_hosts
    first_inv = write_inventory(tmp_path / "first.yaml", {"g": {"s1": a.inventory_vars(kh)}})
    other_names = write_inventory(tmp_path / "other.yaml", {"g": {"alias-of-a": a.inventory_vars(kh),
                                                                  "other": b.inventory_vars(kh)}})
    same_name = write_inventory(tmp_path / "same-name.yaml", {"g": {"s1": b.inventory_vars(kh)}})
    locks = tmp_path / "locks"
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = subprocess.Popen([sys.executable, "-m", "fleetctl", "-i", str(first_inv), "deploy", "--hosts", "g",
                              "--playbook", str(hold), "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: locks.is_dir() and any(p.read_text().strip() for p in locks.glob("*.lock")))
        run_a = json.loads(next(p for p in locks.glob("*.lock") if p.read_text().strip()).read_text())["run_id"]
        second = fleetctl("-i", str(other_names), "deploy", "--hosts", "g", "--playbook", str(quick), "--json",
                          home=tmp_path)
        third = fleetctl("-i", str(same_name), "deploy", "--hosts", "g", "--playbook", str(quick), "--json",
                         home=tmp_path)
        assert first.poll() is None  # both ran while the first run held machine A
    finally:
        go.touch()
        out_a, err_a = first.communicate(timeout=300)
    assert first.returncode == 0, err_a[-2000:]
    assert json.loads(out_a)["run_id"] == run_a

    assert second.returncode == 1, second.stderr[-2000:]
    doc = json.loads(second.stdout)  # exactly one JSON document
    hosts = doc["hosts"]
    assert hosts["other"]["status"] == "ok"
    assert hosts["alias-of-a"]["status"] == "failed"
    reason = hosts["alias-of-a"]["error"]
    assert f"locked by run {run_a}" in reason and "\n" not in reason and f"127.0.0.1:{a.port}" in reason
    assert [t["name"] for t in hosts["alias-of-a"]["tasks"]] == ["controller lock"]
    assert f"alias-of-a locked by run {run_a}" in second.stderr
    record = json.loads((tmp_path / "runs" / doc["run_id"] / "run.json").read_text())
    assert record["hosts"]["alias-of-a"]["status"] == "failed" and record["hosts"]["other"]["status"] == "ok"
    refused = [e for e in events(tmp_path / "runs" / doc["run_id"]) if e["event"] == "lock.refused"]
    assert [e["host"] for e in refused] == ["alias-of-a"]

    assert third.returncode == 0, third.stderr[-2000:]  # another machine that is also called s1
    assert json.loads(third.stdout)["hosts"]["s1"]["status"] == "ok"
    assert list(locks.glob("*.lock")) == []  # every run removed its lock files
