"""Read the CMake files of a source tree and its gitlinks: what :func:`fleetctl.build.fetchdeps.read_fetch_deps`
needs. Stdlib only, Python 3.8+, no fleetctl import: the same source runs on the controller
(a ``copy`` source folder) and on the host (``python3 -c``, :data:`HOST_PROBE`, for a tree that is
only there).

Output shape: ``{"texts": {relative path: text}, "gitlinks": {submodule path: commit} or None,
"top": {name: text}, "errors": [str]}``. ``texts`` holds every ``CMakeLists.txt``, ``*.cmake``
and the root ``.gitmodules`` (build outputs, ``.git`` and files over :data:`MAX_BYTES` skipped);
``gitlinks`` comes from ``git ls-files -s`` (mode 160000 entries, gitrepository-layout(5)) where
the tree is in a git work tree and git is there, else it is ``None`` (unknown); ``top`` holds the
top-level files named by ``top`` that exist (``pyproject.toml``, ``setup.py``: what
:mod:`fleetctl.tasks.build_meta` reads), each cut at :data:`TOP_CHARS` characters, so one read
answers both the build's metadata and its dependencies (one round trip for a tree on the host).
On the host: ``python3 -c PROGRAM ROOT [TOP_NAME...]``.
"""

import json
import os
import subprocess
import sys

#: Folders never read (build outputs, VCS data), as the ``copy`` task skips them.
SKIP_DIRS = frozenset({"build", "__pycache__", ".git", "dist", ".pytest_cache", "_deps"})
#: A CMake file larger than this (bytes) is not read (no real one comes near).
MAX_BYTES = 4 << 20
#: How much of each ``top`` file is read (characters: 256 Ki, far above any real pyproject.toml).
TOP_CHARS = 262144


def read_cmake_tree(root, top=()):
    """``{"texts", "gitlinks", "top", "errors"}`` of the tree at ``root`` (see the module docstring)."""
    texts, errors, tops = {}, [], {}
    for name in top:
        path = os.path.join(root, name)
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    tops[name] = fh.read(TOP_CHARS)
            except OSError as exc:
                errors.append("%s: %s" % (name, exc.strerror or exc))
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        rel_dir = os.path.relpath(here, root)
        for name in sorted(files):
            if not (name == "CMakeLists.txt" or name.endswith(".cmake") or (name == ".gitmodules" and rel_dir == ".")):
                continue
            path = os.path.join(here, name)
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            try:
                if os.path.getsize(path) > MAX_BYTES:
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    texts[rel] = fh.read()
            except OSError as exc:
                errors.append("%s: %s" % (rel, exc.strerror or exc))
    gitlinks = None  # unknown unless git answers
    if ".gitmodules" in texts:
        try:
            res = subprocess.run(["git", "-C", root, "ls-files", "-s"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, universal_newlines=True, timeout=60)
            if res.returncode == 0:
                gitlinks = {}
            for line in res.stdout.splitlines() if res.returncode == 0 else ():
                meta, _, path = line.partition("\t")
                parts = meta.split()
                if len(parts) == 3 and parts[0] == "160000":
                    gitlinks[path] = parts[1]
        except (OSError, subprocess.SubprocessError):
            pass
    return {"texts": texts, "gitlinks": gitlinks, "top": tops, "errors": errors}


if __name__ == "__main__":
    print(json.dumps(read_cmake_tree(sys.argv[1], sys.argv[2:])))
