#!/usr/bin/env python3
"""The controller's own cost at 50 to 10,000 hosts, with the hosts played by a double of fleetctl's
``Connection`` (tests/support/fake_connection.py: in-memory hosts that answer at once), so that
only the controller works: inventory expansion, pattern matching, planning, the engine, the live
display and the run record. Real hosts are measured by bench/scale_bench.py (aliases over a few
real sshd); this one goes past what 2 cores can serve over real SSH.

Run by hand, not by CI (bench/README.md has the numbers; bench/issue27.py runs it):

    .venv/bin/python bench/scale_double.py --hosts 50,1000,10000 --repeats 3 \
        --json-out bench/results/scale_double.json

Each (tool, size, round) runs in its own process, the rounds interleaved (every tool and size
once a round, ``--repeats`` rounds; the JSON's ``rows`` are the medians, with the spread, and
``rounds`` every measurement): the real CLI (``fleetctl -i INV run|facts|deploy``, ``--forks 50``,
``--json``, the record written to a fresh FLEETCTL_HOME, removed afterwards) in-process, with the
``fake`` kind registered the way a real kind is (one line in ``registry.KINDS``) and every
inventory host ``ansible_connection: fake``, with facts naming its own venv and workdir folders as
a real host's do. ``deploy`` is the toy playbook of tests/test_engine.py (copy, build_wheel,
pip_install) deployed once untimed (builds once, pushes to the rest), then measured with nothing
to change (``--serial N``: the playbook in batches of N hosts). Measured: wall seconds and the
process's CPU seconds of the measured command (``getrusage(RUSAGE_SELF)`` deltas), CPU
milliseconds per host, the process's peak RSS (``ru_maxrss``, the untimed setup deploy included;
it includes the double's in-memory hosts, estimated apart as ``double_mib``: their files and
facts; their command logs are counted, not kept), and counts that must stay linear: execs per
host, Python function calls per host (``--calls``: a cProfile of the measured command; the
profile's top self-time functions are kept in the JSON, the way a superlinear step shows;
with ``SCALE_DOUBLE_PSTATS=PREFIX`` the whole profile is written to ``PREFIX.<tool>.<hosts>``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORKS = 50

PLAY = """\
name: toy
hosts: all
vars:
  src_dir: "{{ workdir }}/src/toy"
tasks:
  - name: upload
    copy: {src: toy, dest: "{{ src_dir }}"}
  - name: build
    build_wheel: {src: "{{ src_dir }}", out_dir: "{{ workdir }}/wheels", check_sass: false,
                  required_build_packages: [setuptools], tool: pip}
    register: build
  - name: install
    pip_install: {wheel: "{{ build.data.wheel }}"}
