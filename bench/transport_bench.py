#!/usr/bin/env python3
"""Transport benchmark (issue 10): controller memory against output size, and dead hosts against live ones.

    .venv/bin/python bench/transport_bench.py [--repeats 3] [--sizes 0,20,200] [--dead 0,16,64]
        [--before COMMIT] [--json-out bench/results/transport_bench.json]

Run by hand, not by CI. Real OpenSSH sshd test hosts on 127.0.0.1 (tests/support/sshd.py), side by
side in one process, tools in rotating order each round, medians over the rounds:

- ``rss@N``: one host prints N MiB (1000-byte lines). ``peak MiB`` is the kernel's peak RSS of the
  tool's process (GNU time ``%M``, i.e. wait4's ru_maxrss, with time forking the tool). Tools:
  ``fleetctl run`` (this worktree; the log must hold every byte), fleetctl at ``--before``, the
  asyncssh floor streaming stdout to a file (bench/transport_floor.py), OpenSSH ``ssh`` into a file.
- ``dead@D``: 4 live hosts listed after D SYN-blackholed ports (a listener with a full accept
  queue: the kernel drops the SYNs), ``--connect-timeout 10``. ``live s``: when the last live host
  was done; ``all s``: when the tool exited. Tools: ``fleetctl run --forks 100`` (every host at
  once, as the floor and ssh), ``fleetctl run`` with the default ``--forks 50``, fleetctl at
  ``--before``, the asyncssh floor, and one OpenSSH ``ssh -o ConnectTimeout=10`` per host, all started
  at once. Every time counts from the tool's spawn (interpreter start and imports included).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.netfaults import BlackHole  # noqa: E402
from tests.support.sshd import ensure_client_key, start_sshd  # noqa: E402

TIME = "/usr/bin/time"
GEN = ("import sys\nout = sys.stdout.buffer\nn = int(sys.argv[1]) * 1024 * 1024 // 1000\n"
       "for i in range(n):\n    out.write(b'%09d ' % i + b'x' * 989 + b'\\n')\n")
TIMEOUT_S = 10


def snapshot(commit: str, root: Path) -> Path:
    """``git archive COMMIT`` into a folder put first on PYTHONPATH (what is measured is that commit;
    tools run from a temporary folder, so the checkout itself is never on sys.path)."""
    dest = root / f"fleetctl-{commit[:10]}"
    dest.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def write_inventory(path: Path, hosts: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"all": {"children": {"g": {"hosts": hosts}}}}, sort_keys=False))
    return path


def timed(argv: list[str], *, env: dict, stdout, cwd: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, rc) of argv run under GNU time."""
    rss = tempfile.NamedTemporaryFile(delete=False)
    rss.close()
    t0 = time.monotonic()
    rc = subprocess.run([TIME, "-f", "%M", "-o", rss.name, *argv], env=env, stdout=stdout,
                        stderr=subprocess.DEVNULL, cwd=cwd).returncode
    wall = time.monotonic() - t0
    text = Path(rss.name).read_text().split()
    os.unlink(rss.name)
    return wall, (int(text[-1]) / 1024 if text else float("nan")), rc


