#!/usr/bin/env python3
"""Staged Python environments on one host: numbered versions of a venv, and the path users run from.

fleetctl uploads this file and runs it ON the host (stdlib only, Python 3.8+). Layout (see
docs/staged.md)::

    <venv>                      symlink -> <versions>/vN: the inventory's ``venv``, the path users run
    <versions>/v1 ... vN        complete venvs, each made at its own final path (venvs are not
                                relocatable: their scripts name their own interpreter)
    <versions>/envs.json        the index: live path, every version's manifest, switch history, disk use

Commands (each prints one JSON object on stdout; exit 0 when it did what was asked, 1 with
``{"ok": false, "error": "..."}`` when it refused or failed, having changed nothing it had not
undone):

``status --venv PATH [--versions DIR] [--to previous|N]``
    what PATH is (a real folder, a managed symlink, a staged version), the versions folder, its
    versions, the next version number, ``live_missing`` (the live version whose folder is gone);
    with ``--to``, ``to_version`` and ``to_error``: what ``switch --to`` would make live and why it
    would refuse (the same check); read-only.
``stage --venv LIVE --versions DIR --run-id ID [--uv UV] [--installed DIR]``
    make the next version: a new venv at ``DIR/vN`` (``uv venv`` when UV is given, else the
    base interpreter's ``-m venv``) whose files are hard links to the live venv's (so it costs
    inodes, not bytes; copies where the file systems differ), console scripts rewritten for
    their new interpreter; then checked: its ``pip freeze`` (local distributions, read with
    importlib.metadata) must equal the live venv's. Leftover versions that never went live
    (a failed stage) are removed first. The live venv is only read. fleetctl's install records
    of the live venv (``--installed``: ``<DIR>/<key>/<dist>.json``, ``fleetctl.tasks.venv_state``'s
    RECORD_LAYOUT) are copied as the new version's: it holds the same installed files, so a
    deploy into it skips what ``--plan`` (which reads the live venv for it) said it skips.
``switch --venv PATH --to staged|previous|N --run-id ID [--keep K] [--why WHY] [--installed DIR]``
    make version N the live one: the venv path becomes (or stays) a symlink to ``DIR/vN``,
    replaced atomically with ``rename(2)`` of a new symlink over the old one. On first use the
    real venv folder is adopted as version 1 without copying: it is moved into the versions
    folder and the symlink takes its place in one ``renameat2(RENAME_EXCHANGE)`` (Linux >= 3.15),
    else two renames microseconds apart. Then versions beyond K (default 3) are removed: the live
    one and the one live until this switch (the rollback target) always kept, then the others by
    when they were live, most recent first (not by number); and disk use is measured. The live
    version's folder may be gone (moved by hand): the switch away from it works and says so.

Why hard links are safe here: a package manager replacing a file unlinks it first and writes a new
inode (pip's wheel installer unlinks an existing destination before writing; uv links into a
temporary name and renames over), and Python writes ``__pycache__`` files atomically (a temporary
file renamed over), so a change in one version never writes into a file another version shares.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import errno
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import time

INDEX = "envs.json"
VERSION_RE = re.compile(r"^v([0-9]+)$")
#: Environment variables that would make a probed interpreter see another environment.
STRAY = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV")
MIB = 1024 * 1024

#: Prints the interpreter's local distributions (those under sys.prefix, as ``pip freeze``
#: lists them) as a JSON object ``{name: version}``, names normalised (PEP 503).
FREEZE = r'''
import json, os, re, sys
from importlib import metadata
prefix = os.path.realpath(sys.prefix)
out = {}
for d in metadata.distributions():
    try:
        loc = os.path.realpath(str(d.locate_file("")))
        if loc == prefix or loc.startswith(prefix + os.sep):
            out[re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower()] = d.version
    except Exception:
        pass
print(json.dumps(out, sort_keys=True))
'''


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def fail(message: str) -> "NoReturn":  # noqa: F821
    sys.stdout.write(json.dumps({"ok": False, "error": message}) + "\n")
    sys.exit(1)


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in STRAY}


def read_json(path: str, default):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def write_json(path: str, data) -> None:
    """Atomically: a temporary file in the same folder renamed over ``path``."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def version_path(folder: str, n: int) -> str:
    return os.path.join(folder, "v%d" % n)


