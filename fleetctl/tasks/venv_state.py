"""What a venv holds, as the install tasks read it: the install-state probe (:data:`STATE_SCRIPT`:
fleetctl's install record, the installed distribution and a digest of its RECORD, torch's version
and CUDA build, every distribution's version, a wheel's build stamp) and the pure readings of its
answer and of ``pip check`` (PEP 376 dist-info, PEP 503 names). Planners run the probe; nothing
here does I/O. Used by ``pip_install`` (:mod:`.pip_install`) and ``venv_upgrade``."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Any

from ..connection.base import CommandResult
from .base import first_error_line
from .venv_probe import probe_started

#: Reads fleetctl's install record, the installed distribution (version, location, a digest of its
#: RECORD without the installer's own files), torch's version and CUDA build without importing
#: torch, every distribution's version (``dists``, names normalised) and the wheel's build stamp
#: (``stamp``). stdlib only, Python 3.8+. argv: DIST RECORD_PATH [STAMP_PATH]. Install records are
#: per venv (:data:`RECORD_LAYOUT`): RECORD_PATH (``<workdir>/installed/<dist>.json``) names the
#: records folder and the file name; the record read is this venv's own (:func:`record_path` of
#: ``venv`` in the answer, the real path of ``sys.prefix``), and one that does not name this venv
#: counts for none (a record of an older fleetctl, one per host, named no venv). A distribution is
#: found as ``importlib.metadata.distribution(DIST)`` finds it (the first ``.dist-info``/``.egg-info``
#: of that normalized name along sys.path) without importing importlib.metadata, whose import is
#: most of this probe's time; tests/test_planners.py checks both agree. With FLEETCTL_PROBE_DEPS=1
#: it also prints (stderr, one marked line) every file and folder it read, statted before reading:
#: the run's first command keeps the answer on the host while they are unchanged (issue 27).
STATE_SCRIPT = r'''
import json, os, re, sys
print("@@FLEETCTL_PROBE_STARTED@@", flush=True)
import importlib.util
# FLEETCTL_PROBE_DEPS=1 (the run's first command sets it): every file and folder this answer is
# read from is statted before it is read, and the list printed on stderr (one marked line), so the
# host may keep the answer while they stat the same (fleetctl.engine.session_start's KeptAnswers)
DEPS = [] if os.environ.get("FLEETCTL_PROBE_DEPS") == "1" else None


def dep(path):
    if DEPS is not None:
        try:
            st = os.stat(path)
            DEPS.append([path, [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode]])
        except (OSError, ValueError):
            DEPS.append([path, None])


if DEPS is not None:  # what makes sys.path: the interpreter, pyvenv.cfg, the site folders and their .pth files
    import site
    # sys.prefix itself (followed): a venv path that now points at another folder reads another record
    for path in (sys.executable, os.path.realpath(sys.executable), sys.prefix, os.path.join(sys.prefix, "pyvenv.cfg")):
        dep(path)
    sites = list(getattr(site, "getsitepackages", lambda: [])())
    sites += [site.USER_SITE] if isinstance(getattr(site, "USER_SITE", None), str) else []
    for folder in sites:
        dep(folder)
        try:
            for n in sorted(os.listdir(folder)):
                if n.endswith(".pth"):
                    dep(os.path.join(folder, n))
        except OSError:
            pass
# the venv this interpreter runs (its real path) and its own install record: one folder per venv
# under the records folder (fleetctl.tasks.venv_state.RECORD_LAYOUT, record_path), never another venv's
VENV = os.path.realpath(sys.prefix)
import hashlib
RECORD_FILE = os.path.join(os.path.dirname(sys.argv[2]), hashlib.sha256(VENV.encode()).hexdigest()[:16],
                           os.path.basename(sys.argv[2]))
out = {"record": None, "dist": None, "torch": None, "cuda": None, "dists": {}, "stamp": None, "venv": VENV}
for key, path in (("record", RECORD_FILE), ("stamp", sys.argv[3] if len(sys.argv) > 3 else "")):
    dep(path)
    try:
        with open(path) as fh:
            out[key] = json.load(fh)
    except (OSError, ValueError):
        pass
if not isinstance(out["record"], dict) or out["record"].get("venv") != VENV:
    out["record"] = None  # a record that names no venv, or another one, counts for none


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def meta_version(info):
    # the Version header (headers end at the first blank line): the rest, the long description, is not read
    path = os.path.join(info, "METADATA" if info.endswith(".dist-info") else "PKG-INFO")
    dep(path)
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    return None
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return None


found = {}
copies = []  # every folder on sys.path holding the asked distribution, in import order
for entry in sys.path:
    folder = entry or "."
    dep(os.path.abspath(folder))
    try:
        listing = sorted(os.listdir(folder))
    except OSError:
        continue
    for item in listing:
        if item.endswith((".dist-info", ".egg-info")):
            name = norm(item.rsplit(".", 1)[0].split("-")[0])
            if name == norm(sys.argv[1]) and folder not in copies:
                copies.append(folder)
            if name not in found:
                found[name] = (folder, os.path.join(folder, item))


def pth_of(location):
    # the .pth file (site docs: a line is a folder added after its site folder; a line starting
    # with "import" is run, and may put a folder anywhere) that put location on sys.path, or None
    import site
    want = os.path.realpath(location)
    sites = list(getattr(site, "getsitepackages", lambda: [])())
    sites += [site.USER_SITE] if isinstance(getattr(site, "USER_SITE", None), str) else []
    for sitedir in sites:
        try:
            names = sorted(n for n in os.listdir(sitedir) if n.endswith(".pth"))
        except OSError:
            continue
        for n in names:
            for line in (read(os.path.join(sitedir, n)) or "").splitlines():
                if not line.strip() or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    if want in line or location in line:
                        return os.path.join(sitedir, n)
                elif os.path.realpath(os.path.join(sitedir, line.rstrip())) == want:
                    return os.path.join(sitedir, n)
    return None
for name, (folder, info) in found.items():
    try:
        out["dists"][name] = meta_version(info)
    except Exception:
        pass
try:
    location, info = found.get(norm(sys.argv[1]), (None, None))
    if info is not None:
        version = out["dists"].get(norm(sys.argv[1]))
        skip = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
        dep(os.path.join(info, "RECORD"))
        lines = sorted(l for l in (read(os.path.join(info, "RECORD")) or "").splitlines()
                       if l and not l.split(",")[0].endswith(skip) and "__pycache__" not in l)
        # every installed file of the distribution at the size its RECORD says (a stat each: a
        # truncated or deleted file is found without reading it; PEP 376 / PEP 627 RECORD), and,
        # with argv[4] "hash" (pip_install's probe: a package's own files, ~11 MB), of the hash
        # RECORD gives ("sha256=<urlsafe base64, no padding>"): a file overwritten in place at its
        # own size is found too
        damaged = []
        hashing = sys.argv[4:5] == ["hash"]
        # the read (and, for folders, search) bits site-packages gives group and other that an
        # installed file or folder lacks (fleetctl.tasks.venv_modes: an install under umask 077)
        try:
            site_mode = os.stat(location).st_mode & 0o777
        except OSError:
            site_mode = 0
        unreadable, unreadable_dirs = [], []
        for line in lines:
            parts = line.rsplit(",", 2)
            if len(parts) != 3 or not parts[2].isdigit():
                continue
            path = os.path.normpath(os.path.join(location, parts[0]))
            dep(path)
            try:
                st = os.stat(path)
                size = st.st_size
            except OSError:
                damaged.append("%s missing" % parts[0])
                continue
            if not parts[0].startswith("..") and st.st_mode & site_mode & 0o044 != site_mode & 0o044:
                unreadable.append("%s %04o" % (parts[0], st.st_mode & 0o777))
            if size != int(parts[2]):
                damaged.append("%s is %d bytes, RECORD says %s" % (parts[0], size, parts[2]))
            elif (hashing and "=" in parts[1] and parts[1].split("=", 1)[0] in hashlib.algorithms_guaranteed
                  and not parts[0].startswith("..")):  # the site folder's own files, not bin/'s scripts
                algo, want = parts[1].split("=", 1)
                h = hashlib.new(algo)
                try:
                    with open(path, "rb") as fh:
                        for block in iter(lambda: fh.read(1 << 20), b""):
                            h.update(block)
                except OSError:
                    continue  # unreadable to the login user: not judged here
                import base64
                if base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != want:
                    damaged.append("%s is %s bytes as RECORD says, but its %s is not RECORD's (changed in place)"
                                   % (parts[0], parts[2], algo))
        # the folders pip must empty to replace the install (each holding a file RECORD lists, up to
        # the site folder): pip moves them aside and then removes them, which needs write access to
        # each (a folder owned by root after a sudo pip install); and pip's uninstall stash of them
        # (pip's AdjacentTempDirectory: "~" and leading chars of "-~.=%0-9" for the first ones,
        # same length) left by an install that failed so
        import pwd

        def owner(path):
            try:
                return pwd.getpwuid(os.stat(path).st_uid).pw_name
            except (KeyError, OSError):
                return None
        root = os.path.realpath(location)
        folders = set()
        for line in (read(os.path.join(info, "RECORD")) or "").splitlines():
            d = os.path.dirname(os.path.normpath(os.path.join(location, line.rsplit(",", 2)[0])))
            while os.path.realpath(d).startswith(root + os.sep) and d not in folders:
                folders.add(d)
                d = os.path.dirname(d)
        locked = []
        for d in sorted(folders):
            dep(d)
            if os.path.isdir(d) and not os.access(d, os.W_OK | os.X_OK):
                locked.append({"path": d, "owner": owner(d)})
            try:
                if "__pycache__" not in d and os.stat(d).st_mode & site_mode & 0o055 != site_mode & 0o055:
                    unreadable_dirs.append("%s/ %04o" % (os.path.relpath(d, location), os.stat(d).st_mode & 0o777))
            except OSError:
                pass
        unreadable = unreadable_dirs + unreadable
        tops = sorted({os.path.relpath(d, location).split(os.sep)[0] for d in folders})
        try:
            names = os.listdir(location)
        except OSError:
            names = []
        stash = [n for n in sorted(names) if n.startswith("~") and n.lstrip("-~.=%0123456789") and any(
            len(n) == len(t) and t.endswith(n.lstrip("-~.=%0123456789")) for t in tops)]
        try:
            login = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            login = str(os.geteuid())
        # inside the venv (sys.prefix), or somewhere sys.path reaches from it: the user site
        # (~/.local/lib/pythonX.Y/site-packages, where pip's install.user = true puts it) or a
        # --system-site-packages base
        import site
        prefix, real = os.path.realpath(sys.prefix), os.path.realpath(location)
        user = getattr(site, "USER_SITE", None)
        out["dist"] = {"version": version, "location": location, "damaged": damaged[:5], "n_damaged": len(damaged),
                       "record_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
                       "in_venv": real == prefix or real.startswith(prefix.rstrip(os.sep) + os.sep),
                       "user_site": isinstance(user, str) and os.path.realpath(user) == real, "prefix": sys.prefix,
                       "locked": locked[:3], "n_locked": len(locked), "login_user": login,
                       "unreadable": unreadable[:3], "n_unreadable": len(unreadable), "site_mode": "%04o" % site_mode,
                       "locked_tops": sorted({os.path.join(location, os.path.relpath(l["path"], location).split(os.sep)[0])
                                              for l in locked}),
                       "stash": [{"path": os.path.join(location, n), "owner": owner(os.path.join(location, n))}
                                 for n in stash]}
        inside = [c for c in copies if os.path.realpath(c) == prefix
                  or os.path.realpath(c).startswith(prefix.rstrip(os.sep) + os.sep)]
        # the venv's own copy (where an install into it went), when another one comes first
        out["dist"]["venv_copy"] = inside[0] if inside else None
        out["dist"]["via"] = None if out["dist"]["in_venv"] else pth_of(location)
except Exception:
    pass
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin:
    dep(os.path.dirname(spec.origin))
    dep(os.path.join(os.path.dirname(spec.origin), "version.py"))
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as fh:
            text = fh.read()
        # torch's own lines ("__version__ = '2.5.1+cu124'", "cuda: Optional[str] = '12.4'") read by a
        # pattern; anything else by ast (whose import costs the probe a third of its time)
        simple = {}
        for line in text.splitlines():
            m = re.match(r"""^(__version__|cuda)\s*(?::[^=]*)?=\s*(?:'([^'\\]*)'|"([^"\\]*)"|(None))\s*$""", line)
            if m:
                simple[m.group(1)] = None if m.group(4) else (m.group(2) if m.group(2) is not None else m.group(3))
        lines = [l for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        plain = all(re.match(r"^(from \S+ import [\w, ]+|import [\w., ]+|__all__ = \[[^\]]*\]|\w+\s*(?::[^=]*)?=\s*"
                             r"""(?:'[^'\\]*'|"[^"\\]*"|None|True|False))\s*$""", l) for l in lines)
        if plain:
            out["torch"], out["cuda"] = simple.get("__version__"), simple.get("cuda")
        else:
            import ast
            for node in ast.parse(text).body:
                target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
                name = getattr(target, "id", None)
                if name in ("__version__", "cuda") and getattr(node, "value", None) is not None:
                    out["torch" if name == "__version__" else "cuda"] = ast.literal_eval(node.value)
    except (OSError, SyntaxError, ValueError):
        pass
print(json.dumps(out))
if DEPS is not None:
    sys.stderr.write("@@FLEETCTL_DEPS@@ " + json.dumps(DEPS) + "\n")
'''


#: Where install records live: one folder per venv, ``<key>`` the first 16 hex digits of the SHA-256
#: of the venv's real path (``os.path.realpath(sys.prefix)`` of its interpreter, as
#: :data:`STATE_SCRIPT` computes it and answers as ``venv``), each record naming its venv
#: (``venv``); the wheel kept for a roll-back lies beside it. Why per venv: one host (or two
#: inventory aliases of one machine, one workdir) may deploy into two venvs (``-e venv=A``, then
#: ``-e venv=B``); one record per host made the second deploy's record replace the first's, so a
#: later deploy into A, intact, reinstalled ("replaced the earlier wheel"), ``--plan`` said
#: reinstall, and A's kept wheel for a roll-back was B's (same file name, another build). A record
#: of an older fleetctl (``<workdir>/installed/<dist>.json``, no ``venv``) is never read as any
#: venv's: the next deploy installs once, and records per venv from then on.
RECORD_LAYOUT = "<workdir>/installed/<key>/<dist>.json"


def record_path(records: str, dist: str, venv: str) -> str:
    """``<records>/<key>/<dist>.json``: the install record of ``dist`` in the venv whose real path is
    ``venv`` (:data:`RECORD_LAYOUT`; :data:`STATE_SCRIPT` reads the same file). The planner names it
    from the probe's ``venv``, which a dry run's staged version answers with its own path
    (:func:`fleetctl.engine.executor.answered_as`), so the dry run names the file the deploy writes."""
    return posixpath.join(records, hashlib.sha256(venv.encode()).hexdigest()[:16], f"{dist}.json")


def check_argv(tool: str, python: str, uv: str | None) -> list[str]:
    """``pip check`` for the venv."""
    return [uv or "uv", "pip", "check", "--python", python] if tool == "uv" else [python, "-m", "pip", "check"]


def check_problems(res: CommandResult) -> list[str]:
    """``pip check``'s complaints (one line each; "No broken requirements found." is none)."""
    return [ln.strip() for ln in res.stdout_text.splitlines()
            if ln.strip() and "no broken requirements" not in ln.lower() and not ln.startswith("Checked ")]


def parse_state(res: CommandResult) -> dict[str, Any]:
    """:data:`STATE_SCRIPT`'s JSON, or ``{"error": first line, "probe_fault": bool}`` when it gave
    none: ``probe_fault`` when the venv's python ran the script (its first line), so the fault is
    fleetctl's probe's, not the host's."""
    try:
        return json.loads(res.stdout_text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"record": None, "dist": None, "torch": None, "cuda": None, "dists": {}, "stamp": None,
                "error": first_error_line(res), "probe_fault": probe_started(res)}


def state_failure(state: dict[str, Any], python: str, when: str) -> str:
    """The line for a state probe that gave no answer (see :func:`parse_state`)."""
    if state.get("probe_fault"):
        return (f"fleetctl's probe install-state ({when}) failed on this host: {state['error']}; this is a fault "
                "of fleetctl, not of the host (please report it with the host's log: fleetctl logs RUN_ID HOST)")
    return f"venv python {python} does not run ({when}): {state['error']}"


def built_against(stamp: dict[str, Any] | None) -> tuple[str | None, str | None, str] | None:
    """``(torch, torch_cuda, how known)`` of the torch a wheel was built against, from its build
    stamp: what the build imported (recorded inside it), else the torch its build inputs named."""
    if not stamp:
        return None
    seen = ((stamp.get("build_record") or {}).get("torch") or [])
    if seen:
        return seen[0].get("torch"), seen[0].get("torch_cuda"), "recorded inside the build"
    inputs = stamp.get("inputs") or {}
    if "torch" in inputs:
        return inputs.get("torch"), inputs.get("torch_cuda"), "the build's facts"
    return None


def dist_changes(before: dict[str, str], after: dict[str, str], own: str) -> list[str]:
    """``["numpy 1.26.4 -> 2.1.0", "added foo 1.0", "removed bar 2.0"]``: every distribution but
    ``own`` (normalised name) whose version the install changed."""
    out = []
    for name in sorted(set(before) | set(after)):
        if name == own:
            continue
        old, new = before.get(name), after.get(name)
        if old != new:
            out.append(f"added {name} {new}" if old is None else f"removed {name} {old}" if new is None
                       else f"{name} {old} -> {new}")
    return out


def norm_dist(name: str) -> str:
    """A distribution name normalised (PEP 503: runs of ``-_.`` to ``-``, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()
