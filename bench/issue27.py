#!/usr/bin/env python3
"""One command for issue 27's tables: ``run`` and ``facts`` against their peers, the no-change
deploy against ``run``, and the scale table, written into bench/README.md (between the
``issue27`` markers, so a re-run replaces them) and bench/results/issue27-*.json.

Run by hand, not by CI, from the repository root (peers: see bench/fleet_bench.py's docstring):

    .venv/bin/python bench/issue27.py --repeats 3            # everything (about an hour on 2 cores)
    .venv/bin/python bench/issue27.py --only deploy,double    # some steps; the others' JSON is reused
    .venv/bin/python bench/issue27.py --report-only           # the tables again from the JSON files

It measures nothing itself: each step is one of the existing benches, run as its own process
with ``--json-out bench/results/issue27-<step>.json`` (their method: one process per tool run,
interleaved rounds after a warm-up round, medians and the min-max spread):

``fleet``   bench/fleet_bench.py ``--hosts 20,50 --facts-hosts 20 --only run,facts``: fleetctl,
            the asyncssh floor, pyinfra, ansible-core (``--peers-venv``), side by side;
``deploy``  bench/deploy_bench.py ``--hosts 1,8,50 --only nochange``: ``run``, the floor, the
            no-change deploy without verify (and with verify on 1 host);
``scale``   bench/scale_bench.py ``--hosts 50,200 --sshd 5``: real sshd, aliases (each its own venv
            and workdir: 1,000 aliases' setup deploy is 1,000 pip installs on 2 cores, so 200 by
            default; ``--scale-hosts`` for more);
``double``  bench/scale_double.py ``--hosts 50,1000,10000 --repeats R``: the controller alone,
            hosts played by a double of fleetctl's Connection (no SSH), to 10,000.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
README = REPO / "bench" / "README.md"
BEGIN, END = "<!-- issue27:begin (bench/issue27.py writes this part) -->", "<!-- issue27:end -->"
PY = str(REPO / ".venv" / "bin" / "python")


def steps(args: argparse.Namespace) -> dict[str, list[str]]:
    """step name -> the bench's argv (its JSON goes to bench/results/issue27-<step>.json)."""
    r = str(args.repeats)
    return {
        "fleet": [PY, "bench/fleet_bench.py", "--hosts", "20,50", "--facts-hosts", "20", "--repeats", r,
                  "--only", "run,facts", "--peers-venv", args.peers_venv],
        "deploy": [PY, "bench/deploy_bench.py", "--hosts", "1,8,50", "--repeats", r, "--only", "nochange"],
        "scale": [PY, "bench/scale_bench.py", "--hosts", args.scale_hosts, "--sshd", "5", "--repeats", "1"],
        "double": [PY, "bench/scale_double.py", "--hosts", args.double_hosts, "--repeats", r],
    }


def result_path(step: str) -> Path:
    return RESULTS / f"issue27-{step}.json"


def load(step: str) -> dict | None:
    try:
        return json.loads(result_path(step).read_text())
    except (OSError, ValueError):
        return None


def _summary(doc: dict | None, label: str) -> dict:
    for sc in (doc or {}).get("scenarios", []):
        if sc["label"] == label:
            return sc["summary"]
    return {}


def _cell(m: dict | None, ref: dict | None = None, cpu: bool = True) -> str:
    """``0.92 s (0.85-1.01), ctl 0.50 CPU-s`` and, against ``ref``, ``1.55x``."""
    if not m or m.get("wall_s") is None:
        return "-"
    text = f"{m['wall_s']:.2f} s ({m['wall_min_s']:.2f}-{m['wall_max_s']:.2f})"
    if cpu and m.get("ctl_cpu_s") is not None:
        text += f", ctl {m['ctl_cpu_s']:.2f}"
    if ref and ref.get("wall_s"):
        text += f" = **{m['wall_s'] / ref['wall_s']:.2f}x**"
    return text


def fleet_table(doc: dict | None) -> list[str]:
    lines = ["| work | fleetctl: wall (min-max), ctl CPU-s | asyncssh floor (fleetctl / floor) | pyinfra 3 | "
             "ansible-core 2.19 |", "|---|---|---|---|---|"]
    for n in (20, 50):
        s = _summary(doc, f"run@{n}")
        f = s.get("fleetctl run")
        lines.append(f"| `run` {n} hosts | {_cell(f)} | {_cell(s.get('asyncssh floor'))}"
                     f"{'; ' + format(f['wall_s'] / s['asyncssh floor']['wall_s'], '.2f') + 'x' if f and s.get('asyncssh floor') and f.get('wall_s') else ''} | "
                     f"{_cell(s.get('pyinfra exec'), None)} | raw {_cell(s.get('ansible -m raw'), None)} |")
    s = _summary(doc, "facts@20")
    f = s.get("fleetctl facts")
    fl = s.get("asyncssh facts floor")
    host = (f" host CPU {f['remote_cpu_s']:.2f} vs {fl['remote_cpu_s']:.2f} s" if f and fl and
            f.get("remote_cpu_s") is not None and fl.get("remote_cpu_s") is not None else "")
    lines.append(f"| facts 20 hosts | {_cell(f)};{host} | {_cell(fl)}"
                 f"{'; ' + format(f['wall_s'] / fl['wall_s'], '.2f') + 'x' if f and fl and f.get('wall_s') else ''} | - | "
                 f"setup {_cell(s.get('ansible -m setup'), None)} |")
    return lines


