"""A real Slurm cluster for tests: slurmctld plus one slurmd per node, each in its own namespaces.

Debian 12's slurm-wlm 22.05 (``slurmctld``, ``slurmd``, ``slurm-client``; ``.ci/run`` installs
them), run as root. The controller and the client tools live in one network namespace
(``<ns>-ctl``, address 10.200.0.1 on a bridge); every node's slurmd runs in its own network
namespace (a veth on that bridge, 10.200.0.1N), its own UTS namespace (its hostname is the node
name) and its own mount namespace, where the node's private folder ``<root>/nodes/<node>/local``
is bound onto ``<root>/local``: the same path names a different "local disk" on every node, as
node-local scratch does on a real cluster. Nothing is configured in the machine's own network
namespace, so several clusters (one per test session) can run side by side: each has its own
namespace names and folder.

The nodes get fake GPUs: ``<root>/local/bin/nvidia-smi`` on each node's private disk (see
:mod:`tests.support.fake_gpu`), put first on every task's PATH by the cluster's ``TaskProlog``
(Slurm's per-task hook: a line ``export NAME=VALUE`` it prints sets that variable for the task,
see slurm.conf(5) and Slurm's prolog/epilog guide), the way a site puts its tools on PATH. The
same hook gives every task ``HOME=<root>/local/home``: a home on the node's own disk, so tests never
touch the real ``~`` and ``~`` names a different folder on each node.

The client tools are reached through :attr:`SlurmCluster.launcher`
(``nsenter --net=/run/netns/<ns>-ctl env SLURM_CONF=<root>/slurm.conf``): exactly the command prefix
fleetctl's ``slurm_launcher`` host var takes.

Seen here: a cluster is up (3 nodes idle) in about 0.5 s. ``ip netns exec`` must not be used for
slurmd (it remounts /sys, and slurmd 22.05 then finds no /sys/fs/cgroup); ``nsenter`` keeps it.

A cluster left behind by a killed test session (its owner process gone) is stopped by the next
:func:`start_cluster`: every cluster records its owner in ``<STATE_ROOT>/<ns>/owner``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fake_gpu import H200, RTX_PRO_6000, write_fake_nvidia_smi

#: Where clusters live (one folder per cluster, named as its namespace prefix).
STATE_ROOT = Path(os.environ.get("FLEETCTL_TEST_SLURM_ROOT", "/tmp/fleetctl-test-slurm"))
DAEMONS = ("slurmctld", "slurmd", "srun", "sinfo", "salloc", "sbcast", "scontrol", "squeue", "scancel")


class SlurmUnavailable(RuntimeError):
    """Slurm's daemons or tools are missing, we are not root, or the cluster did not come up."""


@dataclass(frozen=True)
class NodeSpec:
    """One test node: its name, address, GRES type, features and fake GPUs
    (``(compute_cap, name, memory_mib)`` rows for :func:`write_fake_nvidia_smi`)."""

    name: str
    address: str
    gres_type: str
    features: tuple[str, ...]
    gpus: tuple[tuple[str, str, int], ...]
    cpus: int = 2
    memory_mib: int = 1000


#: Two arch classes: n1, n2 are H200s (SM 9.0), n3 an RTX PRO 6000 Blackwell (SM 12.0).
DEFAULT_NODES = (
    NodeSpec("n1", "10.200.0.11", "h200", ("sm_90", "h200"), (H200,)),
    NodeSpec("n2", "10.200.0.12", "h200", ("sm_90", "h200"), (H200,)),
    NodeSpec("n3", "10.200.0.13", "rtxpro6000", ("sm_120", "rtxpro6000"), (RTX_PRO_6000,)),
)

#: Three nodes of one kind (n1..n3, all H200s): one job holds them all, as it holds a partition of
#: identical GPU nodes on a real cluster (DEFAULT_NODES are two jobs: a job asks one GRES list).
UNIFORM_NODES = tuple(NodeSpec(f"n{i}", f"10.200.0.1{i}", "h200", ("sm_90", "h200"), (H200,)) for i in (1, 2, 3))


