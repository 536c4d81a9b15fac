"""The offline-dependency fixture: tests/data/ext/offline_ext as a git checkout whose
dependencies (depa: FetchContent git; depb: FetchContent URL of a GitHub-style archive of tag
``v1``; depc: a git submodule) point at ``git.invalid``, and a mirror folder of bare repositories
holding them, all made here with real git (no network)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

EXT = Path(__file__).resolve().parent.parent / "data" / "ext" / "offline_ext"
_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **_ENV}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def bare_repo(mirror: Path, repo: str, files: dict[str, str], tag: str | None = None) -> str:
    """A bare repository ``<mirror>/<repo>.git`` with one commit of ``files``; returns the commit."""
    work = mirror.parent / f"work-{repo.replace('/', '+')}"
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(work))
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "dep", cwd=work)
    if tag:
        git("tag", tag, cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    dest = mirror / f"{repo}.git"
    dest.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", str(work), str(dest))
    shutil.rmtree(work)
    return commit


def offline_project(root: Path) -> dict[str, object]:
    """``{"src": project checkout, "mirror": mirror folder, "commits": {name: commit}}``."""
    mirror = root / "mirror"
    commits = {
        "depa": bare_repo(mirror, "deps/depa", {"depa.h": "#define DEPA_VALUE 100\n"}),
        "depb": bare_repo(mirror, "deps/depb", {"depb.h": "#define DEPB_VALUE 20\n"}, tag="v1"),
        "depc": bare_repo(mirror, "deps/depc", {"depc.h": "#define DEPC_VALUE 3\n"}),
    }
    src = root / "offline_ext"
    shutil.copytree(EXT, src)
    cml = src / "CMakeLists.txt"
    cml.write_text(cml.read_text().replace("@DEPA_COMMIT@", str(commits["depa"])))
    (src / ".gitmodules").write_text('[submodule "third_party/depc"]\n\tpath = third_party/depc\n'
                                     "\turl = https://git.invalid/deps/depc.git\n")
    git("init", "-q", "-b", "main", str(src))
    git("add", "-A", cwd=src)
    git("update-index", "--add", "--cacheinfo", f"160000,{commits['depc']},third_party/depc", cwd=src)
    git("commit", "-q", "-m", "project", cwd=src)
    return {"src": src, "mirror": mirror, "commits": commits}
