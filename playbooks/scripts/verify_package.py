#!/usr/bin/env python3
"""Verify an installed package on the host (stdlib only around the package; Python 3.8+).

usage: python -I verify_package.py --package NAME --venv VENV [--symbols a,b] [--sm 9.0,12.0]
                                    [--smoke] [--device cuda|cpu] [--fa3-fallback yes|no]

fleetctl runs it isolated from the login environment (``python -I``: no PYTHONPATH, no user
site-packages, not the script's folder on sys.path; cwd ``/``; VIRTUAL_ENV and CONDA_PREFIX unset),
so the package is imported from the venv, never from a source checkout. Checks, in order:

- ``torch``: torch imports; a venv without torch passes (``torch not installed``) and the package is
  verified without it;
- ``cuda`` (``--device cuda``, the host's facts list GPUs): torch sees a GPU; a CPU-only torch, or
  one that cannot reach the driver, FAILS here instead of passing its smoke test on the CPU;
- ``install`` (only when it fails): the package's files in site-packages are a finished install:
  every file the ``.dist-info``'s RECORD lists there, with its size, or, with no dist-info, at
  least the package's ``__init__.py`` (:func:`install_problem`); an install cut short by a full
  disk leaves neither;
- ``modes`` (only when it fails): no installed folder or file of the package is less readable
  than its site-packages folder (:func:`modes_problem`): one made under a login's ``umask 077``
  is the login user's alone, and other users' ``import`` finds an empty namespace package;
- ``import``: the package imports (when it fails alone, once more after torch, as sgl-kernel-style
  extensions that need libtorch loaded would);
- ``import-order``: the package imports in a fresh interpreter WITHOUT torch imported first (this
  one: the package is imported before torch, :func:`import_alone`); when it does only after torch,
  that FAILS by name ("import-order: NAME imports only after torch"): a user's ``import NAME``
  would fail the same way;
- ``location``: the package was imported from the venv's site-packages;
- ``symbols``: every required attribute exists;
- ``archs``: ``build_info()["cuda_archs"]`` covers every SM given with ``--sm`` (when the package
  has ``build_info``);
- ``fa3-fallback``: for sgl_kernel, ``sgl_kernel.flash_attn.flash_ops is None`` when expected;
- ``smoke`` (``--device cpu``): ``selfcheck("cpu")``;
- ``gpu N`` (``--device cuda``), one per GPU the host's facts list (``--gpus``): ``selfcheck`` on
  that GPU (:func:`verify_devices`); a failing GPU is named by index, UUID and bus id; a GPU
  nvidia-smi lists and torch does not see FAILS, unless ``CUDA_VISIBLE_DEVICES`` (or
  ``NVIDIA_VISIBLE_DEVICES``) explains it: then a warning names the variable and both counts;
- ``login-import`` (``--login-env``, or a venv whose user site-packages is on its sys.path): the
  package as the host's users import it, with the login environment's :data:`LOGIN_PATH_VARS`
  (:func:`login_import_check`): FAILS when another copy of the package comes first there.

One interpreter start and one torch import per verify (the GPU checks share them); the
``login-import`` check adds one short interpreter start (``sys.path`` only), and a second one that
imports the package only when another copy shadows it or what it imports.

Prints one line per check (``PASS name: detail`` / ``FAIL ...``) and, last, one JSON object.
Exit 0 when every check passed, 1 otherwise.
"""

import argparse
import base64
import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
import sysconfig
import traceback

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append({"name": name, "ok": bool(ok), "detail": str(detail)})
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)
    return ok


