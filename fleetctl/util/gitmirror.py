"""The controller's copies of a build's dependencies, from the operator's mirror (the
``fetch_mirror`` var): each (repository, commit) got once, exported as plain files under
``<cache>/fetchdeps/<owner>+<name>/<commit>/``, from where the build task ships them to the
builder (:mod:`fleetctl.tasks.build_deps`).

A mirror is a local folder of git repositories (bare or not), looked up per ``owner/name`` as
``<mirror>/<owner>/<name>.git``, ``<mirror>/<owner>/<name>``, ``<mirror>/<owner>+<name>.git``,
``<mirror>/<owner>+<name>`` (also with a ``repo`` git folder inside), ``<mirror>/<name>.git``,
``<mirror>/<name>``; or a git URL prefix the controller reaches (``https://git.example/mirror``,
``file:///srv/git``): ``<prefix>/<owner>/<name>.git``, fetched into ``<cache>/fetchdeps/git/``.
Commits come out with ``git archive`` (the same files as GitHub's archive URLs, which are
``git archive`` too), unpacked into a temporary folder renamed into place, so a half-exported
tree is never taken for a cached one. Only git (the ``git`` program) talks to the mirror.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

#: A full git commit id (SHA-1); a shorter or symbolic ref is resolved in the mirror.
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")

#: Seconds one git command may take (a fetch of a large repository from a URL mirror).
GIT_TIMEOUT_S = 1800.0


class MirrorError(RuntimeError):
    """git failed on the controller (one line: the command's last error line)."""


def _git(*args: str, cwd: str | None = None, timeout_s: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false", "LC_ALL": "C"}
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, env=env, timeout=timeout_s)
    except FileNotFoundError:
        raise MirrorError("git is not installed on the controller (it reads the fetch_mirror)") from None
    except subprocess.TimeoutExpired:
        raise MirrorError(f"git {args[0]} took over {timeout_s:.0f} s") from None


def _last_line(res: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in res.stderr.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {res.returncode}"


def is_url(mirror: str) -> bool:
    """A URL prefix (``scheme://``, ``user@host:``), not a folder."""
    return "://" in mirror or ("@" in mirror.split("/")[0] and ":" in mirror)


def _slug(repo: str) -> str:
    return repo.replace("/", "+")


def candidates(mirror: str, repo: str) -> list[str]:
    """Where a mirror folder may hold ``owner/name`` (see the module docstring), in that order."""
    owner, _, name = repo.rpartition("/")
    rel = []
    if owner:
        rel += [f"{owner}/{name}.git", f"{owner}/{name}", f"{owner}+{name}.git", f"{owner}+{name}",
                f"{owner}+{name}/repo"]
    rel += [f"{name}.git", name]
    return [os.path.join(mirror, r) for r in rel]


def locate(mirror: str, repo: str) -> str | None:
    """The git folder of ``repo`` in a mirror folder, or ``None``."""
    for path in candidates(mirror, repo):
        if os.path.isdir(path) and _git("-C", path, "rev-parse", "--git-dir", timeout_s=60).returncode == 0:
            return path
    return None


def _rev(git_dir: str, ref: str) -> str | None:
    """The commit ``ref`` names in ``git_dir``, as a clone of that repository would check it out:
    what a URL mirror's fetch just brought (``refs/fleetctl/<ref>``), a tag, the upstream branch
    of a plain clone (``refs/remotes/origin/<ref>``, which ``git fetch`` moves, before a local
    branch of that name that it does not), a branch of a bare mirror, then any commit id."""
    for spec in (f"refs/fleetctl/{ref}", f"refs/tags/{ref}", f"refs/remotes/origin/{ref}", f"refs/heads/{ref}", ref):
        res = _git("-C", git_dir, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}", timeout_s=60)
        if res.returncode == 0:
            return res.stdout.decode().strip()
    return None


def _url_repo(mirror: str, repo: str, ref: str, cache: Path) -> tuple[str | None, str]:
    """Fetch ``ref`` of ``<prefix>/<repo>.git`` into the controller's git cache: (git dir, error).

    A commit id already fetched is not fetched again; a tag or branch is fetched every time (it
    may have moved, as a clone would see), into ``refs/fleetctl/<ref>``."""
    url = mirror.rstrip("/") + "/" + repo + ".git"
    git_dir = cache / "git" / (_slug(repo) + ".git")
    if not git_dir.is_dir():
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        res = _git("init", "--bare", "--quiet", str(git_dir))
        if res.returncode != 0:
            return None, f"git init {git_dir}: {_last_line(res)}"
    if COMMIT_RE.match(ref) and _rev(str(git_dir), ref):
        return str(git_dir), ""
    res = _git("-C", str(git_dir), "fetch", "--quiet", "--no-tags", url, ref)
    if res.returncode != 0:
        return None, f"{url} has no {ref} ({_last_line(res)})"
    # what was fetched is FETCH_HEAD only: name it, so that it stays reachable and _rev finds it
    _git("-C", str(git_dir), "update-ref", f"refs/fleetctl/{ref}", "FETCH_HEAD")
    return str(git_dir), ""


def tree_texts(git_dir: str, commit: str) -> dict[str, Any]:
    """What :func:`fleetctl.util.cmaketree.read_cmake_tree` gives for a folder, for ``commit`` of a
    mirror repository, read from git without exporting it (``git ls-tree``/``git cat-file``):
    ``{"texts": {path: text}, "gitlinks": {path: commit}, "errors": []}``."""
    res = _git("-C", git_dir, "ls-tree", "-r", "-z", commit, timeout_s=120)
    if res.returncode != 0:
        raise MirrorError(f"git ls-tree {commit} in {git_dir}: {_last_line(res)}")
    texts, gitlinks = {}, {}
    for entry in res.stdout.decode(errors="replace").split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) != 3:
            continue
        if parts[0] == "160000":
            gitlinks[path] = parts[2]
        elif parts[1] == "blob" and (path == ".gitmodules" or path.endswith(("CMakeLists.txt", ".cmake"))):
            if any(p in ("build", "_deps", ".git") for p in path.split("/")[:-1]):
                continue
            got = _git("-C", git_dir, "cat-file", "blob", parts[2], timeout_s=60)
            if got.returncode == 0:
                texts[path] = got.stdout.decode("utf-8", errors="replace")
    return {"texts": texts, "gitlinks": gitlinks, "errors": []}


def url_file(mirror: str, url: str) -> str | None:
    """A mirror folder's copy of a download that is no repository (a release asset such as
    ``json.tar.xz``): ``<mirror>/urls/<file name>``, else ``None``."""
    if is_url(mirror):
        return None
    path = os.path.join(mirror, "urls", url.rstrip("/").rsplit("/", 1)[-1])
    return path if os.path.isfile(path) else None


def export_dir(cache: Path, repo: str, commit: str) -> Path:
    """Where the controller keeps ``repo`` at ``commit`` as plain files."""
    return cache / _slug(repo) / commit


def resolve(deps: list[dict[str, Any]], mirror: str, cache: str) -> list[dict[str, Any]]:
    """Each dependency's commit in the mirror and whether the controller holds its files.

    Args:
        deps: :meth:`fleetctl.build.fetchdeps.Dep.as_dict` dicts.
        mirror: the ``fetch_mirror`` var (folder or URL prefix).
        cache: the controller's ``<cache>/fetchdeps`` folder.

    Returns:
        per dependency, the input plus ``commit`` (``None`` when missing), ``git_dir``,
        ``local`` (the export folder), ``controller_cached`` (bool) and ``error`` (one line naming
        the repository and the ref, or ``""``).
    """
    root = Path(cache)
    out = []
    for dep in deps:
        row = {**dep, "commit": None, "git_dir": None, "local": None, "controller_cached": False, "error": ""}
        repo, ref = dep.get("repo"), dep["ref"]
        if not repo and dep.get("kind") == "submodule":
            row["error"] = (f"{dep['name']} ({dep['url']} @ {str(ref)[:12]}): a submodule URL relative to the tree's "
                            "own remote, which fleetctl does not know: write its full URL in .gitmodules")
            out.append(row)
            continue
        if not repo:
            found = url_file(mirror, dep["url"])
            if found is None:
                row["error"] = (f"{dep['name']} ({dep['url']}): no repository in that URL, and the fetch_mirror has "
                                f"no urls/{dep['url'].rstrip('/').rsplit('/', 1)[-1]}")
            else:
                digest = _sha256(found)
                algo, _, want = (dep.get("url_hash") or "").partition("=")
                algo = algo.upper()
                have = digest if algo in ("", "SHA256") else _digest(found, algo)
                if algo and have is None:
                    row["error"] = f"{dep['name']}: URL_HASH {algo}: not a hash CMake knows"
                elif algo and have != want.lower():
                    row["error"] = f"{dep['name']}: {found} has {algo} {have}, the tree's URL_HASH wants {want}"
                else:
                    local = root / "urls" / digest
                    row.update(commit=f"sha256:{digest}", archive=found, local=str(local),
                               controller_cached=local.is_dir(), repo=f"urls/{os.path.basename(found)}")
            out.append(row)
            continue
        if is_url(mirror):
            git_dir, why = _url_repo(mirror, repo, ref, root)
        elif not os.path.isdir(mirror):
            git_dir, why = None, f"the fetch_mirror folder {mirror} does not exist"
        else:
            git_dir = locate(mirror, repo)
            why = "" if git_dir else f"the fetch_mirror {mirror} has no repository {repo} (looked for " + \
                ", ".join(os.path.relpath(c, mirror) for c in candidates(mirror, repo)[:2]) + ", ...)"
        commit = _rev(git_dir, ref) if git_dir else None
        if git_dir and not commit:
            why = f"{repo} in the fetch_mirror has no commit {ref}"
        row.update(git_dir=git_dir, commit=commit)
        if commit:
            local = export_dir(root, repo, commit)
            row.update(local=str(local), controller_cached=local.is_dir())
        else:
            row["error"] = f"{dep['name']} ({repo} @ {ref}): {why}"
        out.append(row)
    return out


def _sha256(path: str) -> str:
    return _digest(path, "SHA256") or ""


#: ``URL_HASH`` algorithms (CMake's ExternalProject docs) -> hashlib's names.
_HASHES = {"MD5": "md5", "SHA1": "sha1", "SHA224": "sha224", "SHA256": "sha256", "SHA384": "sha384",
           "SHA512": "sha512", "SHA3_224": "sha3_224", "SHA3_256": "sha3_256", "SHA3_384": "sha3_384",
           "SHA3_512": "sha3_512"}


def _digest(path: str, algo: str) -> str | None:
    """The hex digest of ``path`` by a ``URL_HASH`` algorithm name, ``None`` for an unknown one."""
    import hashlib

    name = _HASHES.get(algo.upper())
    if name is None:
        return None
    h = hashlib.new(name)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _unpack(archive: str, dest: Path) -> None:
    """Unpack a tar or zip; a single top-level folder is stripped, as CMake's download step does."""
    import zipfile

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="tar") if hasattr(tarfile, "data_filter") else tf.extractall(dest)
    top = list(dest.iterdir())
    if len(top) == 1 and top[0].is_dir():
        inner = dest.parent / (dest.name + ".inner")
        os.replace(top[0], inner)
        dest.rmdir()
        os.replace(inner, dest)


def export(rows: list[dict[str, Any]]) -> list[str]:
    """Export every resolved dependency not yet on the controller (``git archive`` of its commit);
    returns one error line per failure (empty: all there)."""
    errors = []
    for row in rows:
        if not row.get("commit") or Path(row["local"]).is_dir():
            continue
        dest = Path(row["local"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".part-", dir=dest.parent))
        try:
            if row.get("archive"):
                _unpack(row["archive"], tmp / "tree")
                _into_place(tmp / "tree", dest)
                continue
            tar = tmp / "src.tar"
            res = _git("-C", row["git_dir"], "archive", "--format=tar", "-o", str(tar), row["commit"])
            if res.returncode != 0:
                errors.append(f"{row['name']}: git archive {row['repo']} {row['commit']}: {_last_line(res)}")
                continue
            tree = tmp / "tree"
            with tarfile.open(tar) as tf:
                tf.extractall(tree, filter="tar") if hasattr(tarfile, "data_filter") else tf.extractall(tree)
            tar.unlink()
            _into_place(tree, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return errors


def _into_place(tree: Path, dest: Path) -> None:
    """Rename a finished export into place; another run that got there first wins."""
    try:
        os.replace(tree, dest)
    except OSError:
        if not dest.is_dir():
            raise
