"""The build's download-time dependencies, offline: what ``build_wheel`` does with the
``fetch_mirror`` argument (a host var in the playbooks: ``fetch_mirror: "{{ fetch_mirror | default('') }}"``).

1. While planning (``--plan``, ``--dry-run`` and a deploy alike) the tree's CMake files are read
   (from the controller's copy when this run's ``copy`` put the tree there, else on the host) and
   :func:`fleetctl.build.fetchdeps.read_fetch_deps` names every ``FetchContent_Declare`` and git
   submodule with its pinned commit; with a mirror each is resolved on the controller
   (:func:`fleetctl.util.gitmirror.resolve`). A dependency the mirror lacks (repository or commit),
   or a declaration the reader cannot resolve, fails the host there, naming it, before anything is
   uploaded or compiled.
2. Only the arch class's builder (the host whose role is ``build``) gets the sources: the
   controller exports each (repository, commit) once into its cache, and ships the files to
   ``<workdir>/fetchdeps/<owner>+<name>/<commit>/`` on the host, each file compared by SHA-256
   first, so what is already there is never sent again (a declaration whose ``SOURCE_DIR`` is
   inside another's, ``${repo-x_SOURCE_DIR}/sub``, goes into that one's folder; a submodule goes
   to its path in the tree).
3. The build gets ``-DFETCHCONTENT_SOURCE_DIR_<NAME>=<host folder>`` for each declaration and
   ``-DFETCHCONTENT_FULLY_DISCONNECTED=ON`` (CMake's FetchContent docs: no download or update
   step runs), in the build key as every define is; the submodules' commits go into the tree hash.

Without a mirror CMake downloads at configure time. The tree's declarations are read all the
same (from the controller's copy, else on the host: a tree already there is read there) and
listed in the task's decision, so ``--plan`` shows what the build would download; the host
that builds (its arch class's builder, once the class's roles are settled; every host with
``build: each``) then asks each repository and archive whether it answers (:func:`reach_deps`,
the probe :mod:`fleetctl.util.reachprobe`: ``git ls-remote``, HTTP ``HEAD``). A member that
receives the class's wheel downloads nothing and is never asked. One the builder cannot reach
(offline, a firewall, no git) fails it, in ``--plan`` too, with one line naming the dependency,
the URL and the ``fetch_mirror`` var, instead of a "Failed to clone repository" after CMake's
long wait (new-user trial); while applying, the next member of its class builds instead, and is
asked first (:class:`~fleetctl.tasks.steps.BuilderProbe`). A declaration
whose ``FETCHCONTENT_SOURCE_DIR_<NAME>`` the task's ``cmake_defines`` already give is the
operator's (sources already on the host): it is listed as given, neither fetched nor required.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..build.fetchdeps import Dep, FetchDepsError, read_fetch_deps, relative_url, repo_of, submodules
from ..util import cmaketree, gitmirror, reachprobe
from ..util.paths import cache_dir
from .base import HostView, first_error_line
from .build_meta import META_FILES
from .copy import local_manifest
from .steps import BuilderProbe, Local, PutFiles, probe

#: ``python3 -c`` program printing :func:`fleetctl.util.cmaketree.read_cmake_tree`'s JSON for ``$1``
#: (and the top-level files named after it).
CMAKETREE_PROGRAM = inspect.getsource(cmaketree)
#: ``python3 -c`` program printing :func:`fleetctl.util.reachprobe.reach`'s JSON for ``$1``.
REACH_PROGRAM = inspect.getsource(reachprobe)

#: The host folders (``$@``) that exist, one per line.
_PRESENT = 'for d; do [ -d "$d" ] && printf "%s\\n" "$d"; done; exit 0'
#: ``sha256sum`` of every file under ``$1`` (relative ``./`` names); nothing when it is not there.
_LIST = 'cd "$1" 2>/dev/null || exit 0; find . -type f -exec sha256sum {} +'
#: The build files read at the tree's top besides the CMake files (``CMakeLists.txt`` is one of those).
_TOP_FILES = tuple(f for f in META_FILES if f != "CMakeLists.txt")
_NESTED = re.compile(r"^\$\{(?P<dep>[A-Za-z0-9_.+-]+)_SOURCE_DIR\}(?P<rest>/.*)?$")


@dataclass
class DepsPlan:
    """What planning found. ``rows``: one JSON-able dict per dependency for the decision and
    ``--plan`` (name, kind, repo, ref, commit, controller/host: ``cached``/``to fetch``/``to send``);
    ``defines``: the CMake defines; ``ship``: (resolved row, host folder) per dependency;
    ``tree_extra``: what goes into the tree hash (the submodules' pins); ``error``: a one-line
    failure, or ``""``; ``online``: without a mirror, (dependency, its row) for each CMake would
    download itself (:func:`reach_deps` asks the host whether it reaches them)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    defines: dict[str, str] = field(default_factory=dict)
    ship: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    tree_extra: str = ""
    error: str = ""
    online: list[tuple[Dep, dict[str, Any]]] = field(default_factory=list)


def deps_cache() -> Path:
    """The controller's folder for exported dependencies: ``<cache>/fetchdeps``."""
    return cache_dir() / "fetchdeps"


@dataclass(frozen=True)
class TreeFiles:
    """One read of a source tree (:func:`read_tree`): what the build's metadata
    (:mod:`~fleetctl.tasks.build_meta`) and its dependencies (:func:`plan_deps`) are planned from.

    Attributes:
        texts: relative path -> text of every CMake file and the root ``.gitmodules``.
        gitlinks: submodule path -> pinned commit, or ``None`` (unknown).
        top: the tree's top-level :data:`~fleetctl.tasks.build_meta.META_FILES` that exist, name -> text.
        where: ``"controller"`` (a ``copy`` source folder of this run) or ``"host"``.
        error: why the tree could not be read (one line), or ``""``.
    """

    texts: dict[str, str] = field(default_factory=dict)
    gitlinks: dict[str, str] | None = None
    top: dict[str, str] = field(default_factory=dict)
    where: str = "host"
    error: str = ""

    @property
    def meta_texts(self) -> dict[str, str]:
        """What :func:`~fleetctl.tasks.build_meta.meta_from_texts` reads: the top-level files."""
        cml = self.texts.get("CMakeLists.txt")
        return {**self.top, **({"CMakeLists.txt": cml} if cml is not None else {})}


def _tree_files(got: Any, where: str) -> TreeFiles:
    return TreeFiles(texts=dict(got.get("texts") or {}), gitlinks=got.get("gitlinks"), top=dict(got.get("top") or {}),
                     where=where)


def read_tree(host: HostView, src: str):
    """Plan generator: the tree at ``src`` read once (:func:`fleetctl.util.cmaketree.read_cmake_tree`:
    its CMake files, gitlinks and top-level build files), from the controller folder a ``copy``
    of this run puts there, else on the host (one probe, up to 120 s); returns :class:`TreeFiles`."""
    local = host.sources.get(src)
    if local is not None:
        got = yield Local(fn=cmaketree.read_cmake_tree, args=(local, _TOP_FILES),
                          reason=f"read the build and CMake files of {local}")
        if not isinstance(got, BaseException):
            return _tree_files(got, "controller")
    res = yield probe([host.python, "-c", CMAKETREE_PROGRAM, src, *_TOP_FILES],
                      f"read the build and CMake files in {src}", timeout_s=120)
    if res.rc != 0:
        return TreeFiles(error=f"cannot read the CMake files in {src}: {first_error_line(res)}")
    try:
        got = json.loads(res.stdout_text)
    except ValueError:
        got = None
    if not isinstance(got, dict):
        return TreeFiles(error=f"cannot read the CMake files in {src}: the reader printed no JSON")
    return _tree_files(got, "host")


def plan_deps(mirror: str, host: HostView, src: str, overrides: dict[str, str], tree: TreeFiles):
    """Plan generator: the dependencies of the tree read as ``tree`` (:func:`read_tree`), resolved
    in ``mirror`` (``""``: none); returns :class:`DepsPlan` (its ``error`` set when the host must fail)."""
    out = DepsPlan()
    if tree.error:
        out.error = tree.error if mirror else ""
        return out
    texts = tree.texts
    if "CMakeLists.txt" not in texts:
        return out  # not a CMake project: nothing is fetched at configure time
    try:
        deps = read_fetch_deps(texts, overrides=overrides, gitlinks=tree.gitlinks)
    except FetchDepsError as exc:
        if mirror:
            out.error = f"fetch_mirror: cannot tell what {src} downloads: {exc}"
        else:
            out.rows = [{"error": str(exc)}]
        return out
    if not deps:
        return out
    given = [d for d in deps if d.source_dir_var and d.source_dir_var in overrides]
    out.rows = [{**_row(d.as_dict()), "controller": "-", "host": f"given: {overrides[d.source_dir_var]}"}
                for d in given]  # the operator's own -DFETCHCONTENT_SOURCE_DIR_<NAME>: not fetched
    deps = [d for d in deps if d not in given]
    if not mirror:
        for d in deps:  # CMake clones or downloads a declaration; a submodule comes with the checkout
            out.rows.append({**_row(d.as_dict()), "controller": "-", "host": "submodule of the checkout (no fetch_mirror)"
                             if d.kind == "submodule" else "downloaded by CMake (no fetch_mirror)"})
            if d.kind != "submodule":
                out.online.append((d, out.rows[-1]))
        return out
    if given:
        got = yield probe(["/bin/sh", "-c", _PRESENT, "fleetctl-deps", *(overrides[d.source_dir_var] for d in given)],
                          "whether the sources given for dependencies are on the host")
        there = set(got.stdout_text.split("\n"))
        lost = [d for d in given if overrides[d.source_dir_var] not in there]
        if lost:
            out.error = "; ".join(f"{d.source_dir_var}={overrides[d.source_dir_var]}: no such folder on the host "
                                  f"(the source given for {d.name} instead of fetching it)" for d in lost)
            return out
    if not deps:
        out.defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
        return out
    resolved = yield Local(fn=gitmirror.resolve, args=([d.as_dict() for d in deps], mirror, str(deps_cache())),
                           reason=f"find {len(deps)} dependencies of {src} in the fetch_mirror")
    if isinstance(resolved, BaseException):
        out.error = f"fetch_mirror {mirror}: {resolved}"
        return out
    deps, resolved, err = yield from transitive_deps(deps, list(resolved), mirror, overrides)
    if err:
        out.error = err
        return out
    missing = [r["error"] for r in resolved if r["error"]]
    if missing:
        out.error = "fetch_mirror lacks " + "; ".join(missing)
        out.rows += [_row(r) for r in resolved]
        return out
    by_name = {d.name: d for d in deps}
    dirs: dict[str, str] = {}
    for row, dep in zip(resolved, deps):
        dirs[dep.name] = _host_dir(dep, row, host, src, dirs, by_name)
    present = yield probe(["/bin/sh", "-c", _PRESENT, "fleetctl-deps", *dirs.values()],
                          "which dependencies the host holds already")
    there = set(present.stdout_text.split())
    pins = []
    for row, dep in zip(resolved, deps):
        where = dirs[dep.name]
        out.ship.append((row, where))
        out.rows.append({**_row(row), "controller": "cached" if row["controller_cached"] else "to fetch",
                         "host": "cached" if where in there else "to send", "host_dir": where})
        if dep.source_dir_var:
            out.defines[dep.source_dir_var] = where
        else:
            pins.append(f"{dep.path} {row['commit']}")
    out.defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    out.tree_extra = "\n".join(sorted(pins))
    return out


def reach_deps(deps: DepsPlan, host: HostView, key: str = ""):
    """Plan generator (the host that builds, no mirror): ask the host whether it reaches what
    CMake would download (:mod:`fleetctl.util.reachprobe`: up to
    :data:`~fleetctl.util.reachprobe.TIMEOUT_S` seconds). Only the builder asks: a member that
    receives its class's wheel downloads nothing, and needs no route to the repositories.
    ``key``: the arch class's build key, when one member builds for the class (the question is a
    :class:`~fleetctl.tasks.steps.BuilderProbe`, asked once this host's role is settled); ``""``
    (``build: each``): asked now. Marks each row ``reachable`` or ``unreachable: why``; returns
    ``""`` (reached, or not asked yet) or one line naming each dependency it cannot reach, its URL
    and the ``fetch_mirror`` var (an answer that cannot be read counts as unreachable: the build
    would find out only after CMake's wait)."""
    if not deps.online:
        return ""
    items = [[d.kind, d.url] for d, _ in deps.online]
    argv = (host.python, "-c", REACH_PROGRAM, json.dumps(items))
    reason = f"whether the host reaches the {len(items)} dependencies CMake would download"
    res = yield (BuilderProbe(argv=argv, key=key, reason=reason, timeout_s=120, answer_ahead=False) if key
                 else probe(argv, reason, answer_ahead=False))
    if res is None:  # not the class's builder yet (its role is provisional): asked if it becomes it
        return ""
    try:
        why = json.loads(res.stdout_text) if res.rc == 0 else {}
    except ValueError:
        why = {}
    lost = []
    for dep, row in deps.online:
        err = why.get(dep.url, f"unknown (the probe failed: {first_error_line(res)})") if isinstance(why, dict) else "?"
        row["host"] = f"downloaded by CMake (no fetch_mirror): {'unreachable: ' + err if err else 'reachable'}"
        if err:
            lost.append(f"{dep.label()} from {dep.url}: {err}")
    if not lost:
        return ""
    return (f"cannot download {'; '.join(lost)} (CMake's FetchContent would fail during the build): "
            "set the host var fetch_mirror to a folder of git repositories or a git URL prefix the controller "
            "reaches, or give the sources with cmake_defines FETCHCONTENT_SOURCE_DIR_<NAME>")


#: How deep dependencies of dependencies are followed (sgl-kernel: mscclpp -> nanobind -> robin_map).
MAX_DEPTH = 5


def transitive_deps(deps: list[Dep], rows: list[dict[str, Any]], mirror: str, overrides: dict[str, str]):
    """Add what the dependencies themselves download: the declarations of those whose CMake the
    build runs (``FetchContent_MakeAvailable``, ``add_subdirectory``; the first declaration of a
    name wins, as in CMake) and the submodules of git ones (a clone checks them out unless
    ``GIT_SUBMODULES`` says otherwise), read from the mirror at the pinned commit. Returns
    ``(deps, rows, error line or "")``."""
    names = {d.name.lower() for d in deps}
    frontier = list(zip(deps, rows))
    for _ in range(MAX_DEPTH):
        children: list[Dep] = []
        for dep, row in frontier:
            # a clone checks submodules out recursively (GIT_SUBMODULES_RECURSE defaults to ON)
            wants_subs = dep.kind in ("git", "submodule") and dep.submodules != ()
            if row["error"] or not row.get("git_dir") or not (dep.runs_cmake or wants_subs):
                continue
            got = yield Local(fn=gitmirror.tree_texts, args=(row["git_dir"], row["commit"]),
                              reason=f"read the CMake files of {dep.name} at {row['commit'][:12]}")
            if isinstance(got, BaseException):
                return deps, rows, f"fetch_mirror: {got}"
            texts = got["texts"]
            try:
                kids = []
                if dep.runs_cmake and "CMakeLists.txt" in texts:
                    own = {k: v for k, v in texts.items() if k != ".gitmodules"}
                    kids += [k for k in read_fetch_deps(own, overrides=overrides) if k.name.lower() not in names]
                if wants_subs:
                    subs = submodules(texts.get(".gitmodules"), got["gitlinks"])
                    subs = [x for x in subs if not dep.submodules or x.path in dep.submodules]
                    # where the parent's files are: a submodule's own path, else <name>_SOURCE_DIR
                    base = dep.path if dep.kind == "submodule" else "${%s_SOURCE_DIR}" % dep.name
                    for x in subs:
                        if x.url.startswith(("./", "../")):  # relative to the parent's own URL
                            url = relative_url(dep.url, x.url)
                            x = dataclasses.replace(x, url=url, repo=repo_of(url))
                        kids.append(dataclasses.replace(x, name=f"{dep.name}/{x.path}", path=f"{base}/{x.path}"))
            except FetchDepsError as exc:
                return deps, rows, (f"fetch_mirror: cannot tell what {dep.name} ({dep.repo} @ {row['commit'][:12]}) "
                                    f"downloads: {exc}")
            names |= {k.name.lower() for k in kids}
            children += kids
        if not children:
            break
        more = yield Local(fn=gitmirror.resolve, args=([c.as_dict() for c in children], mirror, str(deps_cache())),
                           reason=f"find {len(children)} dependencies of dependencies in the fetch_mirror")
        if isinstance(more, BaseException):
            return deps, rows, f"fetch_mirror {mirror}: {more}"
        deps, rows, frontier = deps + children, rows + list(more), list(zip(children, more))
    return deps, rows, ""


def _row(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d.get(k) for k in ("name", "kind", "repo", "ref", "commit") if d.get(k) is not None}


def _host_dir(dep: Dep, row: dict[str, Any], host: HostView, src: str, dirs: dict[str, str],
              by_name: dict[str, Dep]) -> str:
    m = _NESTED.match(dep.path or "")
    low = {k.lower(): v for k, v in dirs.items()}  # <name>_SOURCE_DIR: names are case-insensitive
    if m and m.group("dep").lower() in low:  # inside another dependency's sources (SOURCE_DIR, its submodule)
        return posixpath.normpath(low[m.group("dep").lower()] + (m.group("rest") or ""))
    if dep.kind == "submodule":
        return posixpath.join(src, dep.path or dep.name)
    return posixpath.join(host.workdir, "fetchdeps", str(row["repo"]).replace("/", "+"),
                          str(row["commit"]).replace(":", "-"))


def tree_with(tree: str, extra: str) -> str:
    """The source tree's hash with its submodules' pins mixed in (unchanged without any)."""
    return tree if not extra else hashlib.sha256(f"{tree}\n{extra}".encode()).hexdigest()


def _manifests(rows: list[dict[str, Any]]) -> list[list[tuple[str, str, str, bool]]]:
    return [local_manifest(Path(r["local"])) for r in rows]


def ship_deps(deps: DepsPlan):
    """Plan generator (the builder only): export what the controller lacks, then send each
    dependency's files the host does not hold with the same SHA-256. Returns ``(error line or None,
    files sent)``."""
    if not deps.ship:
        return None, 0
    rows = [r for r, _ in deps.ship]
    errors = yield Local(fn=gitmirror.export, args=(rows,), mutating=True, assume=[],
                         reason=f"export {len(rows)} dependencies from the fetch_mirror into the controller's cache")
    if isinstance(errors, BaseException):
        return f"fetch_mirror: {errors}", 0
    if errors:
        return "fetch_mirror: " + "; ".join(errors), 0
    manifests = yield Local(fn=_manifests, args=(rows,), after_change=True, assume=[[] for _ in rows],
                            reason="hash the dependencies' files")
    if isinstance(manifests, BaseException):
        return f"fetch_mirror: {manifests}", 0
    sent = 0
    for (row, where), manifest in zip(deps.ship, manifests):
        listing = yield probe(["/bin/sh", "-c", _LIST, "fleetctl-dep-files", where],
                              f"the files of {row['name']} on the host", timeout_s=600)
        have = {}
        for line in listing.stdout_text.splitlines():
            digest, _, name = line.partition("  ")
            have[name[2:] if name.startswith("./") else name] = digest
        todo = tuple((local, posixpath.join(where, rel), 0o755 if exe else 0o644)
                     for local, rel, digest, exe in manifest if have.get(rel) != digest)
        if todo:
            errs = yield PutFiles(files=todo, reason=f"{row['name']} ({row['repo']} @ {str(row['commit'])[:12]}): "
                                                     f"{len(todo)} of {len(manifest)} files")
            failed = [e for e in (errs or []) if e is not None]
            if failed:
                return f"cannot send {row['name']} to the host: {failed[0]}", sent
            sent += len(todo)
    return None, sent