def import_alone(package):
    """Import the package in THIS interpreter before anything imported torch: ``(module or None,
    ok, message)``. fleetctl starts the script with ``-I`` from ``/`` (no source tree or PYTHONPATH
    can stand in for the installed package) and the script imports only the standard library before
    this, so the interpreter is as fresh as a user's ``python -c "import NAME"``: one interpreter
    start and one torch import (the package's own) per verify, not two. ``message`` is the last
    line of the error (``ImportError: libc10.so: ...``) when it fails."""
    try:
        return __import__(package, fromlist=["_"]), True, ""
    except BaseException as exc:  # noqa: BLE001 - any failure (SystemExit included) is the result
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, False, "%s: %s" % (type(exc).__name__, exc)


#: Variables that hide GPUs from CUDA (CUDA C Programming Guide, "CUDA Environment Variables";
#: NVIDIA Container Toolkit): set in the login environment, torch sees fewer GPUs than nvidia-smi.
VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def _gpu_count(gpus_json):
    """How many GPUs ``--gpus`` lists, as text ("2"), or "some" when it lists none or is unreadable."""
    try:
        return str(len(json.loads(gpus_json))) if gpus_json and json.loads(gpus_json) else "some"
    except ValueError:
        return "some"


def hidden_by(environ):
    """``CUDA_VISIBLE_DEVICES=''`` (the first of :data:`VISIBILITY_VARS` set in ``environ``, as
    ``NAME='VALUE'``), or None: the variable that hides GPUs from torch."""
    for name in VISIBILITY_VARS:
        if name in environ and not (name == "NVIDIA_VISIBLE_DEVICES" and environ[name] in ("all", "")):
            return "%s=%r" % (name, environ[name])
    return None


def _norm_uuid(value):
    text = str(value or "").strip().lower()
    return text[4:] if text.startswith("gpu-") else text or None


def torch_devices(torch):
    """The GPUs torch sees: ``[{"ordinal", "name", "uuid", "pci_bus_id"}]`` (uuid in nvidia-smi's
    ``GPU-...`` form and bus id ``DDDDDDDD:BB:DD.0`` when this torch's device properties have them)."""
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        uuid = getattr(props, "uuid", None)
        bus = None
        if hasattr(props, "pci_bus_id"):
            bus = "%08X:%02X:%02X.0" % (getattr(props, "pci_domain_id", 0), props.pci_bus_id,
                                        getattr(props, "pci_device_id", 0))
        out.append({"ordinal": i, "name": getattr(props, "name", "?"),
                    "uuid": ("GPU-%s" % uuid) if uuid is not None and not str(uuid).startswith("GPU-") else uuid,
                    "pci_bus_id": bus})
    return out


def describe_gpu(gpu):
    """``GPU 1 (NVIDIA H200, GPU-..., bus 00000000:18:00.0)``: a GPU named by index, UUID and bus id."""
    parts = [p for p in (gpu.get("name"), gpu.get("uuid"), gpu.get("pci_bus_id") and "bus %s" % gpu["pci_bus_id"]) if p]
    return "GPU %s (%s)" % (gpu.get("index", "?"), ", ".join(parts) or "?")