def run_rss(root: Path, host, key: Path, kh: Path, sizes: list[int], repeats: int, before: Path | None) -> list[dict]:
    inv = write_inventory(root / "rss.yaml", {"chatty": host.inventory_vars(kh)})
    hosts_json = root / "rss-hosts.json"
    hosts_json.write_text(json.dumps([{"name": "chatty", "host": "127.0.0.1", "port": host.port, "user": host.user,
                                       "key": str(key), "known_hosts": str(kh)}]))
    base_env = {**os.environ}
    tools = {
        "fleetctl run": (lambda n, home: [sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "g",
                                          "--json", "--", "python3", "-c", GEN, str(n)], {"PYTHONPATH": str(REPO)}),
        "asyncssh floor -> file": (lambda n, home: [sys.executable, str(REPO / "bench/transport_floor.py"),
                                                    str(hosts_json), "--out", str(home / "floor.out"), "--",
                                                    "python3", "-c", GEN, str(n)], {}),
        "ssh > file": (lambda n, home: ["ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={kh}", "-o",
                                        "BatchMode=yes", "-i", str(key), "-p", str(host.port),
                                        f"{host.user}@127.0.0.1", f"python3 -c {shlex.quote(GEN)} {n}"], {}),
    }
    if before:
        tools["fleetctl before"] = (lambda n, home: [sys.executable, "-m", "fleetctl", "-i", str(inv), "run",
                                                     "--hosts", "g", "--json", "--", "python3", "-c", GEN, str(n)],
                                    {"PYTHONPATH": str(before)})
    rows = []
    names = list(tools)
    for size in sizes:
        samples: dict[str, list[tuple[float, float]]] = {t: [] for t in names}
        for r in range(repeats):
            for t in names[r % len(names):] + names[:r % len(names)]:
                make, extra = tools[t]
                home = Path(tempfile.mkdtemp(dir=root))
                env = {**base_env, **extra, "FLEETCTL_HOME": str(home)}
                out = home / "stdout"
                with open(out, "wb") as fh:
                    wall, peak, rc = timed(make(size, home), env=env, stdout=fh, cwd=home)
                expected = size * 1024 * 1024 // 1000 * 1000
                if t.startswith("fleetctl"):
                    logs = list((home / "runs").glob("*/logs/chatty.log"))
                    got = sum(len(line) - 5 for line in open(logs[0], "rb")) if logs else -1
                elif t.startswith("asyncssh"):
                    got = (home / "floor.out").stat().st_size
                else:
                    got = out.stat().st_size
                ok = rc == 0 and got == expected
                samples[t].append((wall, peak) if ok else (float("nan"), float("nan")))
                print(f"rss@{size} {t}: wall {wall:.2f} s peak {peak:.1f} MiB ok={ok}", file=sys.stderr)
        for t in names:
            walls = [w for w, _ in samples[t]]
            peaks = [p for _, p in samples[t]]
            rows.append({"scenario": f"rss@{size}MiB", "tool": t, "runs": len(walls),
                         "ok": sum(w == w for w in walls), "wall_s": _median(walls), "peak_mib": _median(peaks)})
    return rows


def _median(xs):
    xs = [x for x in xs if x == x]
    return round(statistics.median(xs), 3) if xs else None


def run_dead(root: Path, live, key: Path, kh: Path, deads: list[int], repeats: int, before: Path | None) -> list[dict]:
    rows = []
    for d in deads:
        holes = [BlackHole() for _ in range(d)]
        try:
            hosts = {f"dead{i:02d}": {"ansible_host": "127.0.0.1", "ansible_port": h.port, "known_hosts": str(kh)}
                     for i, h in enumerate(holes)}
            for i, h in enumerate(live):
                hosts[f"live{i}"] = h.inventory_vars(kh)
            inv = write_inventory(root / f"dead{d}.yaml", hosts)
            hosts_json = root / f"dead{d}.json"
            hosts_json.write_text(json.dumps(
                [{"name": n, "host": "127.0.0.1", "port": v["ansible_port"], "user": v.get("ansible_user", "root"),
                  "key": str(key), "known_hosts": str(kh)} for n, v in hosts.items()]))
            tools = {
                "fleetctl run --forks 100": ("fleetctl", str(REPO), ["--forks", "100"]),
                "fleetctl run (forks 50)": ("fleetctl", str(REPO), []),
                "asyncssh floor": ("floor", None, []),
                "ssh in parallel": ("ssh", None, []),
            }
            if before:
                tools["fleetctl before --forks 100"] = ("fleetctl", str(before), ["--forks", "100"])
            names = list(tools)
            samples: dict[str, list[tuple[float, float]]] = {t: [] for t in names}
            for r in range(repeats):
                for t in names[r % len(names):] + names[:r % len(names)]:
                    kind, src, extra = tools[t]
                    if kind == "fleetctl":
                        live_s, all_s = _dead_fleetctl(root, inv, src, extra)
                    elif kind == "floor":
                        live_s, all_s = _dead_floor(hosts_json)
                    else:
                        live_s, all_s = _dead_ssh(hosts, key, kh)
                    samples[t].append((live_s, all_s))
                    print(f"dead@{d} {t}: live {live_s:.2f} s all {all_s:.2f} s", file=sys.stderr)
            for t in names:
                rows.append({"scenario": f"dead@{d}", "tool": t, "runs": repeats,
                             "live_s": _median([a for a, _ in samples[t]]),
                             "all_s": _median([b for _, b in samples[t]])})
        finally:
            for h in holes:
                h.close()
    return rows