def existing_parent(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    return p


def others_reach(path: str) -> bool:
    """Whether users other than the owner can reach ``path`` (every folder on the way o+x)."""
    p = os.path.abspath(path)
    while True:
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
        if os.path.dirname(p) == p:
            return True
        p = os.path.dirname(p)


def login_name() -> str:
    """The name of the user this script runs as (its uid where the password database has none)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return "uid %d" % os.geteuid()


def make_versions_dir(folder: str) -> None:
    """Make the versions folder (and missing parents) with the group and other read/search bits of
    the folder it is made in: the venv path becomes a symlink into it at the switch, so whoever
    could reach the venv beside it must reach it too, whatever the login's umask (often 077 for
    service logins). Write bits are never given to group or other. An existing folder is left as
    it is (the operator's choice; the planner refuses one others cannot reach while they can run
    the venv now)."""
    folder = os.path.abspath(folder)
    if os.path.isdir(folder):
        return
    parent = os.path.dirname(folder)
    if not os.path.isdir(parent):
        make_versions_dir(parent)
    bits = 0o700 | (os.stat(parent).st_mode & 0o055)
    try:
        os.mkdir(folder, bits)
    except FileExistsError:
        return
    os.chmod(folder, bits)  # mkdir's mode is masked by the umask


def torch_of(venv: str) -> dict:
    """torch's version and CUDA build from its ``version.py``, without importing it."""
    out = {"torch": None, "torch_cuda": None}
    for site in site_packages(venv):
        path = os.path.join(site, "torch", "version.py")
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        c = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        out["torch"] = m.group(1) if m else None
        out["torch_cuda"] = c.group(1) if c else None
        break
    return out


def site_packages(venv: str) -> list:
    out = []
    for lib in ("lib", "lib64"):
        base = os.path.join(venv, lib)
        if os.path.isdir(base) and not os.path.islink(base):
            for name in sorted(os.listdir(base)):
                sp = os.path.join(base, name, "site-packages")
                if name.startswith("python") and os.path.isdir(sp):
                    out.append(sp)
    return out


def record_digest(venv: str, dist: str):
    """``(version, sha256 of its RECORD lines)`` of distribution ``dist`` in ``venv``: the same
    digest fleetctl's pip_install records (installer files and __pycache__ left out)."""
    want = re.sub(r"[-_.]+", "-", dist).lower()
    skip = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
    for site in site_packages(venv):
        for name in os.listdir(site):
            if not name.endswith(".dist-info"):
                continue
            base = name[:-len(".dist-info")]
            dname, _, version = base.rpartition("-")
            if re.sub(r"[-_.]+", "-", dname).lower() != want:
                continue
            try:
                with open(os.path.join(site, name, "RECORD")) as fh:
                    lines = sorted(ln for ln in fh.read().splitlines()
                                   if ln and not ln.split(",")[0].endswith(skip) and "__pycache__" not in ln)
            except OSError:
                return version, None
            return version, hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return None, None


def describe(venv: str, installed_dir: str = "", kernels=()) -> dict:
    """What an environment holds: torch, its CUDA build, and the kernels fleetctl installed
    (``{dist: {version, files_sha256, wheel_sha256}}``; the wheel's sha256 when this venv's install
    record in ``installed_dir`` matches the installed files: records are per venv,
    ``<installed_dir>/<key>/<dist>.json`` naming the venv's real path, ``fleetctl.tasks.venv_state``'s
    RECORD_LAYOUT; another venv's, or one naming none, says nothing of this one)."""
    out = torch_of(venv)
    records = {}
    real = os.path.realpath(venv)
    folders = sorted(os.listdir(installed_dir)) if installed_dir and os.path.isdir(installed_dir) else []
    for folder in folders:
        path = os.path.join(installed_dir, folder)
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
            if name.endswith(".json"):
                rec = read_json(os.path.join(path, name), {})
                if isinstance(rec, dict) and rec.get("dist") and rec.get("venv") == real:
                    records[rec["dist"]] = rec
    found = {}
    for dist in sorted(set(records) | set(kernels)):
        version, digest = record_digest(venv, dist)
        if version is None:
            continue
        rec = records.get(dist) or {}
        found[dist] = {"version": version, "files_sha256": digest,
                       "wheel_sha256": rec.get("sha256") if digest and rec.get("record_sha256") == digest else None}
    out["kernels"] = found
    return out


def records_dir(installed_dir: str, venv_real: str) -> str:
    """``<installed_dir>/<key>``: the install records of the venv whose real path is ``venv_real``
    (the key as ``fleetctl.tasks.venv_state.record_path`` and its install-state probe make it)."""
    return os.path.join(installed_dir, hashlib.sha256(venv_real.encode()).hexdigest()[:16])