def match_devices(expected, seen, env):
    """Pair each GPU the host's facts list with the torch ordinal that is that GPU.

    Args:
        expected: the facts' GPUs (``index``, ``uuid``, ``pci_bus_id``, ``name``); empty: every
            GPU torch sees is expected.
        seen: :func:`torch_devices`.
        env: the environment (:data:`VISIBILITY_VARS` are looked up in it).

    Returns:
        ``(pairs, warnings, missing)``: ``pairs`` ``[(gpu, ordinal)]``; ``missing`` the GPUs torch
        does not see while no visibility variable explains it (each fails verify); ``warnings``
        one line naming the variable and both counts when one does. Matched by UUID when both
        sides have one, else by bus id, else (no visibility variable) by position.
    """
    if not expected or (all(str(g.get("mig_mode") or "").lower() == "enabled" for g in expected) and seen):
        return [(dict(d, index=d["ordinal"]), d["ordinal"]) for d in seen], [], []
    hiding = [(name, env[name]) for name in VISIBILITY_VARS if env.get(name) not in (None, "")]
    by_uuid = {_norm_uuid(d.get("uuid")): d["ordinal"] for d in seen if d.get("uuid")}
    by_bus = {str(d["pci_bus_id"]).upper(): d["ordinal"] for d in seen if d.get("pci_bus_id")}
    pairs, unseen, used = [], [], set()
    for pos, gpu in enumerate(expected):
        ordinal = by_uuid.get(_norm_uuid(gpu.get("uuid"))) if gpu.get("uuid") and by_uuid else None
        if ordinal is None and gpu.get("pci_bus_id") and by_bus:
            ordinal = by_bus.get(str(gpu["pci_bus_id"]).upper())
        if ordinal is None and not by_uuid and not by_bus and not hiding and pos < len(seen):
            ordinal = seen[pos]["ordinal"]
        if ordinal is None or ordinal in used:
            unseen.append(gpu)
            continue
        used.add(ordinal)
        pairs.append((gpu, ordinal))
    warnings, missing = [], []
    mig = [g for g in unseen if str(g.get("mig_mode") or "").lower() == "enabled"]
    if mig:  # CUDA lists a MIG-enabled GPU's instances (MIG-... UUIDs), never the GPU itself
        warnings.append("MIG is enabled on %s: CUDA sees its MIG instances, not the GPU: not verified as a whole"
                        % "; ".join(describe_gpu(g) for g in mig))
        unseen = [g for g in unseen if g not in mig]
    if unseen and hiding:
        warnings.append("%s in the login environment: torch sees %d of the %d GPUs nvidia-smi lists; not verified: %s"
                        % (", ".join("%s=%s" % kv for kv in hiding), len(seen), len(expected),
                           "; ".join(describe_gpu(g) for g in unseen)))
    else:
        missing = unseen
    return pairs, warnings, missing


def verify_devices(expected, seen, env, run_one):
    """The per-GPU verify loop: every GPU the host has, not only device 0.

    Args:
        expected, seen, env: see :func:`match_devices`.
        run_one: ``run_one(ordinal) -> (ok, detail)``: the check on one torch device (the
            package's selfcheck there); an exception counts as a failure.

    Returns:
        ``(checks, warnings, devices)``: ``checks`` ``[{"name": "gpu N", "ok", "detail"}]``, one per
        GPU (a GPU torch does not see fails, named by index, UUID and bus id); ``devices``
        ``[{"index", "uuid", "pci_bus_id", "ordinal", "ok"}]``.
    """
    pairs, warnings, missing = match_devices(expected, seen, env)
    checks, devices = [], []
    for gpu, ordinal in pairs:
        try:
            ok, detail = run_one(ordinal)
        except Exception as exc:  # noqa: BLE001 - a failing GPU is a result
            ok, detail = False, "%s: %s" % (type(exc).__name__, exc)
        checks.append({"name": "gpu %s" % gpu.get("index", ordinal), "ok": bool(ok),
                       "detail": "%s as cuda:%d: %s" % (describe_gpu(gpu), ordinal, detail)})
        devices.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
                        "ordinal": ordinal, "ok": bool(ok)})
    for gpu in missing:
        checks.append({"name": "gpu %s" % gpu.get("index", "?"), "ok": False,
                       "detail": "%s: nvidia-smi lists it, torch does not see it (torch sees %d of %d GPUs)"
                                 % (describe_gpu(gpu), len(seen), len(expected))})
        devices.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
                        "ordinal": None, "ok": False})
    if not pairs and not missing and not warnings:
        checks.append({"name": "gpu", "ok": False, "detail": "torch sees no GPU"})
    return checks, warnings, devices


def torch_smoke_on(torch, ordinal):
    """``(ok, detail)`` of a tiny kernel on ``cuda:ORDINAL`` (for a package without selfcheck)."""
    x = torch.arange(1024, dtype=torch.float32, device="cuda:%d" % ordinal)
    got = float((x * 2).sum().item())
    return got == 1047552.0, "sum(2 * arange(1024)) = %g" % got