def deploy_table(doc: dict | None) -> list[str]:
    lines = ["| hosts | `fleetctl run` | no-change deploy (no verify) | deploy / run | host CPU-s: run / deploy | "
             "+verify |", "|---|---|---|---|---|---|"]
    for sc in (doc or {}).get("scenarios", []):
        n = sc["label"].split("@")[1]
        s = sc["summary"]
        r, d, v = s.get("fleetctl run"), s.get("deploy, no change"), s.get("deploy, no change, +verify")
        ratio = f"**{d['wall_s'] / r['wall_s']:.2f}x**" if r and d and r.get("wall_s") and d.get("wall_s") else "-"
        host = (f"{r['remote_cpu_s']:.2f} / {d['remote_cpu_s']:.2f}" if r and d and r.get("remote_cpu_s") is not None
                and d.get("remote_cpu_s") is not None else "-")
        lines.append(f"| {n} | {_cell(r)} | {_cell(d)} | {ratio} | {host} | {_cell(v) if v else '-'} |")
    return lines


def scale_table(real: dict | None, double: dict | None) -> list[str]:
    lines = ["| hosts | tool | transport | wall s | ctl CPU-s | CPU ms a host | peak MiB |", "|---|---|---|---|---|---|---|"]
    for sc in (real or {}).get("scenarios", []):
        n = int(sc["label"].split("@")[1])
        for name in sc["tools"]:
            m = sc["summary"][name]
            if m.get("wall_s") is None:
                lines.append(f"| {n} | {name} | real sshd (5, aliases) | failed | | | |")
                continue
            cpu = m.get("ctl_cpu_s") or 0.0
            lines.append(f"| {n} | {name} | real sshd (5, aliases) | {m['wall_s']:.2f} | {cpu:.2f} | "
                         f"{cpu * 1000 / n:.1f} | {m.get('proc_peak_mib') or 0:.1f} |")
    names = {"run": "fleetctl run", "facts": "fleetctl facts", "deploy": "deploy, no change"}
    for r in (double or {}).get("rows", []):
        if "error" in r or r.get("rc"):
            lines.append(f"| {r['hosts']} | {names.get(r['tool'], r['tool'])} | Connection double | failed | | | |")
            continue
        double = f" (the double's hosts ~{r['double_mib']:.0f})" if r.get("double_mib") is not None else ""
        spread = " ({:.2f}-{:.2f})".format(*r["cpu_ms_per_host_range"]) if r.get("cpu_ms_per_host_range") else ""
        peaks = " ({:.0f}-{:.0f})".format(*r["peak_mib_range"]) if r.get("peak_mib_range") else ""
        lines.append(f"| {r['hosts']} | {names.get(r['tool'], r['tool'])} | Connection double | {r['wall_s']:.2f} | "
                     f"{r['cpu_s']:.2f} | {r['cpu_ms_per_host']:.2f}{spread} | {r['peak_mib']:.1f}{peaks}{double} |")
    return lines


def render(docs: dict[str, dict | None]) -> str:
    when = {k: (v or {}).get("started", "")[:16].replace("T", " ") for k, v in docs.items()}
    vers = (docs.get("fleet") or docs.get("deploy") or {}).get("versions", {})
    out = [BEGIN, "", "Written by `bench/issue27.py` from `bench/results/issue27-*.json` "
           f"(measured: {', '.join(f'{k} {w} UTC' for k, w in when.items() if w) or 'nothing yet'}; "
           f"versions: {json.dumps(vers, sort_keys=True) if vers else 'see the JSON'}). Medians, (min-max) of the "
           "rounds; ctl = the tool's own CPU-s and its children's; on loopback the hosts' CPU shares the "
           "controller's 2 cores.", "", "`run` and `facts` against their peers (`fleet`):", "",
           *fleet_table(docs.get("fleet")), "", "The no-change deploy against `run` (`deploy`):", "",
           *deploy_table(docs.get("deploy")), "",
           "Scale: real sshd (`scale`: aliases over 5 sshd test hosts) and the controller alone (`double`: "
           "hosts played by a double of fleetctl's Connection, no SSH; its in-memory hosts are in its peak):",
           "", *scale_table(docs.get("scale"), docs.get("double")), "", END]
    return "\n".join(out)


def write_readme(text: str) -> None:
    old = README.read_text()
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + text + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n# Issue 27: one command for the table (`bench/issue27.py`)\n\n" + text + "\n"
    README.write_text(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="fleet,deploy,scale,double")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale-hosts", default="50,200")
    ap.add_argument("--double-hosts", default="50,1000,10000")
    ap.add_argument("--peers-venv", default="/tmp/fleet-bench-peers")
    ap.add_argument("--report-only", action="store_true", help="only re-render the tables from the JSON files")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for step in [s.strip() for s in args.only.split(",") if s.strip()]:
            argv = steps(args)[step] + ["--json-out", str(result_path(step))]
            print(f"== {step}: {' '.join(argv)}", file=sys.stderr, flush=True)
            t0 = dt.datetime.now(dt.timezone.utc)
            p = subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
            print(f"== {step}: rc={p.returncode} in {(dt.datetime.now(dt.timezone.utc) - t0).total_seconds():.0f} s",
                  file=sys.stderr, flush=True)
    docs = {s: load(s) for s in ("fleet", "deploy", "scale", "double")}
    text = render(docs)
    write_readme(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
