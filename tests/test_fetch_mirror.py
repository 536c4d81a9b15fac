"""fleetctl.util.gitmirror and build_deps.transitive_deps on real git repositories made here: a
dependency whose CMake the tree runs declares its own (found and resolved), a git dependency's
submodule is found at its gitlink, a release-asset URL comes from <mirror>/urls/ checked against
URL_HASH, a .gitmodules entry without a gitlink is no submodule."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from fleetctl.build.fetchdeps import read_fetch_deps
from fleetctl.tasks import build_deps, steps
from fleetctl.util import gitmirror
from tests.support.offline_ext import bare_repo, git


def drive(gen):
    """Answer a planner generator's Local steps by calling them (nothing else is asked here)."""
    answer = None
    while True:
        try:
            step = gen.send(answer)
        except StopIteration as stop:
            return stop.value
        assert isinstance(step, steps.Local), step
        answer = step.fn(*step.args)


def test_dependencies_of_dependencies_and_their_submodules(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    leaf = bare_repo(mirror, "o/leaf", {"leaf.h": "#define LEAF 1\n"})
    sub = bare_repo(mirror, "o/sub", {"sub.h": "#define SUB 1\n"})
    # o/mid: its CMake declares o/leaf; it has a submodule (o/sub at ext/sub) and a stale .gitmodules entry
    work = tmp_path / "mid"
    git("init", "-q", "-b", "main", str(work))
    (work / "CMakeLists.txt").write_text(
        f"include(FetchContent)\nFetchContent_Declare(leaf GIT_REPOSITORY https://git.invalid/o/leaf.git GIT_TAG {leaf})\n"
        "FetchContent_MakeAvailable(leaf)\n")
    (work / ".gitmodules").write_text('[submodule "ext/sub"]\n\tpath = ext/sub\n\turl = https://git.invalid/o/sub.git\n'
                                      '[submodule "ext/gone"]\n\tpath = ext/gone\n\turl = https://git.invalid/o/gone.git\n')
    git("add", "-A", cwd=work)
    git("update-index", "--add", "--cacheinfo", f"160000,{sub},ext/sub", cwd=work)
    git("commit", "-q", "-m", "mid", cwd=work)
    mid = git("rev-parse", "HEAD", cwd=work)
    git("clone", "-q", "--bare", str(work), str(mirror / "o" / "mid.git"))
    top = {"CMakeLists.txt": f"FetchContent_Declare(mid GIT_REPOSITORY https://git.invalid/o/mid.git GIT_TAG {mid})\n"
                             "FetchContent_MakeAvailable(mid)\n"}
    deps = read_fetch_deps(top)
    assert deps[0].runs_cmake and deps[0].submodules is None
    cache = build_deps.deps_cache()  # the planner's (the session's hermetic XDG cache)
    rows = gitmirror.resolve([d.as_dict() for d in deps], str(mirror), str(cache))
    deps, rows, err = drive(build_deps.transitive_deps(deps, rows, str(mirror), {}))
    assert err == ""
    assert [(d.name, d.repo, r["commit"]) for d, r in zip(deps, rows)] == [
        ("mid", "o/mid", mid), ("leaf", "o/leaf", leaf), ("mid/ext/sub", "o/sub", sub)]
    assert deps[2].path == "${mid_SOURCE_DIR}/ext/sub"
    assert gitmirror.export(rows) == []
    assert (Path(rows[1]["local"]) / "leaf.h").read_text() == "#define LEAF 1\n"
    again = gitmirror.resolve([d.as_dict() for d in deps], str(mirror), str(cache))
    assert [(r["name"], r["controller_cached"], r["error"]) for r in again] == [(d.name, True, "") for d in deps]


def test_a_release_asset_comes_from_the_mirrors_urls_folder_checked_by_its_hash(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "urls").mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        data = b"#define JSON 1\n"
        info = tarfile.TarInfo("json/json.h")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    (mirror / "urls" / "json.tar.xz").write_bytes(buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    url = "https://github.com/nlohmann/json/releases/download/v3.11.3/json.tar.xz"
    good, bad, absent = (read_fetch_deps({"CMakeLists.txt": f"FetchContent_Declare(json URL {url}{h})\n"})[0].as_dict()
                         for h in (f" URL_HASH SHA256={digest}", " URL_HASH SHA256=" + "0" * 64, ""))
    absent["url"] = absent["url"].replace("json.tar.xz", "other.tar.gz")
    rows = gitmirror.resolve([good, bad, absent], str(mirror), str(tmp_path / "cache"))
    assert rows[0]["error"] == "" and rows[0]["commit"] == f"sha256:{digest}"
    assert "the tree's URL_HASH wants 000" in rows[1]["error"]
    assert "the fetch_mirror has no urls/other.tar.gz" in rows[2]["error"]
    assert gitmirror.export(rows[:1]) == []
    assert (Path(rows[0]["local"]) / "json.h").read_text() == "#define JSON 1\n"  # one top folder stripped
    # every algorithm CMake's URL_HASH takes is checked, URL_MD5 too; one it does not know is refused
    blob = buf.getvalue()
    forms = [f" URL_HASH SHA512={hashlib.sha512(blob).hexdigest()}", " URL_HASH SHA512=" + "0" * 128,
             f" URL_MD5 {hashlib.md5(blob).hexdigest()}", " URL_MD5 " + "0" * 32,
             f" URL_HASH SHA3_256={hashlib.sha3_256(blob).hexdigest()}", " URL_HASH CRC32=1234"]
    got = gitmirror.resolve([read_fetch_deps({"CMakeLists.txt": f"FetchContent_Declare(json URL {url}{h})\n"})[0]
                             .as_dict() for h in forms], str(mirror), str(tmp_path / "cache"))
    assert [r["error"] == "" for r in got] == [True, False, True, False, True, False]
    assert "has SHA512 " in got[1]["error"] and "has MD5 " in got[3]["error"]
    assert "URL_HASH CRC32: not a hash CMake knows" in got[5]["error"]


def _commit(work: Path, text: str) -> str:
    (work / "dep.h").write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", text, cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def test_moving_refs_resolve_as_a_clone_would_see_them(tmp_path: Path) -> None:
    """A branch or tag is resolved to where upstream has it now: in a plain (non-bare) clone used
    as the mirror, a branch is origin's (a local branch of that name that `git fetch` does not
    move is stale); through a URL mirror a moved tag and a branch are fetched again."""
    up = tmp_path / "up"
    git("init", "-q", "-b", "main", str(up))
    first = _commit(up, "#define V 1\n")
    git("branch", "dev", cwd=up)
    git("tag", "v1", cwd=up)
    cache = str(build_deps.deps_cache())
    dev = {"name": "dep", "kind": "git", "url": "https://git.invalid/o/dep.git", "repo": "o/dep", "ref": "dev"}
    tag = {**dev, "ref": "v1"}
    # a plain clone as the mirror, with a local dev branch made once and never moved again
    plain = tmp_path / "plain"
    git("clone", "-q", str(up), str(plain / "o" / "dep"))
    git("branch", "dev", "origin/dev", cwd=plain / "o" / "dep")
    assert gitmirror.resolve([dev], str(plain), cache)[0]["commit"] == first
    git("checkout", "-q", "dev", cwd=up)
    second = _commit(up, "#define V 2\n")
    git("fetch", "-q", cwd=plain / "o" / "dep")
    assert gitmirror.resolve([dev], str(plain), cache)[0]["commit"] == second
    # a URL mirror: the branch resolves, and a moved tag is seen moved
    url = "file://" + str(tmp_path / "srv")
    git("clone", "-q", "--bare", str(up), str(tmp_path / "srv" / "o" / "dep.git"))
    got = gitmirror.resolve([dev, tag], url, cache)
    assert [(r["commit"], r["error"]) for r in got] == [(second, ""), (first, "")]
    git("tag", "-f", "v1", "dev", cwd=up)
    git("push", "-q", "-f", str(tmp_path / "srv" / "o" / "dep.git"), "v1", cwd=up)
    assert gitmirror.resolve([tag], url, cache)[0]["commit"] == second


def test_submodules_of_submodules_and_names_in_any_case(tmp_path: Path) -> None:
    """A clone checks submodules out recursively: o/mid's submodule o/sub has its own (o/inner, by a
    relative URL),
    found at its gitlink under sub's folder; FetchContent names are case-insensitive, so
    FetchContent_MakeAvailable(MID) runs the CMake of the dependency declared as Mid."""
    mirror = tmp_path / "mirror"
    inner = bare_repo(mirror, "o/inner", {"inner.h": "#define INNER 1\n"})
    work = tmp_path / "sub"
    git("init", "-q", "-b", "main", str(work))
    # a URL relative to sub's own (gitmodules(5)): https://git.invalid/o/inner.git
    (work / ".gitmodules").write_text('[submodule "in"]\n\tpath = in\n\turl = ../inner.git\n')
    git("add", "-A", cwd=work)
    git("update-index", "--add", "--cacheinfo", f"160000,{inner},in", cwd=work)
    git("commit", "-q", "-m", "sub", cwd=work)
    sub = git("rev-parse", "HEAD", cwd=work)
    git("clone", "-q", "--bare", str(work), str(mirror / "o" / "sub.git"))
    leaf = bare_repo(mirror, "o/leaf", {"leaf.h": "#define LEAF 1\n"})
    work = tmp_path / "mid"
    git("init", "-q", "-b", "main", str(work))
    (work / "CMakeLists.txt").write_text(
        f"FetchContent_Declare(leaf GIT_REPOSITORY https://git.invalid/o/leaf.git GIT_TAG {leaf})\n")
    (work / ".gitmodules").write_text('[submodule "s"]\n\tpath = ext/s\n\turl = https://git.invalid/o/sub.git\n')
    git("add", "-A", cwd=work)
    git("update-index", "--add", "--cacheinfo", f"160000,{sub},ext/s", cwd=work)
    git("commit", "-q", "-m", "mid", cwd=work)
    mid = git("rev-parse", "HEAD", cwd=work)
    git("clone", "-q", "--bare", str(work), str(mirror / "o" / "mid.git"))
    top = {"CMakeLists.txt": f"FetchContent_Declare(Mid GIT_REPOSITORY https://git.invalid/o/mid.git GIT_TAG {mid})\n"
                             "FetchContent_Declare(mid GIT_REPOSITORY https://git.invalid/o/other.git GIT_TAG v9)\n"
                             "FetchContent_MakeAvailable(MID)\n"}
    deps = read_fetch_deps(top)
    assert [(d.name, d.runs_cmake) for d in deps] == [("Mid", True)]  # one dependency, the first declaration
    cache = build_deps.deps_cache()
    rows = gitmirror.resolve([d.as_dict() for d in deps], str(mirror), str(cache))
    deps, rows, err = drive(build_deps.transitive_deps(deps, rows, str(mirror), {}))
    assert err == ""
    assert [(d.name, d.path, r["commit"]) for d, r in zip(deps, rows)] == [
        ("Mid", None, mid), ("leaf", None, leaf), ("Mid/ext/s", "${Mid_SOURCE_DIR}/ext/s", sub),
        ("Mid/ext/s/in", "${Mid_SOURCE_DIR}/ext/s/in", inner)]


def test_a_submodule_the_tree_adds_as_a_subdirectory_brings_its_own_dependencies(tmp_path: Path) -> None:
    """add_subdirectory(third_party/lib) of a submodule runs the submodule's CMake: its own
    FetchContent declarations (o/leaf) are dependencies of the build too."""
    mirror = tmp_path / "mirror"
    leaf = bare_repo(mirror, "o/leaf", {"leaf.h": "#define LEAF 1\n"})
    lib = bare_repo(mirror, "o/lib", {"CMakeLists.txt": "include(FetchContent)\nFetchContent_Declare(leaf GIT_REPOSITORY "
                                                        f"https://git.invalid/o/leaf.git GIT_TAG {leaf})\n"
                                                        "FetchContent_MakeAvailable(leaf)\n"})
    top = {"CMakeLists.txt": "add_subdirectory(third_party/lib)\n",
           ".gitmodules": '[submodule "lib"]\n\tpath = third_party/lib\n\turl = https://git.invalid/o/lib.git\n'}
    deps = read_fetch_deps(top, gitlinks={"third_party/lib": lib})
    assert [(d.name, d.kind, d.runs_cmake) for d in deps] == [("lib", "submodule", True)]
    rows = gitmirror.resolve([d.as_dict() for d in deps], str(mirror), str(build_deps.deps_cache()))
    deps, rows, err = drive(build_deps.transitive_deps(deps, rows, str(mirror), {}))
    assert err == "" and [(d.name, r["commit"]) for d, r in zip(deps, rows)] == [("lib", lib), ("leaf", leaf)]