def selfcheck_on(torch, module, ordinal):
    """``(ok, detail)`` of ``module.selfcheck`` on torch device ``cuda:ORDINAL`` (made the current
    device, so kernels launch there)."""
    with torch.cuda.device(ordinal):
        res = module.selfcheck(device="cuda:%d" % ordinal)
    bad = [c for c in res.get("checks", []) if not c.get("ok")]
    return bool(res.get("ok")) and not bad, "%d checks%s" % (
        len(res.get("checks", [])), "; failed: " + "; ".join("%s (%s)" % (c["name"], c.get("detail")) for c in bad)
        if bad else "")


#: Login-environment variables that change what the venv's python imports (Python's docs, "Command
#: line and environment", and the ``site`` module): PYTHONPATH's folders come before the standard
#: library and the venv; PYTHONUSERBASE moves the user site-packages, which a venv with
#: ``include-system-site-packages = true`` puts after its own site-packages and BEFORE the system's
#: (so it shadows what the venv takes from the system); PYTHONNOUSERSITE drops it; PYTHONHOME moves
#: the standard library. ``python -I`` ignores them all, the users' jobs do not.
LOGIN_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE")


def login_environ(login_env, environ=None):
    """``environ`` (default this process's) with :data:`LOGIN_PATH_VARS` as the login sets them."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if k not in LOGIN_PATH_VARS}
    env.update({k: v for k, v in login_env.items() if k in LOGIN_PATH_VARS and v})
    return env


def user_site(environ):
    """The user site-packages folder ``environ`` gives this python (PYTHONUSERBASE, else ``~/.local``)."""
    base = environ.get("PYTHONUSERBASE") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local")
    return sysconfig.get_path("purelib", "posix_user", vars={"userbase": base})


def user_site_on(venv):
    """True when the venv's ``pyvenv.cfg`` says ``include-system-site-packages = true``: the user
    site-packages is then on its sys.path (after the venv's own, before the system's)."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    return any(k.strip().lower() == "include-system-site-packages" and v.strip().lower() == "true"
               for k, _, v in (line.partition("=") for line in lines))


def _real(path):
    return os.path.realpath(os.path.abspath(path))


