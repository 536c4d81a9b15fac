"""The Slurm connection kind against a real Slurm 22.05 cluster (tests/support/slurm.py): no mocks.

Nodes n1, n2 (H200, SM 9.0) and n3 (RTX PRO 6000, SM 12.0); each has its own private local disk
at ``cluster.local``. Every test gets the cluster with no job and every node idle.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleetctl.connection.registry import ConnectOptions, HostRef, load_kind
from fleetctl.connection.slurm import SlurmScope, broadcast
from fleetctl.connection.slurm_settings import SlurmSettings
from fleetctl.connection.slurm_transfer import STRIPE_BYTES
from fleetctl.errors import CommandTimeout, HostUnreachable, TransferError
from fleetctl.inventory.sources.slurm import load_slurm_inventory
from fleetctl.connection.slurm_facts import fetch_slurm_view
from tests.support.slurm import (FakeLoginNode, counting_launcher, slurm_cluster, slurm_cluster_session,  # noqa: F401
                                 slurm_uniform_cluster, slurm_uniform_cluster_session, tool_calls)

REPO = Path(__file__).resolve().parents[1]
HOSTILE = ["a b", "$(touch /tmp/pwned)", "'\"", "", "x\ny", "*", "-n", "\\", ";|&", "ünï\u00e9", "--"]


def refs(cluster, names=("n1", "n2", "n3"), launcher=None, **host_vars) -> list[HostRef]:
    vars_ = {"slurm_launcher": launcher or cluster.launcher_text, **host_vars}
    return [HostRef(n, SlurmSettings.model_validate(vars_)) for n in names]


def scope(deadline_s: float = 20.0, run_id: str = "t") -> SlurmScope:
    return load_kind("slurm").scope(ConnectOptions(connect_timeout_s=deadline_s, run_id=run_id))  # type: ignore


async def opened(sc: SlurmScope, ref: HostRef):
    conn = sc.connection(ref)
    await conn.open()
    return conn


# -- the Connection contract ----------------------------------------------------------------------

def test_run_hostile_argv_env_cwd_exact(slurm_cluster):
    async def main():
        async with scope() as sc:
            assert await sc.prepare(refs(slurm_cluster, ["n1"])) == {}
            conn = await opened(sc, refs(slurm_cluster, ["n1"])[0])
            script = "import json,os,sys; print(json.dumps([sys.argv[1:], os.getcwd(), os.environ['V'], os.environ['W']]))"
            res = await conn.run(["python3", "-c", script, *HOSTILE], env={"V": "it's $HOME; `id`", "W": ""},
                                 cwd="/tmp")
            return res

    res = asyncio.run(main())
    assert res.rc == 0, res.stderr
    assert json.loads(res.stdout) == [HOSTILE, "/tmp", "it's $HOME; `id`", ""]
    assert not Path("/tmp/pwned").exists()
    assert res.argv[-len(HOSTILE):] == HOSTILE


def test_run_streams_lines_live_and_reports_rc_signal_missing_program(slurm_cluster):
    flag = slurm_cluster.local / "go"  # on n1's own disk

    async def main():
        async with scope() as sc:
            conn = await opened(sc, refs(slurm_cluster, ["n1"])[0])
            lines = []

            def on_line(line):
                lines.append(line)
                if line.text == "waiting":  # the step is still running: it waits for this file
                    (slurm_cluster.node_disk("n1") / "go").touch()

            script = f'echo waiting; while [ ! -e {flag} ]; do sleep 0.05; done; echo done; echo oops >&2; exit 7'
            res = await asyncio.wait_for(conn.run(["/bin/sh", "-c", script], on_line=on_line), 60)
            missing = await conn.run(["no-such-program-xyz"])
            killed = await conn.run(["/bin/sh", "-c", "kill -KILL $$"])
            bad_dir = await conn.run(["true"], cwd="/no/such/dir")
            return lines, res, missing, killed, bad_dir

    lines, res, missing, killed, bad_dir = asyncio.run(main())
    assert [(ln.stream, ln.text) for ln in lines] == [("stdout", "waiting"), ("stdout", "done"), ("stderr", "oops")]
    assert (res.rc, res.stdout, res.stderr) == (7, b"waiting\ndone\n", b"oops\n")  # srun's own notice is not output
    assert missing.rc == 127 and b"no-such-program-xyz" in missing.stderr
    assert (killed.rc, killed.signal) == (None, "KILL")
    assert bad_dir.rc == 125


def test_timeout_stops_the_step(slurm_cluster):
    pidfile = slurm_cluster.local / "pid"

    async def main():
        async with scope() as sc:
            conn = await opened(sc, refs(slurm_cluster, ["n1"])[0])
            started = time.monotonic()
            with pytest.raises(CommandTimeout):
                await conn.run(["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"], timeout_s=1.5)
            took = time.monotonic() - started
            steps = slurm_cluster.client("squeue", "-h", "-s", "-o", "%i %j").stdout.split("\n")
            return took, [s for s in steps if s.strip() and "extern" not in s]

    took, steps = asyncio.run(main())
    assert took < 15
    assert steps == []  # no step of ours left
    pid = int((slurm_cluster.node_disk("n1") / "pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the timed-out command still runs on the node"


def test_put_get_round_trip_on_the_nodes_own_disk(slurm_cluster, tmp_path):
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(3 * 1024 * 1024 + 17) + b"\n\x00\xff")
    big = tmp_path / "big.bin"  # above STRIPE_BYTES: comes back in byte ranges at once
    big.write_bytes(os.urandom(2 * STRIPE_BYTES + 12345))
    dest = slurm_cluster.local / "deep" / "er" / "payload.bin"

    async def main():
        async with scope() as sc:
            n1, n3 = [await opened(sc, r) for r in refs(slurm_cluster, ["n1", "n3"])]
            await n1.put(str(payload), str(dest), mode=0o600)
            await n1.get(str(dest), str(tmp_path / "back" / "payload.bin"))
            await n1.put(str(big), str(slurm_cluster.local / "big.bin"))
            await n1.get(str(slurm_cluster.local / "big.bin"), str(tmp_path / "back" / "big.bin"))
            (slurm_cluster.node_disk("n1") / "link").symlink_to(dest)
            with pytest.raises(TransferError) as link_err:
                await n1.get(str(slurm_cluster.local / "link"), str(tmp_path / "link"))
            with pytest.raises(TransferError) as n3_err:  # n3's disk does not have it
                await n3.get(str(dest), str(tmp_path / "n3"))
            return link_err.value, n3_err.value

    link_err, n3_err = asyncio.run(main())
    assert (tmp_path / "back" / "payload.bin").read_bytes() == payload.read_bytes()
    assert (tmp_path / "back" / "big.bin").read_bytes() == big.read_bytes()
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == ["big.bin", "payload.bin"]  # no temp left
    on_n1 = slurm_cluster.node_disk("n1") / "deep" / "er" / "payload.bin"
    assert on_n1.read_bytes() == payload.read_bytes() and (on_n1.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in on_n1.parent.iterdir()] == ["payload.bin"]  # no temporary file left
    assert not (slurm_cluster.node_disk("n3") / "deep").exists()
    assert "symlinks are never followed" in str(link_err) and "n1" in str(link_err)
    assert "n3" in str(n3_err) and "payload.bin" in str(n3_err)
    assert not (tmp_path / "link").exists()


def test_a_step_failing_on_one_node_leaves_the_others(slurm_cluster):
    async def main():
        async with scope() as sc:
            conns = [await opened(sc, r) for r in refs(slurm_cluster)]
            check = ["/bin/sh", "-c", 'nvidia-smi --query-gpu=compute_cap --format=csv,noheader; '
                     '[ "$SLURMD_NODENAME" != n2 ] || { echo "n2 is broken" >&2; exit 4; }']
            return await asyncio.gather(*(c.run(check) for c in conns))

    r1, r2, r3 = asyncio.run(main())
    assert (r1.rc, r1.stdout) == (0, b"9.0\n") and (r3.rc, r3.stdout) == (0, b"12.0\n")
    assert (r2.rc, r2.stderr) == (4, b"n2 is broken\n")


def test_through_an_ssh_launcher_argv_is_exact_and_files_are_staged(slurm_cluster, tmp_path):
    # the login node does not see the controller's tmp_path: sbcast must read a staged copy there
    login = FakeLoginNode(slurm_cluster, tmp_path / "login", hidden=[tmp_path])
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(os.urandom(1024 * 1024))
    try:
        seen = subprocess.run([str(login.script), "login01", "test", "-e", str(wheel)])
        assert seen.returncode == 1  # hidden there

        async def main():
            async with scope() as sc:
                rs = refs(slurm_cluster, ["n1", "n2"], launcher=login.launcher)
                assert await sc.prepare(rs) == {}
                conn = await opened(sc, rs[0])
                res = await conn.run(["python3", "-c", "import json,sys; print(json.dumps(sys.argv[1:]))", *HOSTILE])
                sent = await sc.broadcast(str(wheel), str(slurm_cluster.local / "w.whl"), ["n1", "n2"])
                await conn.get(str(slurm_cluster.local / "w.whl"), str(tmp_path / "back.whl"))
                with pytest.raises(CommandTimeout):
                    await conn.run(["sleep", "300"], timeout_s=1)
                steps = slurm_cluster.client("squeue", "-h", "-s", "-o", "%j").stdout.split()
                return res, sent, steps

        res, sent, steps = asyncio.run(main())
    finally:
        login.stop()
    assert res.rc == 0 and json.loads(res.stdout) == HOSTILE
    assert sent == {"n1": None, "n2": None}
    for node in ("n1", "n2"):
        assert (slurm_cluster.node_disk(node) / "w.whl").read_bytes() == wheel.read_bytes()
    assert (tmp_path / "back.whl").read_bytes() == wheel.read_bytes()
    assert [s for s in steps if s.startswith("fleetctl")] == []
    assert list(Path("/tmp").glob("fleetctl-sbcast.*")) == []  # the staged copy is gone
    assert slurm_cluster.jobs() == []


# -- allocation lifecycle ---------------------------------------------------------------------

def test_allocation_is_released_at_the_end_and_steps_overlap(slurm_cluster):
    async def main():
        async with scope(run_id="life") as sc:
            errors = await sc.prepare(refs(slurm_cluster))
            held = slurm_cluster.jobs()
            conn = await opened(sc, refs(slurm_cluster, ["n1"])[0])
            # two steps at once on one node (--overlap): neither waits for the other
            a, b = await asyncio.gather(conn.run(["sleep", "1"]), conn.run(["true"]))
        return errors, held, a, b

    errors, held, a, b = asyncio.run(main())
    assert errors == {}
    # one job for the two H200s, one for the RTX PRO (a job gets one GRES request per node)
    assert sorted(len(j) for j in held) == [3, 3] and all(j[1].startswith("fleetctl-life-") for j in held)
    assert a.rc == 0 and b.rc == 0 and b.duration_s < a.duration_s
    assert slurm_cluster.jobs() == []


def test_large_requests_are_cut_into_jobs_of_at_most_max_nodes(slurm_cluster, tmp_path, monkeypatch):
    import fleetctl.connection.slurm as slurm_kind

    monkeypatch.setattr(slurm_kind, "MAX_NODES_PER_JOB", 1)  # as 256 is for a fleet: n1 and n2 apart
    log = tmp_path / "calls"
    launcher = counting_launcher(slurm_cluster, log)
    src = tmp_path / "f"
    src.write_bytes(b"x" * 1000)

    async def main():
        async with scope() as sc:
            errors = await sc.prepare(refs(slurm_cluster, launcher=launcher))
            jobs = sorted(a.nodes for a in sc.allocations)
            out = [await (await opened(sc, r)).run(["hostname"]) for r in refs(slurm_cluster, launcher=launcher)]
            before = tool_calls(log).count("sbcast")
            sent = await sc.broadcast(str(src), str(slurm_cluster.local / "f"), ["n1", "n2"])
            return errors, jobs, out, tool_calls(log).count("sbcast") - before, sent

    errors, jobs, out, sbcasts, sent = asyncio.run(main())
    assert errors == {} and jobs == [("n1",), ("n2",), ("n3",)]
    assert [r.stdout for r in out] == [b"n1\n", b"n2\n", b"n3\n"]
    assert sent == {"n1": None, "n2": None} and sbcasts == 2  # one sbcast per job
    assert slurm_cluster.jobs() == []


def test_drained_node_is_unreachable_with_its_reason_while_others_run(slurm_cluster):
    slurm_cluster.drain("n2", "GPU fell off the bus (Xid 79)")

    async def main():
        async with scope() as sc:
            rs = refs(slurm_cluster)
            errors = await sc.prepare(rs)
            with pytest.raises(HostUnreachable) as unreachable:
                await opened(sc, rs[1])
            ok = [await (await opened(sc, r)).run(["hostname"]) for r in (rs[0], rs[2])]
            return errors, unreachable.value, ok

    errors, unreachable, ok = asyncio.run(main())
    assert list(errors) == ["n2"]
    assert "drained" in errors["n2"] and "GPU fell off the bus (Xid 79)" in errors["n2"] and "root" in errors["n2"]
    assert unreachable.host == "n2" and "Xid 79" in unreachable.cause
    assert [r.stdout for r in ok] == [b"n1\n", b"n3\n"]


def test_a_node_whose_slurmd_died_is_unreachable_and_the_others_run(slurm_cluster):
    slurm_cluster.kill_slurmd("n2")  # slurmctld still thinks n2 is idle: it learns only at launch

    async def main():
        async with scope() as sc:
            errors = await sc.prepare(refs(slurm_cluster))
            ok = [await (await opened(sc, r)).run(["hostname"]) for r in refs(slurm_cluster, ["n1", "n3"])]
            return errors, ok

    errors, ok = asyncio.run(main())
    assert list(errors) == ["n2"] and "no job step starts on Slurm node n2" in errors["n2"]
    assert "Communication connection failure" in errors["n2"]
    assert [r.stdout for r in ok] == [b"n1\n", b"n3\n"]


def test_allocation_not_granted_in_time_fails_only_those_hosts(slurm_cluster):
    # someone else holds n1 whole; n3 is free
    blocker = slurm_cluster.client("salloc", "--no-shell", "--exclusive", "-w", "n1", "-J", "someone-else")
    assert "Granted" in blocker.stderr

    async def main():
        async with scope(deadline_s=2) as sc:
            started = time.monotonic()
            errors = await sc.prepare(refs(slurm_cluster, ["n1", "n3"]))
            took = time.monotonic() - started
            n3 = await (await opened(sc, refs(slurm_cluster, ["n3"])[0])).run(["hostname"])
            # n1's request went on without holding n3: n1's own connection says it was not granted
            with pytest.raises(HostUnreachable) as n1:
                await opened(sc, refs(slurm_cluster, ["n1"])[0])
            pending = [j for j in slurm_cluster.jobs() if j[2] == "PENDING"]
            return errors, took, n3, n1.value, pending

    errors, took, n3, n1, pending = asyncio.run(main())
    assert errors == {}  # a busy node's request is not waited for by prepare
    assert n1.host == "n1" and "not granted within 2 s" in n1.cause
    assert took < 15
    assert n3.stdout == b"n3\n"
    assert pending == []  # the request was withdrawn
    assert [j[1] for j in slurm_cluster.jobs()] == ["someone-else"]


def test_cancel_while_the_allocation_waits_withdraws_it(slurm_cluster):
    slurm_cluster.client("salloc", "--no-shell", "--exclusive", "-w", "n1", "-J", "someone-else")

    async def run():  # a run whose only host waits for its busy node, cancelled meanwhile (Ctrl-C)
        async with scope(deadline_s=120, run_id="wait") as sc:
            await sc.prepare(refs(slurm_cluster, ["n1"]))
            await opened(sc, refs(slurm_cluster, ["n1"])[0])

    async def main():
        task = asyncio.ensure_future(run())
        deadline = time.monotonic() + 30
        while not [j for j in slurm_cluster.jobs() if j[1].startswith("fleetctl-wait-")]:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.05)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    took = asyncio.run(main())
    assert took < 15
    assert [j[1] for j in slurm_cluster.jobs()] == ["someone-else"]


CTRL_C_SCRIPT = textwrap.dedent("""\
    import asyncio, sys
    from fleetctl.connection.registry import ConnectOptions, HostRef, load_kind
    from fleetctl.connection.slurm_settings import SlurmSettings

    async def main():
        refs = [HostRef(n, SlurmSettings.model_validate({"slurm_launcher": sys.argv[1]})) for n in ("n1", "n3")]
        async with load_kind("slurm").scope(ConnectOptions(run_id="ctrlc")) as sc:
            await sc.prepare(refs)
            conns = [sc.connection(r) for r in refs]
            for c in conns:
                await c.open()
            def on_line(line):
                print(line.text, flush=True)
            await asyncio.gather(*(c.run(["/bin/sh", "-c", "echo running; exec sleep 300"], on_line=on_line)
                                   for c in conns))

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        # what is left once fleetctl's scope has unwound, before this process exits (and before
        # its lifeline could act): nothing may be pending or running
        import shlex, subprocess
        left = subprocess.run([*shlex.split(sys.argv[1]), "squeue", "-h", "-t", "PD,R,CF,S", "-o", "%i"],
                              capture_output=True, text=True).stdout.split()
        print("LEFT", left, flush=True)
        sys.exit(130)