def _dead_fleetctl(root: Path, inv: Path, src: str, extra: list[str]) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp(dir=root))
    env = {**os.environ, "PYTHONPATH": src, "FLEETCTL_HOME": str(home)}
    t0_wall = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "fleetctl", "-i", str(inv), "run", "--hosts", "g", "--json",
                          "--connect-timeout", str(TIMEOUT_S), *extra, "--", "echo", "up"], env=env,
                         capture_output=True, text=True, cwd=home)
    all_s = time.monotonic() - t0
    out = json.loads(res.stdout)
    if not all(out[h].get("stdout") == "up\n" for h in out if h.startswith("live")):
        return float("nan"), all_s
    events = [json.loads(line) for p in (home / "runs").glob("*/events.jsonl") for line in p.read_text().splitlines()]
    done = [dt.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")) for e in events
            if e.get("event") == "host.finished" and e.get("host", "").startswith("live")]
    return max((t - t0_wall).total_seconds() for t in done), all_s


def _dead_floor(hosts_json: Path) -> tuple[float, float]:
    t0, t0_wall = time.monotonic(), time.time()
    res = subprocess.run([sys.executable, str(REPO / "bench/transport_floor.py"), str(hosts_json), "--timeout",
                          str(TIMEOUT_S), "--", "echo", "up"], capture_output=True, text=True)
    all_s = time.monotonic() - t0
    out = json.loads(res.stdout)
    live = [v for k, v in out.items() if k.startswith("live")]
    if not all(v["ok"] for v in live):
        return float("nan"), all_s
    return max(v["done_at"] for v in live) - t0_wall, all_s  # from spawn, imports included


def _dead_ssh(hosts: dict, key: Path, kh: Path) -> tuple[float, float]:
    t0 = time.monotonic()
    procs = {}
    for name, v in hosts.items():
        procs[name] = subprocess.Popen(
            ["ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={kh}", "-o", "BatchMode=yes", "-o",
             f"ConnectTimeout={TIMEOUT_S}", "-i", str(key), "-p", str(v["ansible_port"]),
             f"{v.get('ansible_user', 'root')}@127.0.0.1", "echo", "up"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    done: dict[str, float] = {}
    while len(done) < len(procs):
        for name, p in procs.items():
            if name not in done and p.poll() is not None:
                done[name] = time.monotonic() - t0
        time.sleep(0.01)  # polling child processes
    all_s = time.monotonic() - t0
    ok = all(procs[n].returncode == 0 for n in procs if n.startswith("live"))
    return (max(done[n] for n in done if n.startswith("live")) if ok else float("nan")), all_s


def table(rows: list[dict]) -> str:
    lines = []
    rss = [r for r in rows if r["scenario"].startswith("rss")]
    if rss:
        lines.append(f"{'scenario':14} {'tool':28} {'ok':>5} {'wall s':>8} {'peak MiB':>9}")
        for r in rss:
            lines.append(f"{r['scenario']:14} {r['tool']:28} {r['ok']}/{r['runs']:<3} {_fmt(r['wall_s']):>8} "
                         f"{_fmt(r['peak_mib'], '.1f'):>9}")
    dead = [r for r in rows if r["scenario"].startswith("dead")]
    if dead:
        lines.append("")
        lines.append(f"{'scenario':14} {'tool':30} {'live s':>8} {'all s':>8}")
        for r in dead:
            lines.append(f"{r['scenario']:14} {r['tool']:30} {_fmt(r['live_s']):>8} {_fmt(r['all_s']):>8}")
    return "\n".join(lines)


def _fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="0,20,200")
    ap.add_argument("--dead", default="0,16,64")
    ap.add_argument("--before", default=None, help="also measure fleetctl at this commit (e.g. 651d6db)")
    ap.add_argument("--only", default="rss,dead")
    ap.add_argument("--json-out", default=None)
    opts = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="transport-bench-"))
    os.chmod(root, 0o755)
    os.environ.pop("SSH_AUTH_SOCK", None)
    key = ensure_client_key(root / "client")
    before = snapshot(opts.before, root) if opts.before else None
    live = [start_sshd(f"live{i}", root / f"live{i}", key, extra_config="MaxStartups 100") for i in range(4)]
    kh = root / "known_hosts"
    kh.write_text("".join(h.known_hosts_line + "\n" for h in live))
    rows: list[dict] = []
    try:
        if "rss" in opts.only:
            rows += run_rss(root, live[0], key, kh, [int(x) for x in opts.sizes.split(",")], opts.repeats, before)
        if "dead" in opts.only:
            rows += run_dead(root, live, key, kh, [int(x) for x in opts.dead.split(",")], opts.repeats, before)
    finally:
        for h in live:
            h.stop()
    text = table(rows)
    print(text)
    if opts.json_out:
        Path(opts.json_out).write_text(json.dumps({"when": dt.datetime.now(dt.timezone.utc).isoformat(),
                                                   "before": opts.before, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