def _run_login(code, environ, timeout_s):
    """``(rc, stdout, last stderr line)`` of this venv's python ``-c code`` in ``environ``, from ``/``."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=environ, cwd="/", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "", "%s: %s" % (type(exc).__name__, exc)
    err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return proc.returncode, proc.stdout, err[-1] if err else "exit status %s" % proc.returncode


def shadows(names, login_path, own_path):
    """``[(name, login_file, own_file, entry)]``: the loaded top-level modules whose first copy on
    ``login_path`` is another file, under a folder ``entry`` that ``own_path`` (this isolated
    interpreter's sys.path) lacks (``importlib.machinery.PathFinder``: the path search Python does)."""
    own = set(_real(p) for p in own_path if p)
    extra = [p for p in login_path if p and _real(p) not in own]
    out = []
    for name in names:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if spec is None or not getattr(spec, "has_location", False) or not spec.origin:
            continue
        try:
            found = importlib.machinery.PathFinder.find_spec(name, login_path)
        except Exception:  # noqa: BLE001 - an unreadable folder shadows nothing
            continue
        origin = getattr(found, "origin", None)
        if not origin or origin == "namespace" or _real(origin) == _real(spec.origin):
            continue
        entry = next((p for p in extra if _real(origin).startswith(_real(p) + os.sep)), None)
        if entry:
            out.append((name, _real(origin), _real(spec.origin), entry))
    return out


def source_of(entry, login_env, environ, copy):
    """``(what put entry on the login sys.path, the fix)``; ``copy``: the shadowing file or package folder."""
    for part in (login_env.get("PYTHONPATH") or "").split(os.pathsep):
        if part and _real(os.path.join("/", part)) == _real(entry):
            return ("PYTHONPATH=%s in the login environment" % login_env["PYTHONPATH"],
                    "remove PYTHONPATH (or %s in it) from the login environment (the rc file or module that "
                    "exports it: ~/.bashrc, ~/.profile, /etc/profile.d/...), or delete %s" % (part, copy))
    if _real(entry) == _real(user_site(environ)):
        what = ("PYTHONUSERBASE=%s in the login environment" % login_env["PYTHONUSERBASE"]
                if login_env.get("PYTHONUSERBASE") else "the user site-packages %s" % entry)
        return (what + " (a venv with include-system-site-packages = true puts it before the system's)",
                "delete %s (pip uninstall --user), or set PYTHONNOUSERSITE=1 in the login environment" % copy)
    if login_env.get("PYTHONHOME"):
        return ("PYTHONHOME=%s in the login environment" % login_env["PYTHONHOME"],
                "remove PYTHONHOME from the login environment")
    return "%s on the login sys.path" % entry, "delete %s" % copy


def login_import_check(package, login_env, environ=None, timeout_s=300):
    """The package as the host's users import it: this venv's python WITHOUT ``-I``, in the login
    environment (``login_env``: its :data:`LOGIN_PATH_VARS`, from fleetctl's facts, since fleetctl
    runs this script with them unset), compared with this isolated interpreter's imports (the
    venv's installed copy).

    Returns ``(ok, detail, warnings)``: not ok when the login sys.path finds another copy of the
    package first (whether that copy imports or not: every job of the host's users gets it), or
    when the package does not import there (a shadowed dependency, or a python that does not start
    with the login's PYTHONHOME); detail names the variable, its value, the shadowing path and the
    fix. A dependency (torch...) shadowed by a copy that still imports is a warning."""
    env = login_environ(login_env, environ)
    shown = ", ".join("%s=%s" % (k, login_env[k]) for k in LOGIN_PATH_VARS if login_env.get(k)) or \
        "the user site-packages %s" % user_site(env)
    rc, out, err = _run_login("import json, os, sys\np = sys.path\n"
                              "print(json.dumps(p[1:] if p and p[0] in ('', os.getcwd()) else p))", env, 60)
    try:
        login_path = json.loads(out.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        login_path, err = None, "printed no sys.path"
    if not isinstance(login_path, list):
        return False, ("the venv's python does not start with %s of the login environment: %s; remove it from "
                       "the login environment (the rc file that exports it)" % (shown, err)), []
    top = package.split(".")[0]
    found = shadows([top] + sorted(n for n in sys.modules if "." not in n and n != top), login_path, sys.path)
    if not found:
        return True, ("imports the venv's copy with %s (the login environment): no other copy of %s or of what "
                      "it imports comes first" % (shown, top)), []
    rc, out, err = _run_login("import importlib; m = importlib.import_module(%r); print(getattr(m, '__file__', ''))"
                              % package, env, timeout_s)
    imported = "imports it" if rc == 0 else "fails: %s" % err
    lines = []
    for name, login_file, own_file, entry in found:
        copy = os.path.dirname(login_file) if os.path.basename(login_file).startswith("__init__.") else login_file
        what, fix = source_of(entry, login_env, env, copy)
        lines.append("%s comes from %s (%s), not the venv's %s: %s" % (name, login_file, what, own_file, fix))
    if found[0][0] == top or rc != 0:
        return False, ("as the host's users import it (the venv's python with %s), `import %s` %s; %s"
                       % (shown, package, imported, "; ".join(lines))), []
    return True, "imports the venv's copy with %s (the login environment)" % shown, lines


def site_dirs():
    """This interpreter's site-packages folders (purelib, platlib), each once."""
    paths = sysconfig.get_paths()
    return sorted({p for p in (paths.get("purelib"), paths.get("platlib")) if p and os.path.isdir(p)})


def _record_rows(dist_info):
    rows = []
    with open(os.path.join(dist_info, "RECORD"), encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.rstrip("\n").rsplit(",", 2)
            if len(parts) == 3 and parts[0]:
                rows.append((parts[0], int(parts[2]) if parts[2].isdigit() else None, parts[1]))
    return rows


def changed_in_place(path, hashed):
    """Whether the file at ``path`` is not what RECORD's hash (``hashed``: PEP 376 / PEP 627,
    ``sha256=<urlsafe base64 without padding>``) says: a file overwritten at its own size. False
    when RECORD gives no hash (or one of an algorithm hashlib does not guarantee) or the file is
    unreadable. Reads the file (a package's own files, ~11 MB for fp4_kernels)."""
    algo, _, want = (hashed or "").partition("=")
    if not want or algo not in hashlib.algorithms_guaranteed:
        return False
    h = hashlib.new(algo)
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return False
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != want


def install_problem(package, sites):
    """Why the install of ``package`` in ``sites`` is incomplete, or None: a package folder with
    no ``.dist-info`` whose RECORD lists it and no ``__init__.py`` (pip writes the dist-info last,
    so an install cut short, by ENOSPC for one, has none; a package copied in by hand, whole, has
    its ``__init__.py`` and is not judged), or files that RECORD lists missing, of another size
    (a truncated ``.so``) or, at RECORD's size, of another hash (bytes overwritten in place:
    :func:`changed_in_place`; a size check alone said ok of such a host, operator trial). The fix
    named: ``fleetctl deploy --force``."""
    top = package.split(".")[0]
    fix = "; fix: free space in the venv if it is full, then fleetctl deploy --force (reinstalls it)"
    for site in sites:
        here = [n for n in os.listdir(site) if n == top or n.startswith(top + ".") and n.endswith((".py", ".so"))]
        if not here:
            continue
        for name in sorted(n for n in os.listdir(site) if n.endswith(".dist-info")):
            try:
                rows = _record_rows(os.path.join(site, name))
            except OSError:
                continue
            if not any(r[0].split("/")[0] in here for r in rows):
                continue
            bad, changed = [], 0
            for rel, size, hashed in rows:
                if rel.endswith(".pyc"):  # byte code pip compiled: removing it harms nothing
                    continue
                path = os.path.normpath(os.path.join(site, rel))
                if not os.path.lexists(path):
                    bad.append("%s missing" % rel)
                elif size is not None and os.path.getsize(path) != size:
                    bad.append("%s %d of %d bytes" % (rel, os.path.getsize(path), size))
                elif not rel.startswith("..") and changed_in_place(path, hashed):  # not bin/'s scripts
                    changed += 1
                    bad.append("%s changed in place (its %s is not RECORD's, same size)" % (rel, hashed.partition("=")[0]))
            if not bad:
                return None
            how = "missing, truncated or changed" if changed else "missing or truncated"
            return ("%s in %s is incomplete: %d file(s) its %s/RECORD lists are %s (%s%s)%s"
                    % (top, site, len(bad), name, how, "; ".join(bad[:3]), "; ..." if len(bad) > 3 else "", fix))
        if top in here and not os.path.exists(os.path.join(site, top, "__init__.py")):
            return ("%s in %s is incomplete: no .dist-info lists it and its __init__.py is missing (an install cut "
                    "short: pip writes the dist-info last)%s" % (top, site, fix))
        return None  # a whole package put there by hand, not by pip: not for this check to judge
    return None


def modes_problem(package, sites):
    """Why other users of the venv cannot import the installed ``package``, or None: its folders
    and files (the package, its modules, its ``.dist-info``; not ``__pycache__``, which Python
    writes at import with the importer's umask and only reads when it may) lacking a read bit
    (folders: read or search) that their site-packages folder gives group or other. An install
    made under a login's ``umask 077`` (``~/.bashrc``) by an older fleetctl left ``drwx------``
    folders in a 0755 site-packages: another user's ``import`` found an empty namespace package
    and verify, run as the owner, said ok (operator trial; fleetctl.tasks.venv_modes). The fix
    named: a deploy, which installs it again under site-packages' modes."""
    top = package.split(".")[0]
    for site in sites:
        try:
            want_file, want_dir = os.stat(site).st_mode & 0o044, os.stat(site).st_mode & 0o055
            names = sorted(os.listdir(site))
        except OSError:
            continue
        mine = [n for n in names if n == top or n.startswith(top + ".") and n.endswith((".py", ".so"))
                or n.endswith(".dist-info") and n.split("-")[0].replace(".", "_").lower() == top.lower()]
        if not mine:
            continue
        bad = []

        def judge(path, want, slash=""):
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                return
            if not os.path.islink(path) and mode & want != want:
                bad.append("%s%s %04o" % (os.path.relpath(path, site), slash, mode & 0o777))
        for name in mine:
            path = os.path.join(site, name)
            if not os.path.isdir(path) or os.path.islink(path):
                judge(path, want_file)
                continue
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                judge(folder, want_dir, "/")
                for f in sorted(files):
                    judge(os.path.join(folder, f), want_file)
        if not bad:
            return None
        return ("%s in %s is less readable than its site-packages (%04o): %s%s: other users of the venv cannot "
                "import it (installed under a umask such as 077); fix: fleetctl deploy (installs it again with "
                "site-packages' modes)" % (top, site, os.stat(site).st_mode & 0o777, ", ".join(bad[:3]),
                                           " and %d more" % (len(bad) - 3) if len(bad) > 3 else ""))
    return None


def stash_left(package, sites):
    """The warning naming pip's uninstall stash of ``package`` left in a site folder, or None: pip
    moves the installed folders aside before an install (``AdjacentTempDirectory``: the name with
    its first characters replaced by ``~`` and ``-~.=%0-9``, same length: ``~p4_kernels``,
    ``~p4_kernels-0.1.0.dist-info``) and removes them after; a removal that fails (a folder another
    user owns, after a ``sudo pip install``) leaves them (operator trial). Python never imports
    them: a warning, with its removal, not a failed check."""
    import pwd
    top, found = package.split(".")[0], []
    for site in sites:
        for n in sorted(os.listdir(site)):
            core = n.lstrip("-~.=%0123456789")
            k = len(n) - len(core)
            if not n.startswith("~") or not core or k >= len(top):
                continue
            if (len(n) == len(top) and top.endswith(core)) or (
                    n.endswith(".dist-info") and core.startswith(top[k:] + "-")):
                path = os.path.join(site, n)
                try:
                    owner = pwd.getpwuid(os.stat(path).st_uid).pw_name
                except (KeyError, OSError):
                    owner = "another user"
                found.append((path, owner))
    if not found:
        return None
    me = pwd.getpwuid(os.geteuid()).pw_name if hasattr(os, "geteuid") else None
    sudo = "sudo " if any(o != me for _, o in found) else ""
    return ("pip's uninstall stash of %s remains from an install that failed half-way: %s; remove it: %srm -rf %s"
            % (top, ", ".join("%s (owned by %s)" % f for f in found), sudo, " ".join(p for p, _ in found)))


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
    ap.add_argument("--gpus", default="", help="JSON list of the GPUs the host's facts list (index, uuid, "
                                               "pci_bus_id, name): each is verified")
    ap.add_argument("--login-env", default="", help="JSON: the login environment's PYTHONPATH, PYTHONUSERBASE, "
                                                    "PYTHONNOUSERSITE, PYTHONHOME (fleetctl's facts)")
    ap.add_argument("--strict-import-order", action="store_true", help=argparse.SUPPRESS)  # always strict now
    args = ap.parse_args(argv)
    summary = {"package": args.package, "python": sys.executable, "cwd": os.getcwd(),
               "isolated": bool(getattr(sys.flags, "isolated", 0)), "device": args.device}
    alone_module, alone_ok, alone_msg = import_alone(args.package)

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
        hidden = hidden_by(os.environ) if not seen and torch.version.cuda is not None else None
        if seen:
            detail = "torch sees %d GPU(s): %s" % (torch.cuda.device_count(), torch.cuda.get_device_name(0))
        elif hidden:
            detail = ("torch sees none of the GPUs nvidia-smi lists (%s): %s in the login environment hides them; "
                      "unset it (or list the GPUs) where the login shell or the job sets it"
                      % (_gpu_count(args.gpus), hidden))
        else:
            # "(CPU-only build)", never "(CUDA None)" (fleetctl/util/torchname.py's wording)
            detail = ("torch %s (%s) cannot see the host's GPUs: install a CUDA build of torch that "
                      "matches the driver, or fix the driver" % (torch.__version__, "CPU-only build" if torch.version.cuda
                                                                 is None else "CUDA %s" % torch.version.cuda))
        check("cuda", seen, detail)

    incomplete = install_problem(args.package, site_dirs())
    if incomplete:
        check("install", False, incomplete)
    unreadable = modes_problem(args.package, site_dirs())
    if unreadable:
        check("modes", False, unreadable)
    after = " after torch" if torch is not None else ""
    module = alone_module
    try:
        if module is None:  # it failed alone: once more after torch, to tell the two faults apart
            module = __import__(args.package, fromlist=["_"])
        check("import", True, getattr(module, "__file__", "?"))
    except Exception as exc:  # noqa: BLE001
        check("import", False, "import %s%s failed: %s" % (args.package, after, exc))
        traceback.print_exc()
        module = None

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
            inside = path.startswith(venv + os.sep) and "site-packages" in path
            check("location", inside, "%s (venv %s)" % (path, venv) if inside else
                  "the venv's python imports %s from %s, outside the venv's site-packages (venv %s): another copy "
                  "comes first on sys.path (a .pth file, --system-site-packages or a user site)"
                  % (args.package, path, venv))
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
        if args.device == "cuda" and cuda_ok:
            expected = json.loads(args.gpus) if args.gpus else []
            full = args.smoke and hasattr(module, "selfcheck")
            checks, warnings, devices = verify_devices(
                expected, torch_devices(torch), os.environ,
                (lambda n: selfcheck_on(torch, module, n)) if full else (lambda n: torch_smoke_on(torch, n)))
            for c in checks:
                check(c["name"], c["ok"], c["detail"])
            summary["devices"], summary["warnings"] = devices, warnings
            if full:
                summary["selfcheck"] = {"device": "%d GPU(s)" % len([d for d in devices if d["ordinal"] is not None])}
            for w in warnings:
                print("WARN gpus: %s" % w, flush=True)
        elif args.smoke and hasattr(module, "selfcheck") and args.device == "cpu":
            device = "cpu"
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

        login_env = json.loads(args.login_env) if args.login_env else {}
        if login_env or (args.venv and user_site_on(args.venv) and os.path.isdir(user_site(os.environ))):
            ok, detail, warned = login_import_check(args.package, login_env)
            check("login-import", ok, detail)
            summary["warnings"] = summary.get("warnings", []) + warned
            for w in warned:
                print("WARN login-import: %s" % w, flush=True)

    try:
        stash = stash_left(args.package, site_dirs())
    except (OSError, KeyError):
        stash = None
    if stash:
        summary["warnings"] = summary.get("warnings", []) + [stash]
        print("WARN install: %s" % stash, flush=True)
    summary["checks"] = RESULTS
    summary["ok"] = all(r["ok"] for r in RESULTS)
    print(json.dumps(summary, default=str))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