def carry_records(installed_dir: str, src: str, dest: str) -> int:
    """Copy the install records of the venv ``src`` (real path) as those of ``dest``, a venv that
    reproduces it file for file (each record's ``venv`` rewritten, mode 0600 in a 0700 folder);
    returns how many. A record of another venv, or naming none, is not copied."""
    old, new = records_dir(installed_dir, src), records_dir(installed_dir, dest)
    names = sorted(n for n in os.listdir(old) if n.endswith(".json")) if os.path.isdir(old) else []
    carried = 0
    for name in names:
        rec = read_json(os.path.join(old, name), {})
        if not isinstance(rec, dict) or rec.get("venv") != src:
            continue
        os.makedirs(new, mode=0o700, exist_ok=True)
        tmp = os.path.join(new, ".%s.%d" % (name, os.getpid()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(dict(rec, venv=dest), fh)
        os.replace(tmp, os.path.join(new, name))
        carried += 1
    return carried


def freeze(python: str) -> dict:
    res = subprocess.run([python, "-c", FREEZE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=clean_env(), cwd="/", timeout=300)
    if res.returncode != 0:
        raise RuntimeError("%s cannot list its distributions: %s" % (python, res.stderr.decode(errors="replace")
                                                                     .strip().splitlines()[-1:]))
    return json.loads(res.stdout.decode().strip().splitlines()[-1])


# -- where things are --------------------------------------------------------------------------

def locate(path: str, versions: str = "") -> dict:
    """What ``path`` is: the live venv path (``kind`` missing, dir, symlink) or a staged version
    inside a managed versions folder; which versions folder and live path go with it."""
    info = {"path": path, "kind": None, "target": None, "versions_dir": versions or None, "live": path,
            "staged_version": None}
    parent = os.path.dirname(os.path.abspath(path))
    m = VERSION_RE.match(os.path.basename(os.path.normpath(path)))
    if m and not os.path.islink(path) and os.path.exists(os.path.join(parent, INDEX)):
        index = read_json(os.path.join(parent, INDEX), {})
        info.update(versions_dir=parent, live=index.get("live_path") or path, staged_version=int(m.group(1)))
        if os.path.islink(info["live"]) and os.path.realpath(info["live"]) == os.path.realpath(path):
            # the live version named by its own folder (what sys.prefix of a process started
            # through one of its console scripts says): it is the live venv, not a staged one
            info.update(staged_version=None, via_version=int(m.group(1)), path=info["live"])
        path = info["live"]
    if os.path.islink(path):
        info["kind"] = "symlink"
        info["target"] = os.path.realpath(path)
        tdir = os.path.dirname(info["target"])
        if os.path.exists(os.path.join(tdir, INDEX)) and VERSION_RE.match(os.path.basename(info["target"])):
            info["versions_dir"] = tdir
            info["live_version"] = int(VERSION_RE.match(os.path.basename(info["target"])).group(1))
        else:
            info["unmanaged_link"] = True
    elif os.path.isdir(path):
        info["kind"] = "dir"
        info["target"] = os.path.realpath(path)
    elif os.path.exists(path):
        info["kind"] = "other"
    else:
        info["kind"] = "missing"
    return info


def load_index(folder: str, live: str) -> dict:
    index = read_json(os.path.join(folder, INDEX), None) or {}
    index.setdefault("live_path", live)
    index.setdefault("versions", {})
    index.setdefault("history", [])
    return index


def numbers(folder: str, index: dict) -> list:
    found = {int(k) for k in index.get("versions", {})}
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            m = VERSION_RE.match(name)
            if m and os.path.isdir(os.path.join(folder, name)):
                found.add(int(m.group(1)))
    return sorted(found)


def whole(folder: str, n: int) -> bool:
    """Whether version ``n``'s folder is there with its interpreter (what a switch needs)."""
    return os.path.exists(os.path.join(version_path(folder, n), "bin", "python3"))


def kept_list(folder: str, index: dict) -> str:
    """``v2 (was-live), v3 (live, missing)``: the versions the index keeps, a gone folder marked."""
    return ", ".join("v%s (%s%s)" % (k, v.get("state"), "" if whole(folder, int(k)) else ", missing")
                     for k, v in sorted(index["versions"].items(), key=lambda kv: int(kv[0]))) or "none"


def resolve_target(folder: str, index: dict, current, to: str, staged=None):
    """The version a switch ``--to TO`` makes live, and why it cannot (``(n, None)`` or
    ``(n or None, message)``): ``staged`` the version ``staged`` (this run's), ``previous`` the one
    the switch history says was live before ``current`` (else the newest other that was live),
    else version number TO. The target must be in the index, whole (its ``bin/python3`` there)
    and finished (not ``staging``). ``status --to`` answers the same, so a rollback's ``--plan``
    and ``--dry-run`` refuse what the switch would."""
    if to == "staged":
        if staged is None:
            return None, "not a staged version (no venv_stage ran for this host in this run)"
        n = staged
    elif to == "previous":
        n = None
        for h in reversed(index["history"]):
            if h.get("to") == current and h.get("from") is not None:
                n = h["from"]
                break
        if n is None:
            older = [int(k) for k, v in index["versions"].items() if v.get("state") == "was-live" and int(k) != current]
            n = max(older) if older else None
        if n is None:
            return None, "no previous environment to go back to in %s" % folder
    else:
        try:
            n = int(str(to).lstrip("v"))
        except ValueError:
            return None, "--to wants staged, previous or a version number, got %r" % to
        if n < 1:
            return None, "--to wants a version number of 1 or more, got %r" % to
    entry = index["versions"].get(str(n))
    if entry is None or not whole(folder, n):
        why = "" if entry is None else " (its folder %s is gone)" % version_path(folder, n)
        return n, "no environment v%d in %s%s (there: %s)" % (n, folder, why, kept_list(folder, index))
    if entry.get("state") == "staging":
        return n, "v%d was never finished (a stage interrupted): it cannot go live" % n
    return n, None


def keep_ranked(index: dict, live: int, previous, keep: int) -> set:
    """The versions a switch to ``live`` keeps: ``live``, ``previous`` (the one live until this
    switch: the rollback target) whatever ``keep`` says, then the others that were live, the most
    recently live first (by the switch history, then ``live_until``), ``keep`` in all. Not by
    number: after a rollback to an old version and a new deploy, the old version is the one that
    served until the switch, and the one a rollback goes back to."""
    when = {}
    for i, h in enumerate(index["history"]):
        for k in (h.get("from"), h.get("to")):
            if k is not None:
                when[int(k)] = i
    others = [int(k) for k, v in index["versions"].items()
              if int(k) not in (live, previous) and v.get("state") == "was-live"]
    others.sort(key=lambda k: (when.get(k, -1), index["versions"][str(k)].get("live_until") or "", k), reverse=True)
    kept = {live} | ({previous} if previous is not None else set())
    return kept | set(others[:max(0, keep - len(kept))])


def disk_use(folder: str, index: dict) -> dict:
    """Disk use of the versions (MiB): ``size_mib`` of each (all its files), ``own_mib`` (files no
    other version shares: what removing it frees), ``total_mib`` (every inode once)."""
    owners = {}
    sizes = {}
    per = {}
    for n in numbers(folder, index):
        root = version_path(folder, n)
        total = 0
        for dirpath, dirnames, filenames in os.walk(root):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                size = st.st_blocks * 512
                sizes[key] = size
                owners.setdefault(key, set()).add(n)
                total += size
        per[n] = {"size_mib": round(total / MIB, 1), "own_mib": 0.0}
    for key, who in owners.items():
        if len(who) == 1:
            n = next(iter(who))
            per[n]["own_mib"] = round(per[n]["own_mib"] + sizes[key] / MIB, 1)
    return {"measured": now(), "total_mib": round(sum(sizes.values()) / MIB, 1),
            "versions": {str(n): v for n, v in per.items()}}


def status(args) -> dict:
    info = locate(args.venv, args.versions)
    folder = info["versions_dir"]
    out = {"ok": True, **info, "versions": {}, "next": None, "adopt_as": None, "history": [], "disk": None}
    live = info["live"]
    lkind = "symlink" if os.path.islink(live) else "dir" if os.path.isdir(live) else "missing"
    out["live_kind"] = lkind
    if folder:
        index = load_index(folder, live)
        out["versions"] = index["versions"]
        out["history"] = index["history"][-10:]
        out["disk"] = index.get("disk")
        # as stage counts: versions that never went live are removed before it numbers the next
        kept = [k for k in numbers(folder, index)
                if index["versions"].get(str(k), {}).get("state") in ("live", "was-live")
                or os.path.realpath(version_path(folder, k)) == os.path.realpath(live)]
        top = max(kept + [index.get("last_version", 0)]) if kept else index.get("last_version", 0)
        if lkind == "dir":
            top = out["adopt_as"] = top + 1
        out["next"] = top + 1
        probe_at = existing_parent(folder)
        if lkind == "symlink" and info.get("live_version") is not None and not whole(folder, info["live_version"]):
            # the folder the venv path points to is gone (moved or deleted by hand): a rollback to
            # a whole version still works, a stage (which copies the live venv) cannot
            out["live_missing"] = info["live_version"]
        if lkind == "symlink" and not os.path.exists(live):
            lkind = "missing"
        if args.to:
            out["to_version"], out["to_error"] = resolve_target(folder, index, info.get("live_version"), args.to,
                                                                info["staged_version"])
        if lkind != "missing":
            src = os.path.realpath(live)
            out["same_fs"] = os.stat(src).st_dev == os.stat(probe_at).st_dev
            out["others_reach_live"] = others_reach(src)
            out["others_reach_versions"] = others_reach(probe_at)
            # the folder users open the venv path in: with others_reach_live false under a symlink,
            # a layout that already took the venv from them (versions in a private folder)
            out["others_reach_path"] = others_reach(os.path.dirname(os.path.abspath(live)))
            # the rights a stage and a switch need (docs/staged.md): the versions folder (or the
            # folder it is made in) written into, and the venv's parent (a symlink renamed over it)
            out["user"] = login_name()
            out["parent"] = os.path.dirname(os.path.abspath(live))
            out["parent_writable"] = os.access(out["parent"], os.W_OK | os.X_OK)
            out["versions_probe"] = probe_at
            out["versions_writable"] = os.access(probe_at, os.W_OK | os.X_OK)
    if lkind != "missing" and not os.path.exists(live):
        lkind = "missing"
    if lkind != "missing":
        out["environment"] = describe(os.path.realpath(live), args.installed or "")
        since = None
        for h in reversed(out["history"]):
            if info.get("live_version") is not None and h.get("to") == info.get("live_version"):
                since = h.get("at")
                break
        out["environment"]["live_since"] = since
        out["environment"]["version"] = info.get("live_version")
    return out


# -- stage ------------------------------------------------------------------------------------

def base_interpreter(src: str) -> str:
    """The interpreter the live venv was made from (its ``bin/python3`` symlink's target, else
    ``pyvenv.cfg``'s ``home``)."""
    exe = os.path.join(src, "bin", "python3")
    real = os.path.realpath(exe)
    if os.path.exists(real) and not (real + os.sep).startswith(os.path.realpath(src) + os.sep):
        return real
    cfg = read_cfg(src)
    home = cfg.get("home")
    version = cfg.get("version_info") or cfg.get("version") or ""
    mm = ".".join(version.split(".")[:2])
    for name in ("python" + mm, "python3"):
        cand = os.path.join(home or "", name)
        if home and os.path.exists(cand):
            return cand
    raise RuntimeError("cannot find the base interpreter of %s (pyvenv.cfg home %s)" % (src, home))


def read_cfg(venv: str) -> dict:
    out = {}
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as fh:
            for line in fh:
                k, sep, v = line.partition("=")
                if sep:
                    out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


#: fleetctl's own files in a venv (facts.py TARGET_ID_NAME, TARGET_INSTALL_NAME): a staged version
#: gets copies, not hard links, so writing its install record never rewrites the live venv's
OWN_FILES = (".fleetctl-id", ".fleetctl-install.json")

class Linker:
    """Copies a tree by hard links (a copy where linking is refused, e.g. across file systems),
    rewriting the text files that name the old prefix."""

    def __init__(self, old_prefixes, new_prefix: str) -> None:
        self.old = [p for p in old_prefixes if p]
        self.new = new_prefix
        self.linked = 0
        self.copied = 0
        self.copied_bytes = 0
        self.rewritten = 0

    def _retarget(self, text: str) -> str:
        for old in self.old:
            text = text.replace(old + "/", self.new + "/")
        return text

    def file(self, src: str, dst: str, rewrite: bool = False) -> None:
        if os.path.islink(src):
            target = os.readlink(src)
            os.symlink(self._retarget(target) if os.path.isabs(target) else target, dst)
            return
        if rewrite and self._names_old(src):
            with open(src, "rb") as fh:
                data = fh.read()
            for old in self.old:
                data = data.replace((old + "/").encode(), (self.new + "/").encode())
            with open(dst, "wb") as fh:
                fh.write(data)
            shutil.copystat(src, dst)
            self.rewritten += 1
            return
        if os.path.basename(src) == OWN_FILES[0]:  # the id alone: the `at` lines say where the LIVE folder was
            with open(src, encoding="ascii", errors="replace") as fh:  # (facts.py id_file_text); kept, they
                first = fh.readline().strip()  # would read this version as a copy and give it a fresh id
            with open(dst, "w", encoding="ascii") as fh:
                fh.write(first + "\n")
            shutil.copystat(src, dst)
            self.copied += 1
            self.copied_bytes += os.path.getsize(dst)
            return
        if os.path.basename(src) in OWN_FILES:  # the version's own install record, never shared
            shutil.copy2(src, dst)
            self.copied += 1
            self.copied_bytes += os.path.getsize(dst)
            return
        try:
            os.link(src, dst)
            self.linked += 1
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
                raise
            shutil.copy2(src, dst)
            self.copied += 1
            self.copied_bytes += os.path.getsize(dst)

    def _names_old(self, path: str) -> bool:
        try:
            with open(path, "rb") as fh:
                head = fh.read(65536)
        except OSError:
            return False
        if b"\0" in head:
            return False
        return any((old + "/").encode() in head for old in self.old)

    def tree(self, src: str, dst: str, rewrite_suffixes=(".pth",)) -> None:
        for dirpath, dirnames, filenames in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            out = dst if rel == "." else os.path.join(dst, rel)
            os.makedirs(out, exist_ok=True)
            os.chmod(out, stat.S_IMODE(os.stat(dirpath).st_mode))  # who may read it: as the live venv
            for d in list(dirnames):
                if os.path.islink(os.path.join(dirpath, d)):
                    dirnames.remove(d)
                    if not os.path.lexists(os.path.join(out, d)):
                        self.file(os.path.join(dirpath, d), os.path.join(out, d))
            for name in filenames:
                target = os.path.join(out, name)
                if os.path.lexists(target):
                    continue  # made by the venv tool for the new venv: its own is right
                self.file(os.path.join(dirpath, name), target, rewrite=name.endswith(rewrite_suffixes))


def stage(args) -> dict:
    t0 = time.time()
    live = args.venv
    info = locate(live, args.versions)
    if info["staged_version"] is not None:
        fail("%s is a staged version, not the live venv" % live)
    if info["kind"] == "missing":
        fail("venv %s does not exist" % live)
    if info["kind"] not in ("dir", "symlink") or info.get("unmanaged_link"):
        fail("venv %s is %s, not a folder fleetctl can stage from (a symlink fleetctl did not make: point the venv "
             "var at the real folder)" % (live, "a symlink to " + str(info["target"]) if info.get("unmanaged_link")
                                            else "not a folder"))
    folder = info["versions_dir"] or args.versions
    src = os.path.realpath(live)
    if not os.path.exists(os.path.join(src, "bin", "python3")):
        fail("venv %s has no bin/python3" % live)
    make_versions_dir(folder)
    if os.stat(src).st_dev != os.stat(folder).st_dev:
        fail("the versions folder %s is on another file system than the venv %s: staging would copy every file and "
             "adopting the live folder would be a copy, not a rename; set the host var venv_versions_dir "
             "(or venv_stage's versions_dir) to a folder on the venv's file system" % (folder, src))
    index = load_index(folder, live)
    # versions that never went live (a failed or interrupted stage) are removed first
    removed = []
    for n in numbers(folder, index):
        state = index["versions"].get(str(n), {}).get("state")
        path = version_path(folder, n)
        if state not in ("live", "was-live") and os.path.realpath(path) != src:
            shutil.rmtree(path, ignore_errors=True)
            index["versions"].pop(str(n), None)
            removed.append(n)
    nums = numbers(folder, index)
    adopt = info["kind"] == "dir"
    # numbers are never reused: a failed stage's number stays its own in the run records
    top = max(nums + [index.get("last_version", 0)])
    if adopt:
        top += 1  # reserved for the live folder, adopted at the switch
    n = top + 1
    index["last_version"] = n
    dest = version_path(folder, n)
    cfg = read_cfg(src)
    base = base_interpreter(src)
    system_site = cfg.get("include-system-site-packages", "false").lower() == "true"
    if args.uv:
        argv = [args.uv, "venv", "--quiet", "--python", base] + (["--system-site-packages"] if system_site else []) + [dest]
        made_with = "uv venv"
    else:
        argv = [base, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site else []) + [dest]
        made_with = "python -m venv"
    index["versions"][str(n)] = {"version": n, "path": dest, "state": "staging", "created": now(),
                                 "run_id": args.run_id, "from": {"path": src, "version": info.get("live_version")},
                                 "made_with": made_with, "base_python": base}
    write_json(os.path.join(folder, INDEX), index)
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env(), cwd="/")
    if res.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        fail("%s failed: %s" % (" ".join(argv[:2]), res.stdout.decode(errors="replace").strip()[-500:]))
    # the version's own folder, bin/ and pyvenv.cfg readable as the live venv's are (the venv tool
    # made them under the login's umask: 077 would make them the login user's alone)
    for made in ("", "bin", "pyvenv.cfg"):
        if os.path.exists(os.path.join(src, made)) and os.path.exists(os.path.join(dest, made)):
            os.chmod(os.path.join(dest, made), stat.S_IMODE(os.stat(os.path.join(src, made)).st_mode))
    linker = Linker([src, os.path.abspath(live)], dest)
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry in ("pyvenv.cfg", "bin", ".lock"):  # the venv tool's own; uv's lock file is per venv
            continue
        if os.path.islink(path):
            if not os.path.lexists(os.path.join(dest, entry)):
                linker.file(path, os.path.join(dest, entry))
            continue
        if os.path.isdir(path):
            linker.tree(path, os.path.join(dest, entry))
        elif not os.path.lexists(os.path.join(dest, entry)):
            linker.file(path, os.path.join(dest, entry))
    bindir = os.path.join(src, "bin")
    for name in sorted(os.listdir(bindir)):
        target = os.path.join(dest, "bin", name)
        if os.path.lexists(target) or name.startswith(("python", "activate", "Activate")):
            continue
        linker.file(os.path.join(bindir, name), target, rewrite=True)
    try:
        want, got = freeze(os.path.join(src, "bin", "python3")), freeze(os.path.join(dest, "bin", "python3"))
    except (RuntimeError, ValueError, IndexError, subprocess.SubprocessError) as exc:
        fail("the staged venv %s cannot be checked: %s" % (dest, exc))
    if want != got:
        diff = sorted("%s %s -> %s" % (k, want.get(k), got.get(k)) for k in set(want) | set(got) if want.get(k) != got.get(k))
        fail("the staged venv %s does not reproduce the live one's pip freeze: %s" % (dest, "; ".join(diff[:10])))
    entry = index["versions"][str(n)]
    entry.update(state="staged", linked_files=linker.linked, copied_files=linker.copied,
                 copied_mib=round(linker.copied_bytes / MIB, 1), rewritten_files=linker.rewritten,
                 seconds=round(time.time() - t0, 3), freeze=["%s==%s" % kv for kv in sorted(want.items())],
                 **torch_of(dest))
    index["disk"] = disk_use(folder, index)
    write_json(os.path.join(folder, INDEX), index)
    carried = carry_records(args.installed, src, os.path.realpath(dest)) if args.installed else 0
    return {"ok": True, "version": n, "path": dest, "versions_dir": folder, "live": live, "records_carried": carried,
            "live_version": info.get("live_version"), "adopt_as": top if adopt else None, "removed": removed,
            "made_with": made_with, "linked_files": linker.linked, "copied_files": linker.copied,
            "copied_mib": entry["copied_mib"], "rewritten_files": linker.rewritten, "packages": len(want),
            "seconds": entry["seconds"], "disk": index["disk"]}


# -- switch -----------------------------------------------------------------------------------

def exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``); False where not supported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    return False


def point(live: str, target: str) -> None:
    """``live`` becomes a symlink to ``target``: a new symlink renamed over the old one (atomic)."""
    tmp = "%s.fleetctl-switch.%d" % (live, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, live)


def adopt(live: str, dest: str, target: str) -> str:
    """The real folder ``live`` becomes version ``dest`` (moved, not copied) and ``live`` a symlink
    to ``target``; returns how (``exchange`` or ``two renames``)."""
    tmp = "%s.fleetctl-switch.%d" % (live, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    if exchange(tmp, live):
        os.rename(tmp, dest)  # tmp now holds the old folder
        return "exchange"
    os.unlink(tmp)
    os.rename(live, dest)
    point(live, target)
    return "two renames"


def switch(args) -> dict:
    info = locate(args.venv)
    live = info["live"]
    folder = info["versions_dir"]
    if not folder:
        fail("%s is not a staged environment: nothing to switch (stage one first, or deploy with --staged)" % args.venv)
    index = load_index(folder, live)
    lkind = "symlink" if os.path.islink(live) else "dir" if os.path.isdir(live) else "missing"
    current = info.get("live_version")
    n, error = resolve_target(folder, index, current, args.to, info["staged_version"])
    if error:
        fail(("%s is " % args.venv + error) if args.to == "staged" and n is None else error)
    target = version_path(folder, n)
    entry = index["versions"][str(n)]
    # the live version's folder gone (moved or deleted by hand): the switch away from it still works
    live_missing = current if lkind == "symlink" and current is not None and not whole(folder, current) else None
    stamp = now()
    how = "symlink replaced"
    adopted = None
    if lkind == "dir":
        nums = numbers(folder, index)
        adopted = min(k for k in range(1, max(nums + [0]) + 2) if k not in nums)
        src = os.path.realpath(live)
        before = describe(src, args.installed or "")
        try:
            fr = freeze(os.path.join(src, "bin", "python3"))
        except (RuntimeError, ValueError, IndexError, subprocess.SubprocessError):
            fr = {}
        how = adopt(live, version_path(folder, adopted), target)
        index["versions"][str(adopted)] = {
            "version": adopted, "path": version_path(folder, adopted), "state": "was-live", "adopted": stamp,
            "note": "the venv folder %s as it was, moved here without copying; its scripts name %s/bin/python3, "
                    "which is this version again whenever it is live" % (live, live),
            "freeze": ["%s==%s" % kv for kv in sorted(fr.items())], "torch": before.get("torch"),
            "torch_cuda": before.get("torch_cuda"), "run_id": args.run_id}
        current = adopted
    elif lkind == "symlink":
        if current == n:
            env = describe(target, args.installed or "")
            since = next((h.get("at") for h in reversed(index["history"]) if h.get("to") == n), None)
            return {"ok": True, "changed": False, "from": n, "to": n, "live": live, "path": target,
                    "versions_dir": folder, "removed": [], "disk": index.get("disk"),
                    "environment": {**env, "version": n, "path": target, "live_since": since}}
        point(live, target)
    else:
        point(live, target)
    if current is not None and str(current) in index["versions"]:
        index["versions"][str(current)]["state"] = "was-live"
        index["versions"][str(current)]["live_until"] = stamp
    entry.update(state="live", live_since=stamp)
    env = describe(target, args.installed or "")
    entry.update(torch=env.get("torch"), torch_cuda=env.get("torch_cuda"), kernels=env.get("kernels"))
    index["history"].append({"at": stamp, "run_id": args.run_id, "from": current, "to": n, "why": args.why,
                             "how": how})
    index["history"] = index["history"][-100:]
    index["live_path"] = live
    # prune: the live version, the one live until now, then the most recently live others
    keep = keep_ranked(index, n, current, args.keep)
    removed = []
    for k in numbers(folder, index):
        if k not in keep:
            shutil.rmtree(version_path(folder, k), ignore_errors=True)
            index["versions"].pop(str(k), None)
            removed.append(k)
    index["disk"] = disk_use(folder, index)
    write_json(os.path.join(folder, INDEX), index)
    return {"ok": True, "changed": True, "from": current, "to": n, "live": live, "path": target, "versions_dir": folder,
            "how": how, "adopted": adopted, "removed": removed, "disk": index["disk"], "live_missing": live_missing,
            "environment": {**env, "version": n, "path": target, "live_since": stamp}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("status")
    p.add_argument("--venv", required=True)
    p.add_argument("--versions", default="")
    p.add_argument("--to", default="")
    p.add_argument("--installed", default="")
    p = sub.add_parser("stage")
    p.add_argument("--venv", required=True)
    p.add_argument("--versions", required=True)
    p.add_argument("--run-id", default="")
    p.add_argument("--uv", default="")
    p.add_argument("--installed", default="")
    p = sub.add_parser("switch")
    p.add_argument("--venv", required=True)
    p.add_argument("--to", default="staged")
    p.add_argument("--keep", type=int, default=3)
    p.add_argument("--run-id", default="")
    p.add_argument("--why", default="deploy")
    p.add_argument("--installed", default="")
    args = parser.parse_args(argv)
    if getattr(args, "keep", 3) < 1:
        fail("--keep must be at least 1")
    try:
        out = {"status": status, "stage": stage, "switch": switch}[args.cmd](args)
    except SystemExit:
        raise
    except FileNotFoundError as exc:  # a folder gone under the script (moved or deleted by hand)
        fail("%s is missing (moved or deleted while fleetctl read it)" % (exc.filename or exc))
    except Exception as exc:  # one line for the operator, never a traceback alone
        # the planner names the command ("stage: ..."): not named here again
        fail("%s: %s" % (type(exc).__name__, exc))
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