"""


def write_inputs(root: Path, n: int, serial: int = 0) -> tuple[Path, Path]:
    """An inventory of ``n`` fake hosts (one group, plain YAML as scale_bench.py writes) and the toy playbook."""
    import yaml

    hosts = {f"a{i + 1:05d}": {"ansible_connection": "fake", "venv": "/venv", "workdir": f"/w/a{i + 1:05d}"}
             for i in range(n)}
    inv = root / f"inv{n}.yaml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"bench": {"hosts": hosts}}}}, sort_keys=False))
    (root / "toy").mkdir(exist_ok=True)
    (root / "toy" / "pyproject.toml").write_text("[project]\nname = 'toy'\nversion = '0.1'\n")
    play = root / "play.yaml"
    play.write_text(PLAY.replace("hosts: all\n", f"hosts: all\nserial: {serial}\n") if serial else PLAY)
    return inv, play


def child(tool: str, n: int, root: Path, calls: bool, serial: int = 0, round_: int = 0) -> dict:
    """One measured command in this process (see the module docstring). ``root`` may be relative
    (to the current folder): it is made absolute before the command changes into it."""
    root = root.resolve()
    sys.path.insert(0, str(REPO))
    os.environ["FLEETCTL_HOME"] = str(root / f"home-{tool}-{n}-{round_}")  # each round from nothing
    os.environ["XDG_CACHE_HOME"] = str(root / f"cache-{tool}-{n}-{round_}")
    from fleetctl.cli import main
    from fleetctl.connection import registry
    from tests.support import fake_connection as fake

    registry.KINDS["fake"] = "tests.support.fake_connection:KIND"
    inv, play = write_inputs(root, n, serial)
    for i in range(n):
        name = f"a{i + 1:05d}"
        fake.HOSTS[name] = fake.own_folders(fake.FakeHost(name, handlers=[fake.python_packaging], log=Tally(),
                                                          execs=Tally()), workdir=f"/w/{name}")
    base = ["-i", str(inv)]
    argv = {"run": base + ["run", "--hosts", "bench", "--json", "--forks", str(FORKS), "--", "true"],
            "facts": base + ["facts", "--hosts", "bench", "--json", "--forks", str(FORKS)],
            "deploy": base + ["deploy", "--hosts", "bench", "--playbook", str(play), "--json", "--forks",
                              str(FORKS)]}[tool]
    os.chdir(root)

    class Sink(io.TextIOBase):
        """stdout for the command: counts what --json prints, keeps none of it (a StringIO would
        add the whole document, 60 MB at 10,000 hosts, to the peak measured)."""
        def __init__(self) -> None:
            self.n = 0

        def writable(self) -> bool:
            return True

        def write(self, text: str) -> int:
            self.n += len(text)
            return len(text)

    def once() -> tuple[int, int]:
        out = Sink()
        with contextlib.redirect_stdout(out):
            try:
                # without standalone mode click returns the exit status (1: a host failed, 2: bad
                # input) rather than raising SystemExit
                rc = int(main(args=argv, prog_name="fleetctl", standalone_mode=False) or 0)
            except SystemExit as exc:
                rc = int(exc.code or 0)
        return rc, out.n

    if tool == "deploy":
        rc, _ = once()  # installs (one build, the wheel pushed to the others): untimed
        if rc != 0:
            raise SystemExit(f"the setup deploy failed (rc={rc}): nothing to measure")
    execs0 = sum(len(h.execs) for h in fake.HOSTS.values())
    prof = None
    if calls:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rc, out_bytes = once()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if prof is not None:
        prof.disable()
        if os.environ.get("SCALE_DOUBLE_PSTATS"):  # the whole profile, for pstats / snakeviz
            prof.dump_stats(f"{os.environ['SCALE_DOUBLE_PSTATS']}.{tool}.{n}")
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    res = {"tool": tool + (f" serial {serial}" if serial and tool == "deploy" else ""), "hosts": n, "rc": rc, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
           "cpu_ms_per_host": round(cpu * 1000 / n, 3), "peak_mib": round(r1.ru_maxrss / 1024, 1),
           "execs_per_host": round((sum(len(h.execs) for h in fake.HOSTS.values()) - execs0) / n, 3),
           "json_bytes": out_bytes}
    res["double_mib"] = round(double_bytes(fake.HOSTS) / 2 ** 20, 1)
    if prof is not None:
        import pstats

        st = pstats.Stats(prof)
        res["calls_per_host"] = round(sum(v[1] for v in st.stats.values()) / n, 1)
        top = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]
        res["top_self"] = [{"fn": f"{Path(k[0]).name}:{k[1]}:{k[2]}", "calls": v[1], "self_s": round(v[2], 3)}
                           for k, v in top]
    return res


class Tally(list):
    """A double host's command log that counts what is appended and keeps none of it: the bench
    reads only counts (``len``), and 10,000 hosts' logs of argv lists (probe scripts decoded from
    each host's first command) would put the double's memory, not fleetctl's, in the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def append(self, item: object) -> None:
        self.n += 1

    def __len__(self) -> int:
        return self.n


