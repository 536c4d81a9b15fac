#!/usr/bin/env python3
"""Fleet-scale benchmark: fleetctl against its peers on real sshd test hosts on loopback.

Run by hand, not by CI (bench/README.md has the exact commands and the numbers measured):

    .venv/bin/python bench/fleet_bench.py --hosts 20,50 --repeats 5 --only run,facts,push

Peers (ansible-core, pyinfra) come from ``--peers-venv`` (default /tmp/fleet-bench-peers); a
missing one is skipped. The fleetctl under test is a ``git archive`` snapshot of HEAD unless
``--fleetctl-src worktree``.

Every test host is its own OpenSSH ``sshd`` on 127.0.0.1 (``tests/support/sshd.py``, one port and
host key each, all logging in as the current user), configured with ``MaxStartups 100`` unless
``--maxstartups default``. Host keys are checked everywhere against one generated known_hosts file
(``StrictHostKeyChecking=yes`` for OpenSSH and Ansible, ``known_hosts=`` for asyncssh and fleetctl,
``ssh_known_hosts_file`` for pyinfra).

Scenarios (``--only``):

``run``      ``uname -r`` on each size of ``--hosts``: ``fleetctl run``, a minimal asyncssh script
             (the floor for a Python tool, ``bench/asyncssh_floor.py``), ``ansible -m raw`` and
             ``-m command`` (``-f`` = host count), ``pyinfra exec``.
``facts``    facts on ``--facts-hosts`` hosts: ``fleetctl facts --json`` against ``ansible -m setup``
             and the asyncssh floor (the same facts script, no kept answers); fleetctl also with
             its kept answers removed before each run (``nothing kept``: every program asked),
             with a torch venv (``+torch``) and, with ``--before REV``, that revision's.
``push``     a ``--push-mib`` MiB file of random bytes (a wheel does not compress) to ``--push-hosts``
             hosts: fleetctl's ``SSHConnection.put`` (``bench/push_driver.py``, one connection per
             host, all at once), ``fleetctl deploy`` of a one-task ``copy`` playbook
             (gather_facts: false), a sequential loop of OpenSSH ``scp``, and the same scp's run
             all at once (for reference).
``overhead`` ``fleetctl run`` against the floor with fleetctl's extras added one at a time
             (its imports, its remote supervisor, the SFTP realpath its ``open()`` does, known_hosts
             parsed once), on the largest ``--hosts`` size: where fleetctl's extra time goes.
``pushmem``  fleetctl's put against fewer SFTP requests in flight (``max_requests``) or fewer
             uploads at once: the controller memory each costs.
``startups`` what sshd's default ``MaxStartups 10:30:100`` does to 50 simultaneous logins when they
             all go to ONE sshd, against ``MaxStartups 100`` (host failures counted, not timed).

Method: the tools of one scenario run side by side in one process, interleaved (one round of
every tool per repeat, the order rotated each round), after one untimed warm-up round; medians
are reported. Per run:

- ``wall_s``: from spawn to exit of the tool's process (perf_counter).
- ``tree_peak_mib``: peak of the summed RSS of the tool's whole process tree (the tool, its
  forks, its ssh children, and daemons it leaves behind such as Ansible's ControlPersist masters:
  this script is a child subreaper so they stay in the tree), by polling /proc every
  ``--poll-ms`` ms. Summed RSS counts pages shared between forks once per process, so for
  Ansible's forks it overstates real use.
- ``proc_peak_mib``: the largest single process's peak RSS, exact, from wait4's ``ru_maxrss``
  (what ``/usr/bin/time -v`` prints as "Maximum resident set size").
- ``ctl_cpu_s``: user+system CPU of the tool and its waited-for children (wait4).
- ``remote_cpu_s``: user+system CPU the test hosts' sshd processes and the commands they ran
  spent (the sshd listeners' cutime+cstime, read before and after). On loopback the "remote"
  side shares the controller's 2 cores, so it is part of the wall time here; on a real fleet it
  runs on the hosts.

Each run is checked (exit status and one correct answer per host); a failed run is reported and
kept out of the medians.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402  (fleetctl's venv has it)

from tests.support.sshd import SshdHost, ensure_client_key, start_sshd  # noqa: E402

VENV = REPO / ".venv"
FLEETCTL = VENV / "bin" / "fleetctl"
VENV_PY = VENV / "bin" / "python"
PAGE = os.sysconf("SC_PAGE_SIZE")
CLK = os.sysconf("SC_CLK_TCK")
KERNEL = os.uname().release
MIB = 1 << 20


#: Where the pushed copies land (one folder per host); set from --push-dest.
PUSH_DEST: Path | None = None

#: Environment for every process that imports fleetctl: PYTHONPATH to the snapshot under test.
FLEET_ENV: dict[str, str] = {}

#: ``--compare-rev``: (revision, its byte-compiled snapshot), run as ``fleetctl run @REV`` beside the
#: fleetctl under test, so that before and after share one run's load.
COMPARE: tuple[str, Path] | None = None


def fleet_env(root: Path) -> dict[str, str]:
    return {"FLEETCTL_HOME": str(root / "fleetctl-home"), **FLEET_ENV}


def snapshot_fleetctl(root: Path, which: str) -> str:
    """Pin the fleetctl under test. ``HEAD``: the committed tree, exported with ``git archive`` and
    put first on PYTHONPATH (tools run outside the checkout, so it wins over the editable install),
    so edits other people make to the working tree during a run change nothing. ``worktree``: the
    checkout as it is (editable install). Returns a description for the results file."""
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    if which == "worktree":  # byte-compiled as in export_tree (the .pyc files are git-ignored)
        subprocess.run([str(VENV_PY), "-m", "compileall", "-q", str(REPO / "fleetctl")], check=True,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--short", "--", "fleetctl", "playbooks"],
                               capture_output=True, text=True).stdout.split("\n")
        dirty = [d.strip() for d in dirty if d.strip()]
        return f"worktree at {rev}" + (f" with uncommitted changes: {', '.join(dirty)}" if dirty else " (clean)")
    dest = root / "fleetctl-src"
    shutil.rmtree(dest, ignore_errors=True)
    export_tree("HEAD", dest)
    FLEET_ENV["PYTHONPATH"] = str(dest)
    return f"git HEAD {rev} (snapshot in {dest})"


def export_tree(rev: str, dest: Path) -> Path:
    """``git archive REV fleetctl playbooks`` into ``dest``, byte-compiled as an installed package is
    (this machine's shells set PYTHONDONTWRITEBYTECODE=1: without .pyc files every run would compile
    fleetctl from source, 0.15 CPU-s that no installed fleetctl pays)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "fleetctl", "playbooks"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run([str(VENV_PY), "-m", "compileall", "-q", str(dest / "fleetctl")], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    return dest


# -- process accounting -------------------------------------------------------------------------

def set_child_subreaper() -> None:
    """Orphans of our children (daemonized ssh ControlPersist masters) become our children."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].decode().split()


def process_table() -> dict[int, int]:
    """pid -> ppid for every process."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = _stat_fields(int(name))
            if f:
                out[int(name)] = int(f[1])
    return out


def descendants(root: int, table: dict[int, int], exclude: set[int]) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in exclude:
                out.append(child)
                todo.append(child)
    return out


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class TreePoller(threading.Thread):
    """Polls the summed RSS of this process's descendants, less the sshd test hosts."""

    def __init__(self, exclude: set[int], interval_s: float) -> None:
        super().__init__(daemon=True)
        self.exclude, self.interval_s = exclude, interval_s
        self.peak = 0
        self.stop_ev = threading.Event()

    def sample(self) -> None:
        pids = descendants(os.getpid(), process_table(), self.exclude)
        self.peak = max(self.peak, sum(rss_bytes(p) for p in pids))

    def run(self) -> None:
        while not self.stop_ev.is_set():
            self.sample()
            self.stop_ev.wait(self.interval_s)


def sshd_cpu_s(hosts: list[SshdHost]) -> float:
    """CPU seconds of the sshd listeners and everything they reaped (sessions and their commands)."""
    ticks = 0
    for h in hosts:
        f = _stat_fields(h.proc.pid) if h.proc else None
        if f:
            ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return ticks / CLK


def busy_cpu_s() -> float:
    """Machine-wide busy CPU seconds so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / CLK


def wait_sessions_closed(hosts: list[SshdHost], timeout_s: float = 5.0) -> None:
    """Until no sshd listener has a session child left (so its CPU is counted), or timeout."""
    listeners = {h.proc.pid for h in hosts if h.proc}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(ppid in listeners for ppid in process_table().values()):
            return
        time.sleep(0.05)


# -- one measured run ---------------------------------------------------------------------------

@dataclass
class Tool:
    """One contender in a scenario: how to run it once and how to tell it worked."""

    name: str
    argv: list[str]
    check: Callable[[int, str, str], str | None]  # (rc, stdout, stderr) -> error or None
    env: dict[str, str] = field(default_factory=dict)
    pre: Callable[[], None] | None = None
    post: Callable[[], str | None] | None = None  # extra check after the run (remote state)
    fresh_env: Callable[[], dict[str, str]] | None = None  # per-run env additions


@dataclass
class Bench:
    root: Path
    hosts: list[SshdHost]
    poll_s: float
    sshd_pids: set[int] = field(default_factory=set)

    def measure(self, tool: Tool, cwd: Path) -> dict:
        if tool.pre:
            tool.pre()
        env = {**os.environ, **tool.env, **(tool.fresh_env() if tool.fresh_env else {})}
        out_path, err_path = self.root / "last.out", self.root / "last.err"
        wait_sessions_closed(self.hosts)
        cpu0, busy0, load0 = sshd_cpu_s(self.hosts), busy_cpu_s(), os.getloadavg()[0]
        poller = TreePoller(self.sshd_pids, self.poll_s) if self.poll_s > 0 else None
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(tool.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=cwd)
            if poller:
                poller.start()
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if poller:
            poller.sample()  # daemons the tool left behind are still alive here
            poller.stop_ev.set()
            poller.join()
        busy = busy_cpu_s() - busy0
        left, daemon_cpu = self.kill_daemons()
        wait_sessions_closed(self.hosts)
        orphan_cpu = self.reap_orphans()
        remote = sshd_cpu_s(self.hosts) - cpu0 + orphan_cpu
        ctl_cpu = ru.ru_utime + ru.ru_stime + daemon_cpu
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        error = tool.check(proc.returncode, stdout, stderr)
        if error is None and tool.post:
            error = tool.post()
        res = {
            "wall_s": round(wall, 4),
            "tree_peak_mib": round(poller.peak / MIB, 1) if poller else None,
            "proc_peak_mib": round(ru.ru_maxrss / 1024, 1),
            "ctl_cpu_s": round(ctl_cpu, 3),
            "remote_cpu_s": round(remote, 3),
            "machine_busy_cpu_s": round(busy, 3),
            "other_cpu_s": round(busy - ctl_cpu - remote, 3),
            "load1_before": round(load0, 2),
            "rc": proc.returncode,
            "ok": error is None,
        }
        if left:
            res["ssh_daemons_left"] = left
        if error:
            res["error"] = error[:2000]
        return res

    def kill_daemons(self) -> tuple[int, float]:
        """Terminate and reap the ssh processes a tool left running (Ansible's ControlPersist
        masters, reparented to us); returns their count and CPU seconds (controller side)."""
        table = process_table()
        daemons = [p for p in descendants(os.getpid(), table, self.sshd_pids) if _comm(p) == "ssh"]
        cpu = 0.0
        for pid in daemons:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in daemons:
            try:
                _, _, ru = os.wait4(pid, 0)
                cpu += ru.ru_utime + ru.ru_stime
            except ChildProcessError:
                pass
        return len(daemons), cpu

    def reap_orphans(self, timeout_s: float = 5.0) -> float:
        """Reap test-host processes that outlived their sshd session and were reparented to us
        (the remote command supervisor's ``cat``, a shell...); returns their CPU seconds."""
        cpu = 0.0
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pid, _, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                cpu += ru.ru_utime + ru.ru_stime
                continue
            if not descendants(os.getpid(), process_table(), self.sshd_pids) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        return cpu


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


# -- checks -------------------------------------------------------------------------------------

def _tail(text: str, n: int = 600) -> str:
    return text[-n:].strip().replace("\n", " \\n ")


def check_count(expected: int, needle: str) -> Callable[[int, str, str], str | None]:
    def check(rc: int, out: str, err: str) -> str | None:
        got = out.count(needle)
        if rc != 0 or got != expected:
            return f"rc={rc}, {got}/{expected} hosts answered; stdout: {_tail(out)} stderr: {_tail(err)}"
        return None
    return check


def check_fleetctl_run(expected: int):
    def check(rc: int, out: str, err: str) -> str | None:
        try:
            doc = json.loads(out)
        except ValueError:
            return f"rc={rc}, no JSON; stderr: {_tail(err)}"
        good = sum(1 for r in doc.values() if r.get("rc") == 0 and r.get("stdout", "").strip() == KERNEL)
        bad = {h: r.get("error") for h, r in doc.items() if r.get("rc") != 0}
        if rc != 0 or good != expected:
            return f"rc={rc}, {good}/{expected} ok; failures: {json.dumps(dict(list(bad.items())[:5]))}"
        return None
    return check


def check_fleetctl_facts(expected: int, torch: bool = False):
    def check(rc: int, out: str, err: str) -> str | None:
        try:
            doc = json.loads(out)
        except ValueError:
            return f"rc={rc}, no JSON; stderr: {_tail(err)}"
        good = sum(1 for f in doc.values() if f.get("reachable") and f.get("cpu_count") and "error" not in f
                   and (not torch or (f.get("python") or {}).get("torch")))
        if rc != 0 or good != expected:
            bad = {h: f.get("error") for h, f in doc.items() if "error" in f or not f.get("reachable")}
            return f"rc={rc}, {good}/{expected} ok; failures: {json.dumps(dict(list(bad.items())[:5]))}"
        return None
    return check


def check_pyinfra(expected: int):
    def check(rc: int, out: str, err: str) -> str | None:
        text = out + err
        got = sum(1 for line in text.splitlines() if KERNEL in line and line.lstrip().startswith("["))
        if rc != 0 or got < expected:
            return f"rc={rc}, {got}/{expected} hosts answered; output: {_tail(text)}"
        return None
    return check


# -- fleet setup --------------------------------------------------------------------------------

def start_fleet(root: Path, count: int, maxstartups: str, login_env: str = "clean") -> tuple[list[SshdHost], Path, Path]:
    """``count`` sshd test hosts. ``login_env="clean"`` gives each session its own empty HOME
    (sshd ``SetEnv HOME=...``), so the login shell reads no rc file: this machine's root
    ``~/.bashrc`` runs ``pyenv init`` (about 0.2 CPU-s per session, racy under 50 concurrent logins)
    and puts a torch-carrying python3 first on PATH. ``"user"`` keeps the real home and rc files."""
    key = ensure_client_key(root / "client")
    extra = "" if maxstartups == "default" else f"MaxStartups {maxstartups}"
    hosts = []
    for i in range(count):
        name = f"h{i + 1:02d}"
        env = None
        if login_env == "clean":
            home = root / "hosts" / name / "home"
            home.mkdir(parents=True, exist_ok=True)
            env = {"HOME": str(home)}
        hosts.append(start_sshd(name, root / "hosts" / name, key, env=env, extra_config=extra))
    kh = root / "known_hosts"
    kh.write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    return hosts, key, kh


def write_inventories(root: Path, hosts: list[SshdHost], key: Path, kh: Path, n: int, tag: str = "") -> dict[str, Path]:
    """fleetctl YAML (plain, and with ``venv`` = fleetctl's own torch-carrying venv), Ansible INI,
    pyinfra Python and floor JSON inventories for the first n hosts."""
    sel = hosts[:n]
    names = [h.name for h in sel] if not tag else [f"{tag}{i + 1:02d}" for i in range(n)]
    d = root / f"inv{tag}{n}"
    d.mkdir(parents=True, exist_ok=True)
    fleet = {"all": {"children": {"bench": {"hosts": {nm: h.inventory_vars(kh) for nm, h in zip(names, sel)}}}}}
    (d / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    fleet["all"]["vars"] = {"venv": str(VENV)}
    (d / "fleet_torch.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    ini = ["[bench]"] + [f"{nm} ansible_host=127.0.0.1 ansible_port={h.port}" for nm, h in zip(names, sel)]
    ini += ["", "[bench:vars]", f"ansible_user={sel[0].user}", f"ansible_ssh_private_key_file={key}",
            f"ansible_ssh_common_args='-o UserKnownHostsFile={kh} -o StrictHostKeyChecking=yes'",
            "ansible_python_interpreter=/usr/bin/python3", ""]
    (d / "ansible.ini").write_text("\n".join(ini))
    py = ["bench = ["] + [
        f"    ({nm!r}, {{'ssh_hostname': '127.0.0.1', 'ssh_port': {h.port}, 'ssh_user': {h.user!r}, "
        f"'ssh_key': {str(key)!r}, 'ssh_known_hosts_file': {str(kh)!r}, 'ssh_strict_host_key_checking': 'yes'}}),"
        for nm, h in zip(names, sel)] + ["]", ""]
    (d / "pyinfra_inventory.py").write_text("\n".join(py))
    floor = [{"name": nm, "host": "127.0.0.1", "port": h.port, "user": h.user, "key": str(key),
              "known_hosts": str(kh)} for nm, h in zip(names, sel)]
    (d / "hosts.json").write_text(json.dumps(floor, indent=1))
    return {"fleet": d / "fleet.yaml", "fleet_torch": d / "fleet_torch.yaml", "ini": d / "ansible.ini", "pyinfra": d / "pyinfra_inventory.py",
            "floor": d / "hosts.json", "dir": d}


def ansible_env(root: Path, forks: int) -> tuple[dict[str, str], Callable[[], dict[str, str]]]:
    cfg = root / f"ansible-{forks}.cfg"
    cfg.write_text(f"""[defaults]
forks = {forks}
host_key_checking = True
retry_files_enabled = False
interpreter_python = /usr/bin/python3
nocolor = True
""")
    def fresh() -> dict[str, str]:
        # A fresh ControlPath folder per run: every run starts cold (no ControlPersist master left).
        (root / "ansible-cp").mkdir(exist_ok=True)
        cp = tempfile.mkdtemp(prefix="cp", dir=root / "ansible-cp")
        return {"ANSIBLE_SSH_CONTROL_PATH_DIR": cp}

    env = {"ANSIBLE_CONFIG": str(cfg), "ANSIBLE_HOME": str(root / "ansible-home"),
           "ANSIBLE_LOCAL_TEMP": str(root / "ansible-local"), "ANSIBLE_NOCOLOR": "1"}
    return env, fresh


# -- scenarios ----------------------------------------------------------------------------------

def run_tools(root: Path, invs: dict[str, Path], n: int, peers: Path) -> list[Tool]:
    aenv, afresh = ansible_env(root, n)
    fl_env = fleet_env(root)
    tools = [
        Tool("fleetctl run", [str(FLEETCTL), "-i", str(invs["fleet"]), "run", "--hosts", "bench", "--json",
                              "--forks", str(n), "--", "uname", "-r"], check_fleetctl_run(n), env=fl_env),
        Tool("asyncssh floor", [str(VENV_PY), str(REPO / "bench" / "asyncssh_floor.py"), str(invs["floor"]),
                                "--", "uname", "-r"], check_count(n, f" | {KERNEL}"), env=fleet_env(root)),
    ]
    if COMPARE is not None:
        tools.append(Tool(f"fleetctl run @{COMPARE[0]}", tools[0].argv, check_fleetctl_run(n),
                          env={**fl_env, "PYTHONPATH": str(COMPARE[1])}))
    if (peers / "bin" / "ansible").exists():
        for mod in ("raw", "command"):
            tools.append(Tool(f"ansible -m {mod}", [str(peers / "bin" / "ansible"), "-i", str(invs["ini"]), "bench",
                                                    "-m", mod, "-a", "uname -r", "-f", str(n)],
                              check_count(n, "rc=0 >>"), env=aenv, fresh_env=afresh))
    if (peers / "bin" / "pyinfra").exists():
        tools.append(Tool("pyinfra exec", [str(peers / "bin" / "pyinfra"), "-y", "--parallel", str(n),
                                           str(invs["pyinfra"]), "exec", "--", "uname", "-r"],
                          check_pyinfra(n)))
    return tools


#: ``--before REV``: the fleetctl of that revision is measured beside HEAD's (facts), its PYTHONPATH.
BEFORE: dict[str, str] = {}


def forget_kept_answers(root: Path) -> None:
    """Remove every test host's kept facts answers (``<workdir>/state/facts-cache.json``): the next
    ``fleetctl facts`` asks every program, as on a host it never saw or one where all changed."""
    for path in (root / "hosts").glob("*/home/.fleetctl/*/state/facts-cache.json"):
        path.unlink(missing_ok=True)


def facts_tools(root: Path, invs: dict[str, Path], n: int, peers: Path) -> list[Tool]:
    aenv, afresh = ansible_env(root, n)
    fl_env = fleet_env(root)
    argv = [str(FLEETCTL), "-i", str(invs["fleet"]), "facts", "--hosts", "bench", "--json", "--forks", str(n)]
    tools = [Tool("fleetctl facts", argv, check_fleetctl_facts(n), env=fl_env),
             Tool("fleetctl facts, nothing kept", argv, check_fleetctl_facts(n), env=fl_env,
                  pre=lambda: forget_kept_answers(root)),
             Tool("fleetctl facts +torch", [str(FLEETCTL), "-i", str(invs["fleet_torch"]), "facts", "--hosts", "bench",
                                            "--json", "--forks", str(n)], check_fleetctl_facts(n, torch=True),
                  env=fl_env)]
    for rev, path in BEFORE.items():
        tools.append(Tool(f"fleetctl facts [{rev}]", argv, check_fleetctl_facts(n),
                          env={**fl_env, "PYTHONPATH": path}))
    tools.append(Tool("asyncssh facts floor", [str(VENV_PY), str(REPO / "bench" / "asyncssh_floor.py"), str(invs["floor"]),
                                               "--stdin", str(REPO / "playbooks" / "scripts" / "facts.py"), "--",
                                               "python3", "-", "--workdir", "/tmp"],
                      check_count(n, '"script_version": '), env=fleet_env(root)))
    if (peers / "bin" / "ansible").exists():
        tools.append(Tool("ansible -m setup", [str(peers / "bin" / "ansible"), "-i", str(invs["ini"]), "bench",
                                               "-m", "setup", "-f", str(n)],
                          check_count(n, "| SUCCESS =>"), env=aenv, fresh_env=afresh))
    return tools


def overhead_tools(root: Path, invs: dict[str, Path], n: int) -> list[Tool]:
    """fleetctl run against the floor with fleetctl's extras added one at a time."""
    floor = [str(VENV_PY), str(REPO / "bench" / "asyncssh_floor.py")]
    cmd = ["--", "uname", "-r"]
    ok = check_count(n, f" | {KERNEL}")
    tools = [Tool("fleetctl run", [str(FLEETCTL), "-i", str(invs["fleet"]), "run", "--hosts", "bench", "--json",
                                   "--forks", str(n), "--", "uname", "-r"], check_fleetctl_run(n),
                  env=fleet_env(root))]
    for label, flags in (("floor", []), ("floor +known_hosts once", ["--known-hosts-once"]),
                         ("floor +fleetctl imports", ["--import-fleetctl"]),
                         ("floor +supervisor", ["--supervise"]), ("floor +sftp realpath", ["--sftp-realpath"]),
                         ("floor +all three", ["--import-fleetctl", "--supervise", "--sftp-realpath"])):
        tools.append(Tool(label, floor + flags + [str(invs["floor"])] + cmd, ok, env=fleet_env(root)))
    return tools


def pushmem_tools(root: Path, invs: dict[str, Path], hosts: list[SshdHost], key: Path, kh: Path, n: int,
                  mib: int) -> list[Tool]:
    """fleetctl's put as it is, against fewer SFTP requests in flight or fewer uploads at once."""
    base = push_tools(root, invs, hosts, key, kh, n, mib)
    put = base[0]
    out = [put]
    for label, flags in (("put max_requests=4", ["--max-requests", "4"]),
                         ("put max_requests=8", ["--max-requests", "8"]),
                         ("put 8 at once", ["--parallel", "8"]),
                         ("put 4 at once", ["--parallel", "4"])):
        argv = put.argv[:2] + flags + put.argv[2:]
        out.append(Tool(label, argv, put.check, env=put.env, pre=put.pre, post=put.post))
    out.append(base[2])  # the scp loop, for reference
    return out


def push_tools(root: Path, invs: dict[str, Path], hosts: list[SshdHost], key: Path, kh: Path, n: int,
               mib: int) -> list[Tool]:
    payload = root / "payload" / "bench_pkg-1.0-cp311-cp311-linux_x86_64.whl"
    if not payload.exists() or payload.stat().st_size != mib * MIB:
        payload.parent.mkdir(parents=True, exist_ok=True)
        with open(payload, "wb") as fh:
            for _ in range(mib):
                fh.write(os.urandom(MIB))
    dest = PUSH_DEST or root / "pushed"
    names = [h.name for h in hosts[:n]]

    def pre() -> None:
        shutil.rmtree(dest, ignore_errors=True)
        for nm in names:
            (dest / nm).mkdir(parents=True)
        subprocess.run(["sync"], check=True)  # no writeback of the last run's gigabyte during this one

    def post() -> str | None:
        bad = [nm for nm in names if not (dest / nm / payload.name).exists()
               or (dest / nm / payload.name).stat().st_size != payload.stat().st_size]
        return f"{len(bad)} hosts lack the full file: {bad[:5]}" if bad else None

    ok_lines = check_count(n, " | ok")
    playbook = root / "push.yaml"
    playbook.write_text(yaml.safe_dump({
        "name": "push one wheel", "hosts": "bench", "gather_facts": False,
        "tasks": [{"name": "copy the wheel", "copy": {"src": str(payload),
                                                       "dest": f"{dest}/{{{{ host }}}}/{payload.name}"}}],
    }, sort_keys=False))
    loop = root / "scp_loop.sh"
    par = root / "scp_parallel.sh"
    opts = f"-q -i {key} -o UserKnownHostsFile={kh} -o StrictHostKeyChecking=yes -o BatchMode=yes"
    lines = [f"scp {opts} -P {h.port} {payload} {h.user}@127.0.0.1:{dest}/{h.name}/{payload.name}"
             for h in hosts[:n]]
    loop.write_text("#!/bin/bash\nset -e\n" + "\n".join(lines) + "\n")
    par.write_text("#!/bin/bash\nset -e\npids=()\n" + "".join(f"{ln} & pids+=($!)\n" for ln in lines)
                   + 'for p in "${pids[@]}"; do wait "$p"; done\n')
    fl_env = fleet_env(root)
    rc0 = lambda rc, out, err: None if rc == 0 else f"rc={rc}: {_tail(err)}"  # noqa: E731
    return [
        Tool("fleetctl put (driver)", [str(VENV_PY), str(REPO / "bench" / "push_driver.py"), str(invs["fleet"]),
                                       "bench", str(payload), str(dest)], ok_lines, env=fl_env, pre=pre, post=post),
        Tool("fleetctl deploy copy", [str(FLEETCTL), "-i", str(invs["fleet"]), "deploy", "--hosts", "bench",
                                      "--playbook", str(playbook), "--forks", str(n), "--json"],
             rc0, env=fl_env, pre=pre, post=post),
        Tool("scp loop", ["bash", str(loop)], rc0, pre=pre, post=post),
        Tool("scp parallel", ["bash", str(par)], rc0, pre=pre, post=post),
    ]


# -- driver -------------------------------------------------------------------------------------

def median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 4) if xs else None


def run_scenario(bench: Bench, label: str, tools: list[Tool], repeats: int, cwd: Path, log) -> dict:
    log(f"== {label}: {', '.join(t.name for t in tools)}")
    runs: dict[str, list[dict]] = {t.name: [] for t in tools}
    warm: dict[str, dict] = {}
    for t in tools:  # untimed warm-up round: page cache, .pyc files, and a correctness check
        warm[t.name] = bench.measure(t, cwd)
        log(f"   warm-up {t.name:24} {warm[t.name]['wall_s']:8.3f} s  {'ok' if warm[t.name]['ok'] else 'FAILED: ' + warm[t.name].get('error', '')}")
    for r in range(repeats):
        order = tools[r % len(tools):] + tools[:r % len(tools)]
        for t in order:
            res = bench.measure(t, cwd)
            runs[t.name].append(res)
            log(f"   run {r + 1}/{repeats} {t.name:24} {res['wall_s']:8.3f} s  tree {res['tree_peak_mib']} MiB  "
                f"{'ok' if res['ok'] else 'FAILED: ' + res.get('error', '')}")
    summary = {}
    for t in tools:
        good = [x for x in runs[t.name] if x["ok"]]
        summary[t.name] = {
            "ok_runs": len(good), "runs": len(runs[t.name]),
            **{k: median([x[k] for x in good]) for k in ("wall_s", "tree_peak_mib", "proc_peak_mib", "ctl_cpu_s",
                                                           "remote_cpu_s", "other_cpu_s")},
            "wall_min_s": min((x["wall_s"] for x in good), default=None),
            "wall_max_s": max((x["wall_s"] for x in good), default=None),
        }
    return {"label": label, "tools": [t.name for t in tools], "argv": {t.name: t.argv for t in tools},
            "warmup": warm, "runs": runs, "summary": summary}


def startups_probe(root: Path, n: int, log) -> dict:
    """n inventory hosts that are all ONE sshd: default MaxStartups against MaxStartups 100."""
    out = {}
    key = ensure_client_key(root / "client")
    for setting in ("default", "100"):
        extra = "" if setting == "default" else f"MaxStartups {setting}"
        home = root / "hosts" / f"one-{setting}" / "home"
        home.mkdir(parents=True, exist_ok=True)
        h = start_sshd(f"one-{setting}", root / "hosts" / f"one-{setting}", key, env={"HOME": str(home)},
                       extra_config=extra)
        kh = root / f"known_hosts-one-{setting}"
        kh.write_text(h.known_hosts_line + "\n")
        try:
            invs = write_inventories(root, [h] * n, key, kh, n, tag=f"s{setting}-")
            res = {}
            for tool, argv in (
                ("fleetctl run", [str(FLEETCTL), "-i", str(invs["fleet"]), "run", "--hosts", "bench", "--json",
                                  "--forks", str(n), "--", "uname", "-r"]),
                ("asyncssh floor", [str(VENV_PY), str(REPO / "bench" / "asyncssh_floor.py"), str(invs["floor"]),
                                    "--", "uname", "-r"]),
            ):
                fails = []
                for _ in range(3):
                    p = subprocess.run(argv, capture_output=True, text=True, cwd=root,
                                       env={**os.environ, **fleet_env(root)})
                    if tool == "fleetctl run":
                        try:
                            doc = json.loads(p.stdout)
                            failed = {k: v for k, v in doc.items() if v.get("rc") != 0}
                        except ValueError:
                            failed = {"all": p.stderr[-300:]}
                        fails.append(len(failed))
                        sample = next(iter(failed.values()), {})
                    else:
                        failed = [ln for ln in p.stdout.splitlines() if "UNREACHABLE" in ln]
                        fails.append(len(failed))
                        sample = failed[0] if failed else None
                res[tool] = {"failed_hosts_per_try": fails, "sample_error": sample}
                log(f"   one sshd, MaxStartups {setting}: {tool}: failed hosts per try {fails}  e.g. {sample}")
            dropped = h.log.count("drop connection") + h.log.count("beginning MaxStartups throttling")
            res["sshd_log_maxstartups_lines"] = dropped
            out[setting] = res
        finally:
            h.stop()
    return out


def versions(peers: Path) -> dict:
    def cmd(argv: list[str]) -> str:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            return (p.stdout or p.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired) as exc:
            return f"unavailable ({exc})"
    return {
        "fleetctl_git": cmd(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "python": sys.version.split()[0],
        "asyncssh": cmd([str(VENV_PY), "-c", "import asyncssh; print(asyncssh.__version__)"]),
        "ansible-core": cmd([str(peers / "bin" / "ansible"), "--version"]),
        "pyinfra": cmd([str(peers / "bin" / "pyinfra"), "--version"]),
        "openssh": cmd(["ssh", "-V"]),
        "cpus": os.cpu_count(),
        "kernel": KERNEL,
    }


def fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def print_tables(results: dict, targets: list[dict]) -> str:
    lines = []
    head = f"{'scenario':11} {'tool':24} {'ok':>5} {'wall s':>8} {'min':>7} {'max':>7} {'tree MiB':>9} " \
           f"{'proc MiB':>9} {'ctl cpu':>8} {'host cpu':>8} {'vs fleetctl':>11}"
    lines += [head, "-" * len(head)]
    for sc in results["scenarios"]:
        s = sc["summary"]
        base = next(iter(s.values()))["wall_s"]
        for name in sc["tools"]:
            m = s[name]
            ratio = f"{m['wall_s'] / base:.2f}x" if base and m["wall_s"] else "-"
            lines.append(f"{sc['label']:11} {name:24} {m['ok_runs']:>2}/{m['runs']:<2} {fmt(m['wall_s'], '.3f'):>8} "
                         f"{fmt(m['wall_min_s'], '.3f'):>7} {fmt(m['wall_max_s'], '.3f'):>7} "
                         f"{fmt(m['tree_peak_mib'], '.1f'):>9} {fmt(m['proc_peak_mib'], '.1f'):>9} "
                         f"{fmt(m['ctl_cpu_s']):>8} {fmt(m['remote_cpu_s']):>8} {ratio:>11}")
    lines.append("")
    for t in targets:
        lines.append(f"target {t['target']:58} measured {t['measured']:>10}  {'MET' if t['met'] else 'MISSED'}")
    return "\n".join(lines)


def evaluate(results: dict) -> list[dict]:
    out = []
    by = {sc["label"]: sc["summary"] for sc in results["scenarios"]}

    def w(label, tool, key="wall_s"):
        return (by.get(label, {}).get(tool) or {}).get(key)

    for label in by:
        if label.startswith("run@"):
            f, fl, raw = w(label, "fleetctl run"), w(label, "asyncssh floor"), w(label, "ansible -m raw")
            if f and fl:
                out.append({"target": f"{label}: fleetctl run <= 1.3x asyncssh floor", "measured": f"{f / fl:.2f}x",
                            "met": f / fl <= 1.3})
            if f and raw:
                out.append({"target": f"{label}: ansible -m raw >= 5x fleetctl run", "measured": f"{raw / f:.2f}x",
                            "met": raw / f >= 5})
        if label.startswith("facts@"):
            f, st = w(label, "fleetctl facts"), w(label, "ansible -m setup")
            if f and st:
                out.append({"target": f"{label}: ansible -m setup >= 10x fleetctl facts",
                            "measured": f"{st / f:.2f}x", "met": st / f >= 10})
        if label.startswith("push@"):
            f, scp = w(label, "fleetctl put (driver)"), w(label, "scp loop")
            mem = w(label, "fleetctl put (driver)", "tree_peak_mib")
            if f and scp:
                out.append({"target": f"{label}: fleetctl put <= scp loop", "measured": f"{f / scp:.2f}x",
                            "met": f <= scp})
            if mem:
                out.append({"target": f"{label}: fleetctl put peak controller RSS < 150 MiB",
                            "measured": f"{mem:.1f} MiB", "met": mem < 150})
            d, dm = w(label, "fleetctl deploy copy"), w(label, "fleetctl deploy copy", "tree_peak_mib")
            if d and scp:
                out.append({"target": f"{label}: fleetctl deploy copy <= scp loop", "measured": f"{d / scp:.2f}x",
                            "met": d <= scp})
            if dm:
                out.append({"target": f"{label}: fleetctl deploy copy peak RSS < 150 MiB",
                            "measured": f"{dm:.1f} MiB", "met": dm < 150})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="20,50", help="host counts for the run scenario (comma list)")
    ap.add_argument("--facts-hosts", type=int, default=50)
    ap.add_argument("--push-hosts", type=int, default=20)
    ap.add_argument("--push-mib", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="run,facts,push", help="scenarios: run,facts,push,startups,overhead,pushmem")
    ap.add_argument("--tools", default="", help="only tools whose name contains one of these (comma list)")
    ap.add_argument("--compare-rev", default="", metavar="REV",
                    help="run: also time `fleetctl run` of this git revision (a snapshot), interleaved with the rest")
    ap.add_argument("--peers-venv", default="/tmp/fleet-bench-peers",
                    help="venv holding ansible-core and pyinfra (missing tools are skipped)")
    ap.add_argument("--maxstartups", default="100", help="sshd MaxStartups for the test hosts, or 'default'")
    ap.add_argument("--login-env", choices=("clean", "user"), default="clean",
                    help="clean: each test host's sessions get an empty HOME (no rc files); user: the real one")
    ap.add_argument("--fleetctl-src", choices=("HEAD", "worktree"), default="HEAD",
                    help="HEAD: a snapshot of the committed fleetctl (default); worktree: the checkout as it is")
    ap.add_argument("--before", default="", help="facts: also measure the fleetctl of this git revision")
    ap.add_argument("--push-dest", default="/dev/shm/fleet-bench-pushed" if os.path.isdir("/dev/shm") else "",
                    help="folder the test hosts write pushed files to; tmpfs by default, since here all the "
                         "'hosts' share one disk whose writeback would dominate (empty: under --workdir)")
    ap.add_argument("--poll-ms", type=float, default=50, help="RSS polling interval; 0 turns tree polling off")
    ap.add_argument("--json-out", default="", help="results file (default: <workdir>/results.json)")
    ap.add_argument("--workdir", default="", help="scratch folder (default: a new one under /tmp)")
    args = ap.parse_args()

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    sizes = [int(x) for x in args.hosts.split(",") if x.strip()]
    peers = Path(args.peers_venv)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="fleet-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    set_child_subreaper()
    global PUSH_DEST
    PUSH_DEST = Path(args.push_dest) if args.push_dest else None

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    need = max([*(sizes if only & {"run", "overhead"} else []), *([args.facts_hosts] if "facts" in only else []),
                *([args.push_hosts] if only & {"push", "pushmem"} else []), 0])
    results: dict = {"started": dt.datetime.now(dt.timezone.utc).isoformat(), "args": vars(args),
                     "versions": versions(peers), "scenarios": []}
    results["versions"]["fleetctl_under_test"] = snapshot_fleetctl(root, args.fleetctl_src)
    if args.compare_rev:
        global COMPARE
        COMPARE = (args.compare_rev, export_tree(args.compare_rev, root / "fleetctl-compare"))
        results["versions"]["fleetctl_compared"] = args.compare_rev
    if args.before:
        BEFORE[args.before] = str(export_tree(args.before, root / "fleetctl-before"))
        results["versions"]["fleetctl_before"] = args.before
    log(f"fleetctl under test: {results['versions']['fleetctl_under_test']}")
    log(f"workdir {root}; starting {need} sshd test hosts (MaxStartups {args.maxstartups})")
    hosts, key, kh = start_fleet(root, need, args.maxstartups, args.login_env) if need else ([], None, None)
    bench = Bench(root=root, hosts=hosts, poll_s=args.poll_ms / 1000, sshd_pids={h.proc.pid for h in hosts})
    filt = [s.strip() for s in args.tools.split(",") if s.strip()]

    def pick(tools: list[Tool]) -> list[Tool]:
        return [t for t in tools if not filt or any(f in t.name for f in filt)]

    try:
        if "run" in only:
            for n in sizes:
                invs = write_inventories(root, hosts, key, kh, n)
                results["scenarios"].append(run_scenario(bench, f"run@{n}", pick(run_tools(root, invs, n, peers)),
                                                         args.repeats, root, log))
        if "facts" in only:
            n = args.facts_hosts
            invs = write_inventories(root, hosts, key, kh, n)
            results["scenarios"].append(run_scenario(bench, f"facts@{n}", pick(facts_tools(root, invs, n, peers)),
                                                     args.repeats, root, log))
        if "push" in only:
            n = args.push_hosts
            invs = write_inventories(root, hosts, key, kh, n)
            results["scenarios"].append(run_scenario(
                bench, f"push@{n}", pick(push_tools(root, invs, hosts, key, kh, n, args.push_mib)),
                args.repeats, root, log))
        if "overhead" in only:
            n = max(sizes)
            invs = write_inventories(root, hosts, key, kh, n)
            results["scenarios"].append(run_scenario(bench, f"overhead@{n}", pick(overhead_tools(root, invs, n)),
                                                     args.repeats, root, log))
        if "pushmem" in only:
            n = args.push_hosts
            invs = write_inventories(root, hosts, key, kh, n)
            results["scenarios"].append(run_scenario(
                bench, f"pushmem@{n}", pick(pushmem_tools(root, invs, hosts, key, kh, n, args.push_mib)),
                args.repeats, root, log))
        if "startups" in only:
            log("== startups: 50 logins at once to ONE sshd")
            results["startups"] = startups_probe(root, 50, log)
    finally:
        for h in hosts:
            h.stop()
        shutil.rmtree(PUSH_DEST or root / "pushed", ignore_errors=True)
    results["targets"] = evaluate(results)
    results["finished"] = dt.datetime.now(dt.timezone.utc).isoformat()
    out = Path(args.json_out) if args.json_out else root / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(print_tables(results, results["targets"]))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
