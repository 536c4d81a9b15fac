#!/usr/bin/env python3
"""Slurm benchmark: fleetctl's Slurm connection against plain srun/sbcast and against SSH.

Run by hand as root, not by CI (docs/slurm.md has the numbers and what they mean at scale):

    .venv/bin/python bench/slurm_bench.py --repeats 7 --json-out bench/results/slurm_bench.json

A real Slurm 22.05 cluster of three nodes (``tests/support/slurm.py``, each slurmd in its own
namespaces, all three with the same GRES so that one allocation holds them) and three loopback
OpenSSH sshd test hosts (``tests/support/sshd.py``) on the same machine. Node disks and SSH
destinations are on tmpfs (``/dev/shm``), so disk speed is out of the comparison.

Scenarios (``--only``):

``cli``     through the real CLI, cold, a fresh ``python -m fleetctl`` each time (hermetic home):
            ``fleetctl -i slurm: run --hosts all --json -- uname -r`` against ``srun -N3 uname -r``
            and ``fleetctl -i ssh.yaml run ...`` (the 3 sshd hosts); a one-task ``copy`` playbook
            of the ``--mib`` file (``deploy --playbook push.yaml``, ``gather_facts: false``) over
            Slurm and over SSH against ``salloc -N3 sbcast FILE DEST`` (allocate, one sbcast,
            release). The copies are removed, untimed, before every call.
``run``     ``uname -r`` on the 3 nodes.
            cold: everything a ``fleetctl run`` needs: fleetctl = scope + sinfo + salloc + probe step
            + one step per host + release; ``srun -N3`` = allocation, one 3-node step, release in
            one command; SSH = connect + log in + run + close, 3 hosts at once.
            warm: the allocation (connection) is already held: fleetctl = 3 ``SlurmConnection.run``
            at once (one single-node step each); ``srun --jobid`` one 3-node step; 3 single-node
            ``srun --jobid`` at once; SSH = 3 ``SSHConnection.run`` on open connections.
``fanout``  a ``--mib`` MiB file of random bytes (a wheel does not compress) to the 3 nodes:
            fleetctl ``broadcast`` (helper step + ONE sbcast + size check and rename on each node);
            plain ``sbcast --jobid=J`` (job-wide); fleetctl ``put`` per host, 3 at once (since the
            put coalescer: one sbcast for the three; before it, 3 sbcasts);
            ``SSHConnection.put`` per host, 3 at once (3 SFTP uploads from the controller).
            Then downloads of the same file from one node (how a class's wheel comes back once):
            fleetctl ``get`` (a step's stdout) against ``srun cat > file`` and SFTP.
``tree``    a ``copy`` task's uploads: kernel_src's files to the 3 nodes, each host putting its files
            4 at once as the engine does (``PARALLEL_UPLOADS``): ``put`` (coalesced: one helper step
            and one sbcast per file for the three hosts) against the same puts as one sbcast per
            host each (``broadcast`` to that host alone: what ``put`` did before the coalescer) and
            one ``broadcast`` per file (the floor: no waiting, nothing to match). Then a lone
            ``put`` of a small file by n1, with n2 and n3 idle for a second, and while n2 and n3
            run short steps (``true``, one after another: the coalescer waits up to ``WINDOW_S``
            for them), each against ``broadcast`` to n1 alone in the same situation.
``steps``   step throughput: ``--steps`` one-node ``true`` steps, ``--concurrency`` at once, through
            ``SlurmConnection.run`` and through bare ``srun --jobid``; and the peak RSS of one
            srun client process.

Method: one untimed warm-up round, then ``--repeats`` rounds, the tools of a scenario interleaved
in a rotating order; medians are reported with ratios against the plain-Slurm peer. Every run is
checked (right output from every node, the file's bytes on every node).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetctl.connection.registry import ConnectOptions, HostRef, load_kind  # noqa: E402
from fleetctl.connection.slurm_settings import SlurmSettings  # noqa: E402
from fleetctl.connection.ssh import SSHConnection  # noqa: E402
from tests.support.fake_gpu import H200  # noqa: E402
from tests.support.slurm import NodeSpec, start_cluster  # noqa: E402
from tests.support.sshd import ensure_client_key, start_sshd  # noqa: E402

NODES = tuple(NodeSpec(f"n{i}", f"10.200.0.1{i}", "h200", ("sm_90", "h200"), (H200,)) for i in (1, 2, 3))


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(args.root)
        self.results: dict[str, dict[str, list[float]]] = {}

    # -- setup ----------------------------------------------------------------------------------

    def setup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.cluster = start_cluster(self.root / "slurm", nodes=NODES)
        key = ensure_client_key(self.root / "client")
        # each SSH host gets an empty HOME (sshd SetEnv), as in fleet_bench.py: root's real rc files
        # here run `pyenv init`, ~0.15 CPU-s per login shell, which is not what is measured
        self.sshd = []
        for i in (1, 2, 3):
            home = self.root / f"h{i}" / "home"
            home.mkdir(parents=True)
            self.sshd.append(start_sshd(f"h{i}", self.root / f"h{i}", key, env={"HOME": str(home)}))
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text("".join(h.known_hosts_line + "\n" for h in self.sshd))
        self.payload = self.root / "payload.bin"
        with open(self.payload, "wb") as fh:
            fh.write(os.urandom(self.args.mib * 1024 * 1024))
        self.refs = [HostRef(n.name, SlurmSettings.model_validate({"slurm_launcher": self.cluster.launcher_text}))
                     for n in NODES]
        self.hostlist = "n[1-3]"

    def teardown(self) -> None:
        for h in getattr(self, "sshd", []):
            h.stop()
        if hasattr(self, "cluster"):
            self.cluster.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def scope(self):
        return load_kind("slurm").scope(ConnectOptions(run_id="bench", connect_timeout_s=30))

    def ssh_conn(self, h) -> SSHConnection:
        return SSHConnection(h.name, address="127.0.0.1", port=h.port, user=h.user, key_file=str(h.client_key),
                             known_hosts=str(self.known_hosts))

    async def srun(self, *argv: str) -> bytes:
        proc = await asyncio.create_subprocess_exec(*self.cluster.launcher, *argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {err.decode()}")
        return out

    # -- measuring ------------------------------------------------------------------------------

    async def rounds(self, scenario: str, tools: dict[str, Callable[[], Awaitable[None]]],
                     pre: Callable[[], None] | None = None) -> None:
        """One untimed warm-up round, then ``--repeats`` rounds in a rotating order; ``pre`` runs
        untimed before every call (removing what the last call left, so each call does the work).
        A tool that returns a number has timed itself (seconds): that is recorded instead."""
        names = list(tools)
        for name in names:  # warm-up, untimed
            if pre:
                pre()
            await tools[name]()
        for r in range(self.args.repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                if pre:
                    pre()
                started = time.perf_counter()
                own = await tools[name]()
                took = own if isinstance(own, float) else time.perf_counter() - started
                self.results.setdefault(scenario, {}).setdefault(name, []).append(took)

    async def cold_scenario(self) -> None:
        uname = os.uname().release.encode()

        async def fleetctl_cold():
            async with self.scope() as sc:
                errors = await sc.prepare(self.refs)
                assert not errors, errors
                cs = [sc.connection(r) for r in self.refs]
                for c in cs:
                    await c.open()
                res = await asyncio.gather(*(c.run(["uname", "-r"]) for c in cs))
                assert all(r.stdout.strip() == uname for r in res)

        async def srun_cold():
            out = await self.srun("srun", "-N3", f"--nodelist={self.hostlist}", "--exclusive", "--gres=gpu:h200:1",
                                  "uname", "-r")
            assert out.split() == [uname] * 3

        async def ssh_cold():
            async def one(h):
                c = self.ssh_conn(h)
                await c.open()
                try:
                    r = await c.run(["uname", "-r"])
                    assert r.stdout.strip() == uname
                finally:
                    await c.close()
            await asyncio.gather(*(one(h) for h in self.sshd))

        await self.rounds("run_cold", {"fleetctl slurm": fleetctl_cold, "srun -N3": srun_cold,
                                       "fleetctl ssh (connection)": ssh_cold})

    async def warm_scenario(self, alloc_scope) -> None:
        uname = os.uname().release.encode()
        conns = [alloc_scope.connection(r) for r in self.refs]
        for c in conns:
            await c.open()
        job = alloc_scope.allocations[0].job_id
        ssh_open = [self.ssh_conn(h) for h in self.sshd]
        for c in ssh_open:
            await c.open()

        async def fleetctl_warm():
            res = await asyncio.gather(*(c.run(["uname", "-r"]) for c in conns))
            assert all(r.stdout.strip() == uname for r in res)

        async def srun_warm_one_step():
            out = await self.srun("srun", f"--jobid={job}", "-N3", f"--nodelist={self.hostlist}", "--overlap",
                                  "--quiet", "uname", "-r")
            assert out.split() == [uname] * 3

        async def srun_warm_three_steps():
            outs = await asyncio.gather(*(self.srun("srun", f"--jobid={job}", "-N1", "-n1", f"--nodelist={n}",
                                                    "--overlap", "--quiet", "uname", "-r") for n in ("n1", "n2", "n3")))
            assert all(o.strip() == uname for o in outs)

        async def ssh_warm():
            res = await asyncio.gather(*(c.run(["uname", "-r"]) for c in ssh_open))
            assert all(r.stdout.strip() == uname for r in res)

        await self.rounds("run_warm", {"fleetctl slurm": fleetctl_warm, "srun --jobid, 1 step": srun_warm_one_step,
                                       "srun --jobid, 3 steps": srun_warm_three_steps,
                                       "fleetctl ssh (connection)": ssh_warm})
        for c in ssh_open:
            await c.close()

    async def fanout_scenario(self, alloc_scope) -> None:
        job = alloc_scope.allocations[0].job_id
        data = self.payload.read_bytes()
        dest_node = self.cluster.local / "bench" / "wheel.whl"
        conns = [alloc_scope.connection(r) for r in self.refs]
        for c in conns:
            await c.open()
        ssh_open = [self.ssh_conn(h) for h in self.sshd]
        for c in ssh_open:
            await c.open()

        def check_nodes(path_on_node: Path) -> None:
            rel = path_on_node.relative_to(self.cluster.local)
            for n in NODES:
                got = self.cluster.node_disk(n.name) / rel
                assert got.stat().st_size == len(data) and got.read_bytes() == data, n.name
                got.unlink()

        async def fleetctl_broadcast():
            res = await alloc_scope.broadcast(str(self.payload), str(dest_node), [r.name for r in self.refs])
            assert all(v is None for v in res.values()), res
            check_nodes(dest_node)

        async def plain_sbcast():
            for n in NODES:  # sbcast does not create folders
                (self.cluster.node_disk(n.name) / "bench").mkdir(exist_ok=True)
            await self.srun("sbcast", "--force", f"--jobid={job}", str(self.payload), str(dest_node))
            check_nodes(dest_node)

        async def fleetctl_put_each():
            await asyncio.gather(*(c.put(str(self.payload), str(dest_node)) for c in conns))
            check_nodes(dest_node)

        async def ssh_put_each():
            dests = [self.root / h.name / "push" / "wheel.whl" for h in self.sshd]
            await asyncio.gather(*(c.put(str(self.payload), str(d)) for c, d in zip(ssh_open, dests)))
            for d in dests:
                assert d.stat().st_size == len(data)
                d.unlink()

        # downloads (a class's wheel comes back to the controller once): one node, the same file
        src_node = self.cluster.local / "bench" / "src.bin"
        res = await alloc_scope.broadcast(str(self.payload), str(src_node), ["n1"])
        assert res == {"n1": None}, res
        src_ssh = self.root / "h1" / "src.bin"
        shutil.copyfile(self.payload, src_ssh)
        back = self.root / "back.bin"

        async def fleetctl_get():
            await conns[0].get(str(src_node), str(back))
            assert back.stat().st_size == len(data)
            back.unlink()

        async def srun_cat():
            with open(back, "wb") as fh:
                proc = await asyncio.create_subprocess_exec(
                    *self.cluster.launcher, "srun", f"--jobid={job}", "-N1", "-n1", "--nodelist=n1", "--overlap",
                    "--quiet", "cat", str(src_node), stdout=fh, stdin=asyncio.subprocess.DEVNULL)
                assert await proc.wait() == 0
            assert back.stat().st_size == len(data)
            back.unlink()

        async def ssh_get():
            await ssh_open[0].get(str(src_ssh), str(back))
            assert back.stat().st_size == len(data)
            back.unlink()

        await self.rounds("get", {"fleetctl get (step stdout)": fleetctl_get, "srun cat > file": srun_cat,
                                  "fleetctl ssh get (SFTP)": ssh_get})

        await self.rounds("fanout", {"fleetctl broadcast (1 sbcast)": fleetctl_broadcast,
                                     "sbcast --jobid": plain_sbcast,
                                     "fleetctl put per host (coalesced)": fleetctl_put_each,
                                     "fleetctl ssh put per host (SFTP)": ssh_put_each})
        for c in ssh_open:
            await c.close()

    async def tree_scenario(self, alloc_scope) -> None:
        from fleetctl.connection import slurm_fanout

        src = REPO / "kernel_src"
        files = [(str(p), p.relative_to(src).as_posix()) for p in sorted(src.rglob("*")) if p.is_file()]
        conns = [alloc_scope.connection(r) for r in self.refs]
        for c in conns:
            await c.open()
        dest = self.cluster.local / "tree"

        def clean() -> None:
            for n in NODES:
                shutil.rmtree(self.cluster.node_disk(n.name) / "tree", ignore_errors=True)

        def check() -> None:
            for n in NODES:
                for local, rel in files:
                    got = self.cluster.node_disk(n.name) / "tree" / rel
                    assert got.read_bytes() == Path(local).read_bytes(), (n.name, rel)

        async def each_host(put_one) -> None:
            async def host(i: int) -> None:
                gate = asyncio.Semaphore(4)  # engine/executor.py PARALLEL_UPLOADS

                async def one(local: str, rel: str) -> None:
                    async with gate:
                        await put_one(i, local, str(dest / rel))

                await asyncio.gather(*(one(local, rel) for local, rel in files))

            await asyncio.gather(*(host(i) for i in range(len(conns))))

        async def put_coalesced():
            await each_host(lambda i, local, remote: conns[i].put(local, remote))
            check()

        async def sbcast_per_host():
            async def one(i, local, remote):
                res = await alloc_scope.broadcast(local, remote, [self.refs[i].name])
                assert all(v is None for v in res.values()), res
            await each_host(one)
            check()

        async def broadcast_per_file():
            gate = asyncio.Semaphore(4)

            async def one(local, rel):
                async with gate:
                    res = await alloc_scope.broadcast(local, str(dest / rel), [r.name for r in self.refs])
                    assert all(v is None for v in res.values()), res
            await asyncio.gather(*(one(local, rel) for local, rel in files))
            check()

        fan = alloc_scope.fanout
        sends, puts = fan.sends, fan.puts
        await self.rounds("tree", {"fleetctl put per host, coalesced": put_coalesced,
                                   "fleetctl put per host, 1 sbcast each (before)": sbcast_per_host,
                                   "fleetctl broadcast per file (floor)": broadcast_per_file}, pre=clean)
        rounds = self.args.repeats + 1
        self.tree_counts = {"files": len(files), "puts_per_round": (fan.puts - puts) / rounds,
                            "sbcasts_per_round": (fan.sends - sends) / rounds}
        print(f"tree: {len(files)} files x 3 hosts: {self.tree_counts['puts_per_round']:.0f} puts "
              f"-> {self.tree_counts['sbcasts_per_round']:.1f} sbcasts a round (before: one each)")

        small = REPO / "playbooks" / "scripts" / "facts.py"
        lone = self.cluster.local / "lone" / "facts.py"

        async def stepping(stop: asyncio.Event) -> None:
            async def loop(c):
                while not stop.is_set():
                    await c.run(["true"])
            await asyncio.gather(*(loop(c) for c in conns[1:]))

        async def with_steps(fn) -> float:
            """``fn``'s own time while n2 and n3 run steps (starting and stopping them untimed)."""
            stop = asyncio.Event()
            bg = asyncio.ensure_future(stepping(stop))
            await conns[1].run(["true"])  # the others are stepping before n1 asks
            started = time.perf_counter()
            await fn()
            took = time.perf_counter() - started
            stop.set()
            await bg
            return took

        async def lone_put():
            await conns[0].put(str(small), str(lone))

        async def lone_broadcast():
            res = await alloc_scope.broadcast(str(small), str(lone), ["n1"])
            assert res == {"n1": None}, res

        def idle() -> None:  # untimed: every host idle for longer than the coalescer looks back
            time.sleep(slurm_fanout.RECENT_S + 0.1)

        await self.rounds("lone_put", {"put, n2 and n3 idle": lone_put, "broadcast to n1, n2 and n3 idle": lone_broadcast,
                                       "put, n2 and n3 stepping": lambda: with_steps(lone_put),
                                       "broadcast to n1, n2 and n3 stepping": lambda: with_steps(lone_broadcast)},
                          pre=idle)

    async def steps_scenario(self, alloc_scope) -> None:
        job = alloc_scope.allocations[0].job_id
        conns = [alloc_scope.connection(r) for r in self.refs]
        for c in conns:
            await c.open()
        n, k = self.args.steps, self.args.concurrency

        async def via(fn):
            gate = asyncio.Semaphore(k)

            async def one(i):
                async with gate:
                    await fn(i)
            await asyncio.gather(*(one(i) for i in range(n)))

        async def fleetctl_steps():
            async def one(i):
                r = await conns[i % 3].run(["true"])
                assert r.rc == 0
            await via(one)

        async def srun_steps():
            await via(lambda i: self.srun("srun", f"--jobid={job}", "-N1", "-n1", f"--nodelist=n{i % 3 + 1}",
                                          "--overlap", "--quiet", "true"))

        await self.rounds("steps", {f"fleetctl {n} steps, {k} at once": fleetctl_steps,
                                    f"srun {n} steps, {k} at once": srun_steps})
        # peak RSS of one srun client (a step that lives 1 s)
        proc = subprocess.Popen([*self.cluster.launcher, "srun", f"--jobid={job}", "-N1", "-n1", "--nodelist=n1",
                                 "--overlap", "--quiet", "sleep", "1"])
        peak = 0
        while proc.poll() is None:
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.02)
        self.srun_rss_mib = peak / 1024

    # -- through the real CLI -------------------------------------------------------------------

    async def spawn(self, argv: list[str], env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
                                                    env=env, cwd=REPO)
        out, err = await proc.communicate()
        return proc.returncode, out, err

    def cli_setup(self) -> None:
        """Inventories for the CLI scenarios: ``-i slurm:`` (plus a site file) and a YAML inventory
        of the 3 sshd hosts; a hermetic controller home (records, cache, HOME, XDG) under the root."""
        home = self.root / "fleet-home"
        for sub in ("home", "state", "config", "cache"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        self.cli_env = {**os.environ, "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
                        "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
                        "HOME": str(home / "home"), "FLEETCTL_SLURM_LAUNCHER": self.cluster.launcher_text}
        self.slurm_dest = self.cluster.local / "cli" / "wheel.whl"  # node-local: one path, 3 disks
        self.site = self.root / "site.yaml"
        self.site.write_text(json.dumps({"all": {"vars": {"push_dest": str(self.slurm_dest),
                                                          "workdir": str(self.cluster.local / "work")}}}))
        hosts = {}
        for h in self.sshd:
            hosts[h.name] = {**h.inventory_vars(self.known_hosts), "push_dest": str(self.root / h.name / "cli" / "wheel.whl"),
                             "workdir": str(self.root / h.name / "work")}
        self.ssh_inv = self.root / "ssh.yaml"
        self.ssh_inv.write_text(json.dumps({"all": {"hosts": hosts}}))
        self.push_play = self.root / "push.yaml"
        self.push_play.write_text(json.dumps({
            "name": "push one wheel", "hosts": "all", "gather_facts": False,
            "tasks": [{"name": "copy the wheel", "copy": {"src": str(self.payload), "dest": "{{ push_dest }}"}}]}))

    def fleetctl_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "fleetctl", *args]

    async def cli_scenario(self) -> None:
        """``fleetctl run`` and a 50 MiB ``copy`` through the real CLI, cold: Python's start,
        the inventory (``-i slurm:`` is one sinfo), the allocation, the steps, the release and the
        run record are all in the time, as a user waits for them."""
        self.cli_setup()
        uname = os.uname().release

        def check_run(rc: int, out: bytes, err: bytes) -> None:
            assert rc == 0, err.decode()[-2000:]
            doc = json.loads(out)
            assert len(doc) == 3 and all(v["stdout"].strip() == uname for v in doc.values()), doc

        async def fleetctl_slurm_run():
            check_run(*await self.spawn(self.fleetctl_argv("-i", "slurm:", "run", "--hosts", "all", "--json", "--",
                                                           "uname", "-r"), self.cli_env))

        async def fleetctl_ssh_run():
            check_run(*await self.spawn(self.fleetctl_argv("-i", str(self.ssh_inv), "run", "--hosts", "all", "--json",
                                                           "--", "uname", "-r"), self.cli_env))

        async def srun_cold():
            out = await self.srun("srun", "-N3", f"--nodelist={self.hostlist}", "--exclusive", "--gres=gpu:h200:1",
                                  "uname", "-r")
            assert out.split() == [uname.encode()] * 3

        await self.rounds("cli_run", {"fleetctl -i slurm: run": fleetctl_slurm_run, "srun -N3": srun_cold,
                                      "fleetctl -i ssh.yaml run": fleetctl_ssh_run})

        size = self.payload.stat().st_size
        slurm_files = [self.cluster.node_disk(n.name) / self.slurm_dest.relative_to(self.cluster.local) for n in NODES]
        ssh_files = [self.root / h.name / "cli" / "wheel.whl" for h in self.sshd]

        def clean() -> None:  # copy skips a file already in place: every call must send it
            for f in slurm_files + ssh_files:
                f.unlink(missing_ok=True)
                f.parent.mkdir(parents=True, exist_ok=True)  # plain sbcast does not create folders

        def landed(files: list[Path]) -> None:
            assert all(f.stat().st_size == size for f in files), [f for f in files if not f.exists()]

        async def fleetctl_slurm_copy():
            rc, out, err = await self.spawn(self.fleetctl_argv("-i", "slurm:", "-i", str(self.site), "deploy", "--hosts",
                                                               "all", "--playbook", str(self.push_play), "--json"),
                                            self.cli_env)
            assert rc == 0, err.decode()[-2000:]
            landed(slurm_files)

        async def fleetctl_ssh_copy():
            rc, out, err = await self.spawn(self.fleetctl_argv("-i", str(self.ssh_inv), "deploy", "--hosts", "all",
                                                               "--playbook", str(self.push_play), "--json"),
                                            self.cli_env)
            assert rc == 0, err.decode()[-2000:]
            landed(ssh_files)

        async def salloc_sbcast():
            # allocate, one sbcast to the 3 nodes, release: salloc runs sbcast inside the allocation
            await self.srun("salloc", "-N3", f"--nodelist={self.hostlist}", "--exclusive", "--gres=gpu:h200:1",
                            "sbcast", "--force", str(self.payload), str(self.slurm_dest))
            landed(slurm_files)

        await self.rounds("cli_copy", {"fleetctl -i slurm: deploy copy": fleetctl_slurm_copy,
                                       "salloc -N3 sbcast": salloc_sbcast,
                                       "fleetctl -i ssh.yaml deploy copy": fleetctl_ssh_copy}, pre=clean)

    async def main(self) -> dict:
        only = set(self.args.only.split(","))
        if "cli" in only:
            await self.cli_scenario()
        if "run" in only:
            await self.cold_scenario()  # nothing held: each tool allocates for itself
        async with self.scope() as alloc_scope:
            errors = await alloc_scope.prepare(self.refs)
            assert not errors and len(alloc_scope.allocations) == 1, errors
            if "run" in only:
                await self.warm_scenario(alloc_scope)
            if "fanout" in only:
                await self.fanout_scenario(alloc_scope)
            if "tree" in only:
                await self.tree_scenario(alloc_scope)
            if "steps" in only:
                await self.steps_scenario(alloc_scope)
        return self.report()

    def report(self) -> dict:
        peers = {"run_cold": "srun -N3", "run_warm": "srun --jobid, 3 steps", "fanout": "sbcast --jobid",
                 "get": "srun cat > file", "cli_run": "srun -N3", "cli_copy": "salloc -N3 sbcast",
                 "tree": "fleetctl put per host, 1 sbcast each (before)",
                 "lone_put": "broadcast to n1, n2 and n3 idle"}
        out: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "host": {"cpus": os.cpu_count(), "kernel": os.uname().release},
                     "slurm": subprocess.run([*self.cluster.launcher, "srun", "--version"], capture_output=True,
                                             text=True).stdout.strip(),
                     "args": vars(self.args), "scenarios": {}}
        for scenario, tools in self.results.items():
            peer = peers.get(scenario) or next(t for t in tools if t.startswith("srun"))
            base = median(tools[peer])
            rows = {}
            print(f"\n{scenario}  (median of {self.args.repeats}, ratio to '{peer}')")
            for name, xs in tools.items():
                m = median(xs)
                rows[name] = {"median_s": round(m, 4), "min_s": round(min(xs), 4), "max_s": round(max(xs), 4),
                              "ratio": round(m / base, 2), "runs_s": [round(x, 4) for x in xs]}
                print(f"  {name:40s} {m * 1000:9.1f} ms   x{m / base:5.2f}")
            out["scenarios"][scenario] = {"peer": peer, "tools": rows}
        if hasattr(self, "tree_counts"):
            out["tree_counts"] = self.tree_counts
        if hasattr(self, "srun_rss_mib"):
            out["srun_client_peak_rss_mib"] = round(self.srun_rss_mib, 1)
            print(f"\none srun client process: peak RSS {self.srun_rss_mib:.1f} MiB")
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--mib", type=int, default=50)
    p.add_argument("--steps", type=int, default=90)
    p.add_argument("--concurrency", type=int, default=30)
    p.add_argument("--only", default="cli,run,fanout,tree,steps")
    p.add_argument("--root", default="/dev/shm/fleetctl-slurm-bench")
    p.add_argument("--json-out")
    args = p.parse_args()
    bench = Bench(args)
    try:
        bench.setup()
        result = asyncio.run(bench.main())
    finally:
        bench.teardown()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