def double_bytes(hosts: dict) -> int:
    """What the double's in-memory hosts hold (their files, logs and facts), estimated from 50 of
    them (``sys.getsizeof`` over each one's own objects, shared objects such as interned script
    texts counted once per sample host) times the host count: part of ``peak_mib``, not fleetctl's."""
    import gc

    sample = list(hosts.values())[:: max(1, len(hosts) // 50)][:50]
    total = 0
    for h in sample:
        seen, todo = set(), [h]
        while todo:
            o = todo.pop()
            if id(o) in seen or isinstance(o, type):
                continue
            seen.add(id(o))
            total += sys.getsizeof(o)
            todo.extend(r for r in gc.get_referents(o) if not callable(r))
    return total * len(hosts) // max(1, len(sample))


def measure(tool: str, n: int, root: Path, calls: bool, serial: int = 0, round_: int = 0) -> dict:
    """:func:`child` in a fresh interpreter (its own peak RSS); its run records and caches are
    removed after it (10,000 host logs a run)."""
    p = subprocess.run([sys.executable, __file__, "--child", f"{tool}:{n}", "--workdir", str(root), "--round",
                        str(round_)] + (["--calls"] if calls else []) + ["--serial", str(serial)],
                       capture_output=True, text=True, cwd=REPO)
    for folder in (f"home-{tool}-{n}-{round_}", f"cache-{tool}-{n}-{round_}"):
        shutil.rmtree(root / folder, ignore_errors=True)
    try:
        return {**json.loads(p.stdout.strip().splitlines()[-1]), "round": round_, "load1": os.getloadavg()[0]}
    except (ValueError, IndexError):
        return {"tool": tool, "hosts": n, "rc": p.returncode, "error": (p.stderr or p.stdout)[-600:], "round": round_}


def summarize(rounds: list[dict]) -> list[dict]:
    """One row per (tool, hosts), in the order first measured: the medians of the rounds (wall,
    CPU, CPU per host, peak) with the CPU-per-host and peak ranges (min, max); a row with a
    failed round is that failure."""
    groups: dict[tuple, list[dict]] = {}
    for r in rounds:
        groups.setdefault((r["tool"], r["hosts"]), []).append(r)
    out = []
    for rs in groups.values():
        bad = [r for r in rs if "error" in r or r.get("rc")]
        if bad:
            out.append(bad[0])
            continue
        row = dict(rs[0])
        for key in ("wall_s", "cpu_s", "cpu_ms_per_host", "peak_mib", "double_mib"):
            row[key] = round(statistics.median(r[key] for r in rs), 3)
        row["cpu_ms_per_host_range"] = [min(r["cpu_ms_per_host"] for r in rs), max(r["cpu_ms_per_host"] for r in rs)]
        row["peak_mib_range"] = [min(r["peak_mib"] for r in rs), max(r["peak_mib"] for r in rs)]
        row["rounds"] = len(rs)
        row.pop("round", None)
        out.append(row)
    return out


def table(rows: list[dict]) -> str:
    lines = [f"{'tool':7} {'hosts':>6} {'wall s':>8} {'ctl cpu s':>10} {'cpu ms/host':>12} {'peak MiB':>9} "
             f"{'double MiB':>10} {'execs/host':>11} {'calls/host':>11}"]
    for r in rows:
        if "error" in r or r.get("rc"):
            r = {"error": f"the measured command exited {r['rc']}", **r}
            lines.append(f"{r['tool']:7} {r['hosts']:>6} FAILED rc={r['rc']}: {r['error'][-200:]!r}")
            continue
        spread = "" if "cpu_ms_per_host_range" not in r else " ({:.2f}-{:.2f})".format(*r["cpu_ms_per_host_range"])
        lines.append(f"{r['tool']:7} {r['hosts']:>6} {r['wall_s']:>8.2f} {r['cpu_s']:>10.2f} "
                     f"{r['cpu_ms_per_host']:>12.2f}{spread} {r['peak_mib']:>9.1f} {r.get('double_mib', '-'):>10} "
                     f"{r['execs_per_host']:>11.2f} "
                     f"{r.get('calls_per_host', '-'):>11}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="50,1000,10000")
    ap.add_argument("--tools", default="run,facts,deploy")
    ap.add_argument("--calls", action="store_true", help="also count Python calls per host (cProfile; slower)")
    ap.add_argument("--serial", type=int, default=0, help="the deploy's playbook in batches of this many hosts")
    ap.add_argument("--repeats", type=int, default=1, help="rounds, interleaved (every tool and size once a round)")
    ap.add_argument("--json-out", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="scale-double-")).resolve()  # the child runs in REPO
    root.mkdir(parents=True, exist_ok=True)
    if args.child:
        tool, n = args.child.split(":")
        print(json.dumps(child(tool, int(n), root, args.calls, args.serial, args.round)))
        return 0
    started, load0 = dt.datetime.now(dt.timezone.utc).isoformat(), os.getloadavg()[0]
    rounds = []
    for k in range(max(1, args.repeats)):
        for n in [int(x) for x in args.hosts.split(",") if x.strip()]:
            for tool in [t.strip() for t in args.tools.split(",") if t.strip()]:
                rounds.append(measure(tool, n, root, args.calls, args.serial, k))
                print(f"round {k + 1}: " + table(rounds[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    rows = summarize(rounds)
    doc = {"started": started, "finished": dt.datetime.now(dt.timezone.utc).isoformat(), "args": vars(args),
           "load1": load0, "load1_end": os.getloadavg()[0], "rows": rows, "rounds": rounds}
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(doc, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