@dataclass
class SlurmCluster:
    """A running test cluster.

    Attributes:
        root: its folder (config, state, logs, node disks).
        ns: its namespace prefix (``<ns>-ctl``, ``<ns>-n1``...).
        nodes: the node specs, by name.
        partition: the one partition, holding every node (the default partition).
    """

    root: Path
    ns: str
    nodes: dict[str, NodeSpec]
    partition: str = "gpu"
    _stopped: bool = field(default=False, repr=False)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def launcher(self) -> list[str]:
        """The command prefix that runs a Slurm client tool against this cluster."""
        return ["nsenter", f"--net=/run/netns/{self.ns}-ctl", "env", f"SLURM_CONF={self.conf}"]

    @property
    def launcher_text(self) -> str:
        """:attr:`launcher` as one string (the ``slurm_launcher`` host var's form)."""
        return " ".join(self.launcher)

    @property
    def local(self) -> Path:
        """The node-local folder as the nodes see it (a different disk on each node)."""
        return self.root / "local"

    def node_disk(self, node: str) -> Path:
        """Node ``node``'s private local folder, as the controller sees it."""
        return self.root / "nodes" / node / "local"

    def client(self, *argv: str, timeout_s: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """Run one Slurm client tool (``sinfo``, ``scontrol``...) against this cluster."""
        res = subprocess.run([*self.launcher, *argv], capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
        if check and res.returncode != 0:
            raise SlurmUnavailable(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def jobs(self, name: str | None = None) -> list[tuple[str, str, str]]:
        """Jobs pending or running (``squeue -t PD,R,CF,S``) as ``(job id, name, state)``."""
        argv = ["squeue", "-h", "-t", "PD,R,CF,S", "-o", "%i|%j|%T"]
        if name:
            argv += ["-n", name]
        out = self.client(*argv).stdout
        return [tuple(line.split("|", 2)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def drain(self, node: str, reason: str) -> None:
        self.client("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume(self, node: str) -> None:
        """Back to service (a node that is not drained is left alone)."""
        self.client("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def reset(self) -> None:
        """Between tests: restart a stopped slurmd, cancel every job, resume every node, wait until
        all are idle."""
        for node in self.nodes:
            if self.slurmd_pid(node) is None:
                self.start_slurmd(node)
        self.client("scancel", "--user", "root", check=False)
        for node in self.nodes:
            self.resume(node)
        wait_idle(self, timeout_s=60)

    def slurmd_pid(self, node: str) -> int | None:
        """The pid of ``node``'s running slurmd, or ``None``."""
        try:
            pid = int((self.root / "run" / node / "slurmd.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", "") else None

    def start_slurmd(self, node: str) -> None:
        """Start ``node``'s slurmd in the node's network namespace, with its own hostname (UTS
        namespace) and its private disk bound onto ``<root>/local`` (mount namespace)."""
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run(["nsenter", f"--net=/run/netns/{self.ns}-{node}", "unshare", "--uts", "--mount",
                        "--propagation", "private", "--", "sh", "-c",
                        'hostname "$1" && mount --bind "$2" "$3" && exec slurmd -f "$4" -N "$1"',
                        "node", node, str(self.node_disk(node)), str(self.local), str(self.conf)],
                       check=True, env=env, capture_output=True)

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL ``node``'s slurmd (a node whose daemon died); :meth:`reset` starts it again."""
        pid = self.slurmd_pid(node)
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.slurmd_pid(node) is not None and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        if not self._stopped:
            stop_cluster(self.root)
            self._stopped = True


def _require_tools() -> None:
    if os.geteuid() != 0:
        raise SlurmUnavailable("the Slurm test cluster needs root (namespaces, slurmd); CI runs as root")
    missing = [t for t in DAEMONS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if missing:
        raise SlurmUnavailable("missing: " + ", ".join(missing) +
                               " (apt-get install slurmctld slurmd slurm-client iproute2 util-linux; .ci/run does)")


def _slurm_conf(root: Path, nodes: tuple[NodeSpec, ...], partition: str, extra: str = "") -> str:
    node_lines = "\n".join(
        f"NodeName={n.name} NodeAddr={n.address} CPUs={n.cpus} RealMemory={n.memory_mib} "
        f"Gres=gpu:{n.gres_type}:{len(n.gpus)} Features={','.join(n.features)} State=UNKNOWN" for n in nodes)
    names = ",".join(n.name for n in nodes)
    # auth/none and cred/none: tests only (no munge daemon to run). KillWait short so cancelled
    # steps go fast; MinJobAge short so finished jobs leave the controller's tables soon.
    return f"""\
ClusterName=fleettest
SlurmctldHost=ctl(10.200.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/run/ctld
SlurmctldPidFile={root}/run/ctld/slurmctld.pid
SlurmctldLogFile={root}/run/ctld/slurmctld.log
SlurmdSpoolDir={root}/run/%n
SlurmdPidFile={root}/run/%n/slurmd.pid
SlurmdLogFile={root}/run/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog={root}/taskprolog
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
InactiveLimit=0
KillWait=2
MinJobAge=5
GresTypes=gpu
{node_lines}
PartitionName={partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
{extra}"""


#: slurm.conf lines for a cluster whose partition ``urgent`` (same nodes, a higher PriorityTier)
#: preempts jobs of the default partition by cancelling them (slurm.conf(5), PreemptType,
#: PreemptMode; Slurm's preemption guide).
PREEMPTION = """\
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=urgent Nodes=ALL PriorityTier=10 MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def _gres_conf(nodes: tuple[NodeSpec, ...]) -> str:
    return "".join(f"NodeName={n.name} Name=gpu Type={n.gres_type} File=/dev/null Count={len(n.gpus)}\n"
                   for n in nodes)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def start_cluster(root: Path | None = None, nodes: tuple[NodeSpec, ...] = DEFAULT_NODES,
                  partition: str = "gpu", timeout_s: float = 30.0, extra_conf: str = "") -> SlurmCluster:
    """Start a cluster and wait until every node is idle.

    Args:
        root: a new folder for it (default ``STATE_ROOT/<ns>``).
        nodes: its nodes (addresses in 10.200.0.0/24).
        partition: the partition's name.
        timeout_s: how long to wait for the nodes to be idle, seconds.
        extra_conf: more slurm.conf lines (another partition, preemption: :data:`PREEMPTION`).

    Raises:
        SlurmUnavailable: tools missing, not root, or nodes not idle in time (logs in ``root/run``).
    """
    _require_tools()
    stop_leftovers()
    ns = f"flt{os.getpid()}x{time.monotonic_ns() % 100000}"
    root = Path(root) if root else STATE_ROOT / ns
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    (root / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    (root / "ns").write_text(ns + "\n")
    (root / "run" / "ctld").mkdir(parents=True, exist_ok=True)
    (root / "local").mkdir(exist_ok=True)
    for n in nodes:
        (root / "run" / n.name).mkdir(parents=True, exist_ok=True)
        write_fake_nvidia_smi(root / "nodes" / n.name / "local" / "bin", list(n.gpus))
        (root / "nodes" / n.name / "local" / "home").mkdir(exist_ok=True)
    (root / "slurm.conf").write_text(_slurm_conf(root, nodes, partition, extra_conf))
    (root / "gres.conf").write_text(_gres_conf(nodes))
    prolog = root / "taskprolog"
    # PATH: the node's fake nvidia-smi first; HOME: a home on the node's own disk, so that nothing
    # a test runs touches the real ~ (and "~" means a different folder on every node)
    prolog.write_text(f'#!/bin/sh\necho "export PATH={root}/local/bin:$PATH"\necho "export HOME={root}/local/home"\n')
    prolog.chmod(0o755)
    cluster = SlurmCluster(root=root, ns=ns, nodes={n.name: n for n in nodes}, partition=partition)
    conf = str(root / "slurm.conf")
    try:
        _ip("netns", "add", f"{ns}-ctl")
        _ip("-n", f"{ns}-ctl", "link", "set", "lo", "up")
        _ip("-n", f"{ns}-ctl", "link", "add", "br0", "type", "bridge")
        _ip("-n", f"{ns}-ctl", "addr", "add", "10.200.0.1/24", "dev", "br0")
        _ip("-n", f"{ns}-ctl", "link", "set", "br0", "up")
        for n in nodes:
            _ip("netns", "add", f"{ns}-{n.name}")
            _ip("-n", f"{ns}-{n.name}", "link", "set", "lo", "up")
            _ip("-n", f"{ns}-{n.name}", "link", "add", "eth0", "type", "veth", "peer", "name", f"v-{n.name}",
                "netns", f"{ns}-ctl")
            _ip("-n", f"{ns}-{n.name}", "addr", "add", f"{n.address}/24", "dev", "eth0")
            _ip("-n", f"{ns}-{n.name}", "link", "set", "eth0", "up")
            _ip("-n", f"{ns}-ctl", "link", "set", f"v-{n.name}", "master", "br0")
            _ip("-n", f"{ns}-ctl", "link", "set", f"v-{n.name}", "up")
        env = {**os.environ, "SLURM_CONF": conf}
        # The daemons fork into the background and write their pid files; the shell here only
        # names the host (UTS namespace) and binds the node's disk (mount namespace) first.
        subprocess.run(["nsenter", f"--net=/run/netns/{ns}-ctl", "unshare", "--uts", "--",
                        "sh", "-c", 'hostname ctl && exec slurmctld -f "$1" -i', "ctl", conf],
                       check=True, env=env, capture_output=True)
        for n in nodes:
            cluster.start_slurmd(n.name)
        wait_idle(cluster, timeout_s=timeout_s)
    except (subprocess.CalledProcessError, SlurmUnavailable) as exc:
        stop_cluster(root)
        detail = exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) \
            and exc.stderr else str(exc)
        raise SlurmUnavailable(f"test cluster did not start: {detail} (logs in {root}/run)") from None
    return cluster


def wait_idle(cluster: SlurmCluster, timeout_s: float = 30.0) -> None:
    """Poll ``sinfo`` until every node is idle.

    Raises:
        SlurmUnavailable: not all idle within ``timeout_s`` seconds (the states seen are named).
    """
    deadline = time.monotonic() + timeout_s
    states = ""
    while time.monotonic() < deadline:
        res = cluster.client("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states = res.stdout.strip() or res.stderr.strip()
        seen = dict(line.split(None, 1) for line in res.stdout.splitlines() if line.strip())
        if res.returncode == 0 and set(seen) >= set(cluster.nodes) and all(s == "idle" for s in seen.values()):
            return
        time.sleep(0.1)
    raise SlurmUnavailable(f"nodes not idle after {timeout_s:g} s: {states!r}")


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot (``/proc/PID/stat`` field 22): with the pid,
    it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(entry.name))
    return kids


def stop_cluster(root: Path) -> None:
    """Stop the cluster in ``root``: its daemons (by their pid files) and the step daemons they
    started, then its namespaces. Safe to call twice and on a half-started cluster."""
    root = Path(root)
    try:
        ns = (root / "ns").read_text().strip()
    except OSError:
        return
    pids: list[int] = []
    for pidfile in [*sorted((root / "run").glob("n*/slurmd.pid")), root / "run" / "ctld" / "slurmctld.pid"]:
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        pids.append(pid)
        if pidfile.name == "slurmd.pid":
            pids.extend(_children(pid))  # slurmstepd processes and their tasks
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
            if alive:
                time.sleep(0.05)
        if not alive:
            break
    for name in ["ctl", *(p.parent.name for p in (root / "run").glob("n*/"))]:
        subprocess.run(["ip", "netns", "del", f"{ns}-{name}"], capture_output=True)
    for entry in Path("/run/netns").glob(f"{ns}-*") if Path("/run/netns").exists() else []:
        subprocess.run(["ip", "netns", "del", entry.name], capture_output=True)
    for pidfile in (root / "run").glob("*/*.pid"):
        pidfile.unlink(missing_ok=True)
    (root / "ns").unlink(missing_ok=True)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def stop_leftovers() -> None:
    """Stop clusters under :data:`STATE_ROOT` whose owning test process is gone (a killed session)."""
    if not STATE_ROOT.exists():
        return
    for owner in STATE_ROOT.glob("*/owner"):
        try:
            pid_text, _, started = owner.read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid == os.getpid() or (Path(f"/proc/{pid}").exists() and _start_time(pid) == started):
            continue
        stop_cluster(owner.parent)
        shutil.rmtree(owner.parent, ignore_errors=True)


# -- pytest fixtures and helpers ----------------------------------------------------------------

import pytest  # noqa: E402


def _session_cluster(nodes: tuple[NodeSpec, ...]):
    try:
        cluster = start_cluster(nodes=nodes)
    except SlurmUnavailable as exc:
        pytest.fail(f"Slurm test cluster could not start: {exc}")
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster_session():
    """One test cluster for the session (started in about half a second): DEFAULT_NODES."""
    yield from _session_cluster(DEFAULT_NODES)


@pytest.fixture
def slurm_cluster(slurm_cluster_session):
    """The session's cluster, clean for this test: no job, every node idle afterwards."""
    slurm_cluster_session.reset()
    yield slurm_cluster_session
    slurm_cluster_session.reset()


@pytest.fixture(scope="session")
def slurm_uniform_cluster_session():
    """A second cluster for the session, of UNIFORM_NODES (one job holds all three nodes); it runs
    beside the first (own namespaces, own folder), started only by the tests that ask for it."""
    yield from _session_cluster(UNIFORM_NODES)


@pytest.fixture
def slurm_uniform_cluster(slurm_uniform_cluster_session):
    """The uniform cluster, clean for this test (as :func:`slurm_cluster`)."""
    slurm_uniform_cluster_session.reset()
    yield slurm_uniform_cluster_session
    slurm_uniform_cluster_session.reset()


def counting_launcher(cluster: SlurmCluster, log: Path) -> str:
    """A ``slurm_launcher`` that appends each Slurm tool call to ``log`` (one line per call: the
    arguments joined by tabs, newlines inside them turned to spaces), then runs it on ``cluster``:
    how tests count sallocs, sruns and sbcasts, and see what each sbcast sent."""
    script = log.with_suffix(".sh")
    script.write_text("#!/bin/sh\n"
                      "line=$(printf '%s\\t' \"$@\" | tr '\\n' ' ')\n"
                      f'printf "%s\\n" "$line" >> {shlex_quote(str(log))}\n'
                      f'exec {cluster.launcher_text} "$@"\n')
    script.chmod(0o755)
    log.touch()
    return str(script)


def launcher_calls(log: Path) -> list[list[str]]:
    """The calls a :func:`counting_launcher` logged, in order, each as its argv."""
    return [line.rstrip("\t").split("\t") for line in log.read_text().splitlines() if line]


def tool_calls(log: Path) -> list[str]:
    """The tool names a :func:`counting_launcher` logged, in order."""
    return [call[0] for call in launcher_calls(log)]


class FakeLoginNode:
    """A stand-in for ``ssh login01`` in front of the cluster: a script named ``ssh`` that, like
    ssh(1) and sshd, joins its arguments after the host name with spaces and hands the line to a
    shell, there inside the cluster's client namespace and a mount namespace of its own in which
    the ``hidden`` folders are empty (the controller's files are not on the login node).

    The mount namespace is held by one ``sleep`` process of ours; :meth:`stop` ends it.
    """

    def __init__(self, cluster: SlurmCluster, folder: Path, hidden: list[Path]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        mounts = " && ".join(f"mount -t tmpfs fleetctl-hidden {shlex_quote(str(h))}" for h in hidden) or "true"
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                                        f"{mounts} && echo ready && exec sleep 3600"],
                                       stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.holder.stdout is not None and self.holder.stdout.readline().strip() == b"ready"
        self.script = folder / "ssh"
        self.script.write_text(
            "#!/bin/sh\n# fake ssh to a login node (tests/support/slurm.py FakeLoginNode)\nshift\n"
            f"exec nsenter --mount=/proc/{self.holder.pid}/ns/mnt --net=/run/netns/{cluster.ns}-ctl "
            f"env SLURM_CONF={shlex_quote(str(cluster.conf))} /bin/sh -c \"$*\"\n")
        self.script.chmod(0o755)

    @property
    def launcher(self) -> str:
        return f"{self.script} login01"

    def stop(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait()


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
