#!/usr/bin/env python3
"""Verify an installed package on the host (stdlib only around the package; Python 3.8+).

usage: python -I verify_package.py --package NAME --venv VENV [--symbols a,b] [--sm 9.0,12.0]
                                    [--smoke] [--device cuda|cpu] [--fa3-fallback yes|no]

fleetctl runs it isolated from the login environment (``python -I``: no PYTHONPATH, no user
site-packages, not the script's folder on sys.path; cwd ``/``; VIRTUAL_ENV and CONDA_PREFIX unset),
so the package is imported from the venv, never from a source checkout. Checks, in order:

- ``torch``: torch imports (it is imported FIRST, as sgl-kernel-style extensions need); a venv
  without torch passes (``torch not installed``) and the package is verified without it;
- ``cuda`` (``--device cuda``, the host's facts list GPUs): torch sees a GPU; a CPU-only torch, or
  one that cannot reach the driver, FAILS here instead of passing its smoke test on the CPU;
- ``import``: the package imports (after torch);
- ``import-order``: the package imports in a fresh interpreter WITHOUT torch imported first; when
  it does only after torch, that FAILS by name ("import-order: NAME imports only after torch"):
  a user's ``import NAME`` would fail the same way;
- ``location``: the package was imported from the venv's site-packages;
- ``symbols``: every required attribute exists;
- ``archs``: ``build_info()["cuda_archs"]`` covers every SM given with ``--sm`` (when the package
  has ``build_info``);
- ``fa3-fallback``: for sgl_kernel, ``sgl_kernel.flash_attn.flash_ops is None`` when expected;
- ``smoke``: ``selfcheck(device)`` on the ``--device`` (the GPU on a host with GPUs).

Prints one line per check (``PASS name: detail`` / ``FAIL ...``) and, last, one JSON object.
Exit 0 when every check passed, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import traceback

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append({"name": name, "ok": bool(ok), "detail": str(detail)})
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)
    return ok


def start_import_alone(package):
    """Start importing the package in a fresh isolated interpreter (``-I``, cwd ``/``: no source
    tree or PYTHONPATH can stand in for the installed package) without torch first; it runs while
    this one imports torch (each is seconds of one core on a GPU host)."""
    return subprocess.Popen([sys.executable, "-I", "-c", "import %s" % package], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, cwd="/")


def imports_alone(proc):
    """(ok, message) of :func:`start_import_alone`'s interpreter."""
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return False, "import without torch first did not finish in 300 s"
    lines = out.strip().splitlines()
    return proc.returncode == 0, (lines[-1] if lines else "")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", required=True)
    ap.add_argument("--venv", default=None)
    ap.add_argument("--symbols", default="")
    ap.add_argument("--sm", default="", help="compute capabilities of the host's GPUs, comma separated")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cpu",
                    help="where the package must work: cuda on a host whose facts list GPUs")
    ap.add_argument("--fa3-fallback", choices=["yes", "no"], default=None)
    ap.add_argument("--strict-import-order", action="store_true", help=argparse.SUPPRESS)  # always strict now
    args = ap.parse_args(argv)
    summary = {"package": args.package, "python": sys.executable, "cwd": os.getcwd(),
               "isolated": bool(getattr(sys.flags, "isolated", 0)), "device": args.device}
    alone = start_import_alone(args.package)

    torch = None
    try:
        import torch

        check("torch", True, "torch %s (cuda %s) from %s" % (torch.__version__, torch.version.cuda,
                                                            os.path.dirname(torch.__file__)))
    except ImportError as exc:
        if getattr(exc, "name", None) == "torch":
            check("torch", True, "torch not installed: verifying %s without torch" % args.package)
        else:
            check("torch", False, "import torch failed: %r" % (exc,))
        torch = None
    except Exception as exc:  # noqa: BLE001 - report any import failure
        check("torch", False, "import torch failed: %r" % (exc,))
        torch = None

    if args.device == "cuda" and torch is not None:
        seen = torch.cuda.is_available()
        check("cuda", seen, "torch sees %d GPU(s): %s" % (torch.cuda.device_count(), torch.cuda.get_device_name(0))
              if seen else "torch %s (CUDA %s%s) cannot see the host's GPUs: install a CUDA build of torch that "
              "matches the driver, or fix the driver" % (torch.__version__, torch.version.cuda,
                                                         ": a CPU-only build" if torch.version.cuda is None else ""))

    after = " after torch" if torch is not None else ""
    try:
        module = __import__(args.package, fromlist=["_"])
        check("import", True, getattr(module, "__file__", "?"))
    except Exception as exc:  # noqa: BLE001
        check("import", False, "import %s%s failed: %s" % (args.package, after, exc))
        traceback.print_exc()
        module = None

    alone_ok, alone_msg = imports_alone(alone)
    if alone_ok:
        check("import-order", True, "imports with or without torch first")
    elif module is not None:
        check("import-order", False, "%s imports only after torch (%s): make %s import torch first"
              % (args.package, alone_msg, args.package.split(".")[0]))
    else:
        check("import-order", False, alone_msg)

    if module is not None:
        path = os.path.realpath(getattr(module, "__file__", "") or "")
        if args.venv:
            venv = os.path.realpath(args.venv)
            check("location", path.startswith(venv + os.sep) and "site-packages" in path,
                  "%s (venv %s)" % (path, venv))
        missing = [s for s in args.symbols.split(",") if s and not hasattr(module, s)]
        check("symbols", not missing, "missing: %s" % ", ".join(missing) if missing else
              "%d present" % len([s for s in args.symbols.split(",") if s]))

        info = module.build_info() if hasattr(module, "build_info") else None
        if info is not None:
            summary["build_info"] = info
        sms = [s for s in args.sm.split(",") if s]
        if sms and info is not None:
            have = set(info.get("cuda_archs") or info.get("archs") or [])
            want = ["sm_%s" % s.replace(".", "") for s in sms]
            lacking = [w for w in want if not any(h == w or h.startswith(w) for h in have)]
            check("archs", not lacking, "compiled %s; host needs %s" % (sorted(have), want))

        if args.fa3_fallback is not None:
            try:
                fa = __import__(args.package + ".flash_attn", fromlist=["_"])
                missing = object()
                fo = getattr(fa, "flash_ops", missing)
                state = "None (built without FA3)" if fo is None else (
                    "absent from flash_attn" if fo is missing else "present (FA3 built)")
                want = "None" if args.fa3_fallback == "yes" else "present"
                check("fa3-fallback", (fo is None) if args.fa3_fallback == "yes" else (fo is not None and fo is not missing),
                      "flash_attn.flash_ops is %s; expected %s" % (state, want))
            except Exception as exc:  # noqa: BLE001
                check("fa3-fallback", False, "import %s.flash_attn failed: %s" % (args.package, exc))

        cuda_ok = torch is not None and torch.cuda.is_available()
        if args.smoke and hasattr(module, "selfcheck") and (args.device == "cpu" or cuda_ok):
            device = "cuda" if args.device == "cuda" else "cpu"
            try:
                res = module.selfcheck(device=device)
                summary["selfcheck"] = res
                bad = [c for c in res.get("checks", []) if not c.get("ok")]
                check("smoke", res.get("ok") and not bad, "%s: %d checks%s" % (
                    device, len(res.get("checks", [])),
                    "; failed: " + "; ".join("%s (%s)" % (c["name"], c.get("detail")) for c in bad) if bad else ""))
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                check("smoke", False, "%s selfcheck raised %r" % (device, exc))

    summary["checks"] = RESULTS
    summary["ok"] = all(r["ok"] for r in RESULTS)
    print(json.dumps(summary, default=str))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
