#!/usr/bin/env python3
"""Check patch_sgl_kernel.py against every revision sgl-kernel's two patched files have had.

usage: .venv/bin/python3 scripts/sgl_history.py GIT_DIR [--ref main] [--json FILE] [--markdown FILE]
                                                [--source TEXT] [--limit N]

GIT_DIR is a clone (bare or not) of github.com/sgl-project/sglang or of a fork that follows its
main. The script walks ``git log REF`` of the kernel build's ``CMakeLists.txt`` and
``python/sgl_kernel/flash_attn.py`` in both layouts (``sgl-kernel/`` up to 2026-07,
``python/sglang/kernels/aot/`` after), keeps the commits whose kernel folder is a CMake build
(its ``pyproject.toml`` uses scikit-build-core: from 2025-03-27 on; before that sgl-kernel was a
setup.py build and its CMakeLists.txt was not used), and takes every distinct revision, keyed by
layout and the two blob ids. Each is written to a scratch folder (never into this repository)
and run through tests/support/sgl_checks.check_revision: the patch applies, is idempotent, FA3
obeys -DSGL_KERNEL_ENABLE_FA3=OFF and ON in a real ``cmake`` configure of the patched logic, the
import falls back softly, policies are guarded, cccl is included, nvcc threads follow the define.

It writes ids and outcomes only, never upstream code: ``--json`` (tests/data/sgl_kernel_history.json,
read by tests/test_sgl_kernel_history.py) and ``--markdown`` (docs/sgl-kernel-history.md).
Exit status 0 when every revision passed, 1 when one failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import sgl_checks  # noqa: E402

LAYOUTS = {"sgl-kernel": "sgl-kernel", "aot": "python/sglang/kernels/aot"}
FILES = ("CMakeLists.txt", "python/sgl_kernel/flash_attn.py")
MARK = {True: "pass", False: "FAIL", None: "n/a"}


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True,
                          errors="surrogateescape").stdout


def blob(git_dir: str, blob_id: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "cat-file", "blob", blob_id], capture_output=True,
                          check=True).stdout.decode("utf-8", "surrogateescape")


def resolve_git_dir(path: str) -> str:
    p = Path(path)
    if (p / ".git").exists():
        return str(p / ".git")
    return str(p)


def walk(git_dir: str, ref: str) -> tuple[list[dict], list[str]]:
    """Distinct CMake-era revisions (oldest first) and the ids of the earlier setup.py-era commits."""
    paths = [f"{d}/{f}" for d in LAYOUTS.values() for f in FILES]
    log = git(git_dir, "log", "--reverse", "--format=%H %cs", ref, "--", *paths).split("\n")
    revisions: dict[tuple, dict] = {}
    setup_era: list[str] = []
    backend_of: dict[str, bool] = {}
    for entry in filter(None, log):
        commit, date = entry.split()
        listing = git(git_dir, "ls-tree", "-r", commit, "--", *paths,
                      *[f"{d}/pyproject.toml" for d in LAYOUTS.values()])
        blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listing.splitlines() if "\t" in line}
        for layout, folder in LAYOUTS.items():
            cmake = blobs.get(f"{folder}/CMakeLists.txt")
            if not cmake:
                continue
            project = blobs.get(f"{folder}/pyproject.toml")
            if project not in backend_of:
                backend_of[project] = bool(project) and "scikit_build_core" in blob(git_dir, project)
            if not backend_of[project]:
                setup_era.append(commit)
                continue
            flash = blobs.get(f"{folder}/{FILES[1]}")
            key = (layout, cmake, flash)
            if key not in revisions:
                revisions[key] = {"first_commit": commit, "date": date, "layout": layout, "cmake_blob": cmake,
                                  "flash_attn_blob": flash, "commits": []}
            revisions[key]["commits"].append(commit)
    return list(revisions.values()), setup_era


def run(args: argparse.Namespace) -> int:
    git_dir = resolve_git_dir(args.git_dir)
    head = git(git_dir, "rev-parse", args.ref).strip()
    head_date = git(git_dir, "log", "-1", "--format=%cs", head).strip()
    revisions, setup_era = walk(git_dir, args.ref)
    if args.limit:
        revisions = revisions[:args.limit]
    families: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sgl-history-") as tmp:
        prober = sgl_checks.Prober(Path(tmp) / "probe")
        for n, rev in enumerate(revisions, 1):
            scratch = Path(tmp) / f"r{n}"
            scratch.mkdir()
            cmake_text = blob(git_dir, rev["cmake_blob"])
            flash = blob(git_dir, rev["flash_attn_blob"]) if rev["flash_attn_blob"] else None
            res = sgl_checks.check_revision(cmake_text, flash, rev["layout"], scratch, prober)
            fam = families.setdefault(res["family"], {"id": rev["first_commit"][:9], "first_commit": rev["first_commit"],
                                                      "date": rev["date"], "features": res["features"],
                                                      "revisions": 0, "passed": 0})
            fam["revisions"] += 1
            fam["passed"] += bool(res["ok"])
            rev.update(family=fam["id"], statuses=res["statuses"], ok=res["ok"],
                       checks={k: MARK[v["ok"]] for k, v in res["checks"].items()},
                       details={k: v["detail"].replace(str(scratch) + "/tree/", "") for k, v in res["checks"].items()
                                if v["ok"] is not None})
            print(f"[{n}/{len(revisions)}] {rev['first_commit'][:9]} {rev['date']} {rev['layout']:10} "
                  f"{'ok' if res['ok'] else 'FAILED'} family {fam['id']}", flush=True)
            if not res["ok"]:
                for k, v in res["checks"].items():
                    if v["ok"] is False:
                        print(f"    {k}: {v['detail']}", flush=True)
        cmake_version = "%d.%d" % sgl_checks.cmake_version(prober.cmake)
    doc = {
        "generated_by": "scripts/sgl_history.py",
        "generated": dt.date.today().isoformat(),
        "source": args.source or git_dir,
        "ref": args.ref, "head": head, "head_date": head_date,
        "paths": {layout: [f"{folder}/{f}" for f in FILES] for layout, folder in LAYOUTS.items()},
        "cmake": cmake_version, "python": platform.python_version(),
        "checks": list(sgl_checks.CHECKS),
        "setup_py_era_commits": len(setup_era),
        "families": sorted(({"key": k, **v} for k, v in families.items()), key=lambda f: f["date"]),
        "revisions": revisions,
        "summary": {"revisions": len(revisions), "passed": sum(bool(r["ok"]) for r in revisions),
                    "refused_as_designed": sum(r["ok"] and r["statuses"] == {} for r in revisions),
                    "commits": sum(len(r["commits"]) for r in revisions), "families": len(families)},
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(doc))
    s = doc["summary"]
    print(f"{s['passed']}/{s['revisions']} distinct revisions passed ({s['commits']} commits, "
          f"{s['families']} construct families)")
    return 0 if s["passed"] == s["revisions"] else 1


def markdown(doc: dict) -> str:
    s = doc["summary"]
    out = [
        "# sgl-kernel's real history against patch_sgl_kernel.py",
        "",
        f"Generated by `{doc['generated_by']}` on {doc['generated']} (cmake {doc['cmake']}, Python {doc['python']})",
        f"from {doc['source']}, `{doc['ref']}` at `{doc['head']}` ({doc['head_date']}); the files walked:",
        ", ".join(f"`{p}`" for ps in doc["paths"].values() for p in ps) + ".",
        "",
        f"**{s['passed']} of {s['revisions']} distinct revisions passed** ({s['commits']} commits that touched "
        f"the files since the first CMake build; {doc['setup_py_era_commits']} earlier commits of the "
        "setup.py era are out of scope): "
        f"{s['passed'] - s['refused_as_designed']} are patched and pass every applicable check, "
        f"{s['refused_as_designed']} (FA3 compiled into common_ops with no switch) are refused as designed, "
        "with file, line and construct named and nothing changed. This table holds ids and outcomes only; "
        "no upstream code is in this repository. docs/sgl-kernel-patch.md says what runs in CI and what "
        "was run only here.",
        "",
        "## Construct families",
        "",
        "| family (first commit) | date | revisions | passed | layout | policies | FA3 | nvcc threads | flash_ops import |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in doc["families"]:
        ft = f["features"]
        out.append(f"| `{f['first_commit'][:9]}` | {f['date']} | {f['revisions']} | {f['passed']} | {ft['layout']} | "
                   f"{ft['policies']} | {ft['fa3']} | {ft['threads']} | {ft['import']} |")
    checks = doc["checks"]
    out += ["", "## Every distinct revision", "",
            "pass / FAIL / n/a per check (tests/support/sgl_checks.py says what each check does).", "",
            "| first commit | date | layout | CMakeLists.txt blob | flash_attn.py blob | commits | family | "
            + " | ".join(checks) + " |",
            "| " + " | ".join(["---"] * (7 + len(checks))) + " |"]
    for r in doc["revisions"]:
        out.append(f"| `{r['first_commit'][:12]}` | {r['date']} | {r['layout']} | `{r['cmake_blob'][:12]}` | "
                   f"`{(r['flash_attn_blob'] or 'none')[:12]}` | {len(r['commits'])} | `{r['family']}` | "
                   + " | ".join(r["checks"][c] for c in checks) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("git_dir", help="a clone (bare or not) of sgl-project/sglang or a fork following its main")
    ap.add_argument("--ref", default="main")
    ap.add_argument("--json", help="write the results (ids and outcomes) here")
    ap.add_argument("--markdown", help="write the human-readable table here")
    ap.add_argument("--source", help="where the clone came from, for the record")
    ap.add_argument("--limit", type=int, default=0, help="check only the first N revisions (a quick look)")
    args = ap.parse_args(argv)
    if not Path(args.git_dir).is_dir():
        print(f"sgl_history.py: error: {args.git_dir} is not a directory", file=sys.stderr)
        return 2
    try:
        return run(args)
    except subprocess.CalledProcessError as exc:
        print(f"sgl_history.py: error: {' '.join(exc.cmd[:6])}: {exc.stderr.strip()[:300]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