""")


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_interrupt_or_kill_releases_the_allocation(slurm_cluster, tmp_path, how):
    script = tmp_path / "ctrlc.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), slurm_cluster.launcher_text], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "running"
        assert proc.stdout.readline().strip() == "running"
        assert len(slurm_cluster.jobs()) == 2
        proc.send_signal(signal.SIGINT if how == "SIGINT" else signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if how == "SIGINT":
        # released by the scope itself, before the process exited
        assert proc.returncode == 130, proc.stderr.read()
        assert proc.stdout.read().strip() == "LEFT []"
        assert slurm_cluster.jobs() == []
    else:
        # killed outright: the lifeline cancels the jobs
        deadline = time.monotonic() + 15
        while slurm_cluster.jobs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert slurm_cluster.jobs() == []


# -- fan-out ----------------------------------------------------------------------------------

def test_broadcast_is_one_sbcast_per_file_for_a_class(slurm_cluster, tmp_path):
    log = tmp_path / "calls"
    launcher = counting_launcher(slurm_cluster, log)
    wheel = tmp_path / "fp4_kernels-0.1-cp311-linux_x86_64.whl"
    wheel.write_bytes(os.urandom(5 * 1024 * 1024))
    dest = str(slurm_cluster.local / "wheels" / wheel.name)

    async def main():
        async with scope() as sc:
            rs = refs(slurm_cluster, launcher=launcher)
            await sc.prepare(rs)
            before = tool_calls(log)
            result = await broadcast(sc, str(wheel), dest, ["n1", "n2"])  # the sm_90 class
            return before, tool_calls(log)[len(before):], result

    before, during, result = asyncio.run(main())
    assert result == {"n1": None, "n2": None}
    assert during.count("sbcast") == 1 and during.count("srun") == 1  # one helper step for both nodes
    assert before.count("salloc") == 2  # h200 nodes together, the RTX PRO apart
    for node in ("n1", "n2"):
        assert (slurm_cluster.node_disk(node) / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    assert not (slurm_cluster.node_disk("n3") / "wheels").exists()


def test_broadcast_failing_on_one_node_reports_it_and_finishes_the_others(slurm_cluster, tmp_path):
    src = tmp_path / "f"
    src.write_bytes(b"data\n")
    # on n2's disk, the destination folder's name is taken by a file
    (slurm_cluster.node_disk("n2") / "dst").write_text("in the way")

    async def main():
        async with scope() as sc:
            await sc.prepare(refs(slurm_cluster, ["n1", "n2"]))
            return await sc.broadcast(str(src), str(slurm_cluster.local / "dst" / "f"), ["n1", "n2", "nX"])

    result = asyncio.run(main())
    assert result["n1"] is None
    assert "n2" in result["n2"] and "dst" in result["n2"]
    assert "not prepared" in result["nX"]
    assert (slurm_cluster.node_disk("n1") / "dst" / "f").read_bytes() == b"data\n"


def test_puts_of_many_hosts_share_one_sbcast_and_a_lost_node_fails_only_itself(slurm_uniform_cluster, tmp_path):
    cluster = slurm_uniform_cluster  # n1..n3 in one job
    log = tmp_path / "calls"
    launcher = counting_launcher(cluster, log)
    a = tmp_path / "a.cu"
    a.write_bytes(b"// kernel A\n" * 100)
    b = tmp_path / "b.cu"
    b.write_bytes(b"// kernel B\n" * 100)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(2 * 1024 * 1024 + 3))
    dest = str(cluster.local / "src" / "k.cu")

    async def main():
        async with scope() as sc:
            rs = refs(cluster, launcher=launcher)
            assert await sc.prepare(rs) == {}
            n1, n2, n3 = [await opened(sc, r) for r in rs]
            # the same bytes to the same path from n1 and n3 share an sbcast; n2's other bytes
            # for that same path never do
            before = tool_calls(log).count("sbcast")
            await asyncio.gather(n1.put(str(a), dest), n2.put(str(b), dest), n3.put(str(a), dest))
            mixed = tool_calls(log).count("sbcast") - before
            # n2's slurmd dies: the three nodes' helper step cannot start (srun starts a step on
            # all of its nodes or on none), so each node is tried again alone
            cluster.kill_slurmd("n2")
            before = tool_calls(log).count("sbcast")
            lost = await asyncio.gather(*(c.put(str(big), str(cluster.local / "big.bin"), mode=0o600)
                                          for c in (n1, n2, n3)), return_exceptions=True)
            return mixed, lost, tool_calls(log).count("sbcast") - before, (sc.fanout.sends, sc.fanout.puts)

    mixed, lost, after_loss, counted = asyncio.run(main())
    assert mixed == 2 and counted == (3, 6)
    for node, data in (("n1", a), ("n2", b), ("n3", a)):
        assert (cluster.node_disk(node) / "src" / "k.cu").read_bytes() == data.read_bytes(), node
    assert lost[0] is None and lost[2] is None
    assert isinstance(lost[1], TransferError) and str(lost[1]).startswith("n2: upload ")
    assert "no job step starts on node n2: Communication connection failure" in str(lost[1])  # srun named it
    for node in ("n1", "n3"):
        got = cluster.node_disk(node) / "big.bin"
        assert got.read_bytes() == big.read_bytes() and got.stat().st_mode & 0o777 == 0o600
    assert not (cluster.node_disk("n2") / "big.bin").exists()
    # the group's attempt (an sbcast only if its step started before srun learnt of n2), then n1 and n3 alone
    assert after_loss in (2, 3)
    assert cluster.jobs() == []


# -- Slurm's view and the inventory source ------------------------------------------------------------
# (facts over Slurm go through the engine: tests/test_slurm_cli_e2e.py)

def test_fetch_slurm_view(slurm_cluster):
    view = asyncio.run(fetch_slurm_view(slurm_cluster.launcher_text, ["n1", "n3", "nosuch"]))
    assert set(view) == {"n1", "n3"} and view["n1"]["state"] == "idle" and view["n3"]["features"] == ["sm_120",
                                                                                                      "rtxpro6000"]


def test_inventory_source_lists_nodes_grouped(slurm_cluster):
    env = {**os.environ, "FLEETCTL_SLURM_LAUNCHER": slurm_cluster.launcher_text}
    inv = load_slurm_inventory("slurm:", env=env)
    assert inv["slurm"]["hosts"] == ["n1", "n2", "n3"]
    assert inv["gpu"]["hosts"] == ["n1", "n2", "n3"]
    assert inv["sm_90"]["hosts"] == ["n1", "n2"] and inv["sm_120"]["hosts"] == ["n3"]
    assert inv["h200"]["hosts"] == ["n1", "n2"] and inv["gpu_rtxpro6000"]["hosts"] == ["n3"]
    assert inv["all"]["vars"] == {"ansible_connection": "slurm", "slurm_launcher": slurm_cluster.launcher_text}
    assert load_slurm_inventory("slurm:gpu", env=env)["all"]["vars"]["slurm_partition"] == "gpu"
    with pytest.raises(Exception) as err:
        load_slurm_inventory("slurm:nosuch", env=env)
    assert str(err.value) == "slurm:nosuch: sinfo lists no node in partition nosuch"
