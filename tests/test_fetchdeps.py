"""fleetctl.build.fetchdeps: the FetchContent/submodule reader, on fixture trees written in our own
words with the constructs of the real sgl-kernel trees (git and URL forms, an included .cmake file,
a GitHub-mirror variable set with CACHE STRING) and every refusal."""

from __future__ import annotations

import pytest

from fleetctl.build.fetchdeps import FetchDepsError, read_fetch_deps, repo_of

C = "57e3cfb47a2d9e0d46eb6335c3dc411498efa198"
F = "553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28"

TOP = f"""cmake_minimum_required(VERSION 3.26)
include(${{CMAKE_CURRENT_LIST_DIR}}/cmake/utils.cmake)
include(FetchContent)
set(GITHUB_ARTIFACTORY "github.com" CACHE STRING "GitHub mirror URL")
# FetchContent_Declare(commented-out GIT_REPOSITORY nowhere)
FetchContent_Declare(
    repo-cutlass
    GIT_REPOSITORY https://github.com/NVIDIA/cutlass
    GIT_TAG        {C}
    GIT_SHALLOW    OFF
)
FetchContent_Populate(repo-cutlass)
FetchContent_Declare(
    repo-fmt
    URL      "https://${{GITHUB_ARTIFACTORY}}/fmtlib/fmt/archive/{F}.tar.gz"
    URL_HASH SHA256=c314
)
include(${{CMAKE_CURRENT_LIST_DIR}}/cmake/extra.cmake)
include(${{repo-cutlass_SOURCE_DIR}}/cmake/their.cmake)
"""
EXTRA = """FetchContent_Declare(repo-triton GIT_REPOSITORY "https://github.com/triton-lang/triton" GIT_TAG v3.5.1)
FetchContent_Declare(repo-sub URL https://${GITHUB_ARTIFACTORY}/o/sub/archive/refs/tags/v1.tar.gz
    SOURCE_DIR ${repo-triton_SOURCE_DIR}/sub)
"""


def tree(**more: str) -> dict[str, str]:
    return {"CMakeLists.txt": TOP, "cmake/utils.cmake": "macro(x)\nendmacro()\n", "cmake/extra.cmake": EXTRA, **more}


def test_reads_git_url_and_included_declarations_in_order() -> None:
    deps = read_fetch_deps(tree())
    assert [(d.name, d.kind, d.repo, d.ref) for d in deps] == [
        ("repo-cutlass", "git", "NVIDIA/cutlass", C),
        ("repo-fmt", "url", "fmtlib/fmt", F),
        ("repo-triton", "git", "triton-lang/triton", "v3.5.1"),
        ("repo-sub", "url", "o/sub", "v1"),
    ]
    assert deps[1].url == f"https://github.com/fmtlib/fmt/archive/{F}.tar.gz" and deps[1].url_hash == "SHA256=c314"
    assert deps[0].source_dir_var == "FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS" and deps[0].pinned
    assert not deps[2].pinned and (deps[2].file, deps[2].line) == ("cmake/extra.cmake", 1)
    assert deps[3].path == "${repo-triton_SOURCE_DIR}/sub"


def test_define_overrides_a_cache_default() -> None:
    deps = read_fetch_deps(tree(), overrides={"GITHUB_ARTIFACTORY": "mirror.local"})
    assert deps[1].url.startswith("https://mirror.local/fmtlib/fmt/")


def test_submodules_pinned_by_gitlink() -> None:
    mods = '[submodule "third_party/dep"]\n\tpath = third_party/dep\n\turl = https://git.invalid/dep.git\n'
    deps = read_fetch_deps(tree(**{".gitmodules": mods}), gitlinks={"third_party/dep": C})
    assert (deps[-1].kind, deps[-1].repo, deps[-1].ref, deps[-1].path) == ("submodule", "dep", C,
                                                                           "third_party/dep")
    assert deps[-1].source_dir_var is None
    with pytest.raises(FetchDepsError, match=r"\.gitmodules:1: \[submodule \"third_party/dep\"\]: the tree is no git"):
        read_fetch_deps(tree(**{".gitmodules": mods}))
    # an entry without a gitlink is no submodule (git checks nothing out there)
    assert [d.kind for d in read_fetch_deps(tree(**{".gitmodules": mods}), gitlinks={})] == ["git", "url", "git", "url"]


@pytest.mark.parametrize("text, where, match", [
    ("FetchContent_Declare(d GIT_REPOSITORY ${NOWHERE}/d.git GIT_TAG v1)\n", "CMakeLists.txt:1",
     r"\$\{NOWHERE\} in FetchContent_Declare\(d\): NOWHERE is never set"),
    ("set(M a)\nif(X)\nset(M b)\nendif()\nFetchContent_Declare(d URL https://${M}/o/d/archive/v1.tar.gz)\n",
     "CMakeLists.txt:5", r"M is set to different values \(CMakeLists.txt:1, CMakeLists.txt:3\)"),
    ("\n\nFetchContent_Declare(d\n GIT_REPOSITORY https://x/o/d.git)\n", "CMakeLists.txt:3",
     r"FetchContent_Declare\(d\): GIT_REPOSITORY without GIT_TAG"),
    ("FetchContent_Declare(d SVN_REPOSITORY svn://x/d)\n", "CMakeLists.txt:1", r"SVN_REPOSITORY is not supported"),
    ("FetchContent_Declare(${N} URL x)\n", "CMakeLists.txt:1", r"a computed dependency name"),
    ('FetchContent_Declare(d URL "https://x\n', "CMakeLists.txt:1", r"never closed"),
    ("include(${CMAKE_CURRENT_LIST_DIR}/cmake/missing.cmake)\n", "CMakeLists.txt:1", r"cmake/missing.cmake is not"),
])
def test_refuses_what_it_cannot_resolve(text: str, where: str, match: str) -> None:
    with pytest.raises(FetchDepsError, match=match) as info:
        read_fetch_deps({"CMakeLists.txt": text})
    assert str(info.value).startswith(where + ": ") and "\n" not in str(info.value)


def test_an_optional_include_that_is_not_there_is_skipped() -> None:
    assert read_fetch_deps({"CMakeLists.txt": "include(cmake/hermetic_build.cmake OPTIONAL)\n"}) == []


def test_no_cmakelists_is_refused() -> None:
    with pytest.raises(FetchDepsError, match="no CMakeLists.txt"):
        read_fetch_deps({})


@pytest.mark.parametrize("url, repo", [
    ("https://github.com/NVIDIA/cutlass", "NVIDIA/cutlass"),
    ("https://github.com/flashinfer-ai/flashinfer.git", "flashinfer-ai/flashinfer"),
    ("git@github.com:fmtlib/fmt.git", "fmtlib/fmt"),
    ("file:///srv/mirror/o/d.git", "o/d"),
    ("https://codeload.github.com/o/d/tar.gz/v1", "o/d"),
    ("https://x/just", "just"),
    ("https://x/", None),
])
def test_repo_of(url: str, repo: str | None) -> None:
    assert repo_of(url) == repo


def test_local_declarations_download_nothing_and_are_left_out() -> None:
    text = ('FetchContent_Declare(olddep SOURCE_DIR "${CMAKE_CURRENT_SOURCE_DIR}/deps/olddep")\n'
            'FetchContent_Declare(tar URL "${CMAKE_CURRENT_SOURCE_DIR}/deps/x.tar.gz")\n'
            "FetchContent_Declare(f URL file:///srv/x.tar.gz)\n")
    assert read_fetch_deps({"CMakeLists.txt": text}) == []


def test_an_external_project_that_downloads_is_refused_by_name():
    """ExternalProject_Add downloads while building, where no FETCHCONTENT_SOURCE_DIR_* reaches:
    refused with file, line and construct (an offline build would fail mid-way); a local URL is fine."""
    import pytest

    from fleetctl.build.fetchdeps import FetchDepsError, read_fetch_deps

    with pytest.raises(FetchDepsError, match=r"CMakeLists.txt:2: ExternalProject_Add\(zlib\): GIT_REPOSITORY "
                                             r"https://git.invalid/z.git: downloads while building"):
        read_fetch_deps({"CMakeLists.txt": "include(ExternalProject)\n"
                                           "ExternalProject_Add(zlib GIT_REPOSITORY https://git.invalid/z.git GIT_TAG v1)\n"})
    assert read_fetch_deps({"CMakeLists.txt": "ExternalProject_Add(z URL ${CMAKE_CURRENT_SOURCE_DIR}/z.tar.gz)\n"}) == []


def test_relative_submodule_urls_resolve_against_the_superproject():
    """gitmodules(5): ./x and ../x are relative to the superproject's URL (taken as a folder)."""
    from fleetctl.build.fetchdeps import relative_url, repo_of

    assert relative_url("https://git.invalid/o/mid.git", "../inner.git") == "https://git.invalid/o/inner.git"
    assert relative_url("https://git.invalid/o/mid.git/", "./sub") == "https://git.invalid/o/mid.git/sub"
    assert relative_url("https://git.invalid/o/mid.git", "../../p/x.git") == "https://git.invalid/p/x.git"
    assert relative_url("git@host:o/mid.git", "../inner.git") == "git@host:o/inner.git"
    assert repo_of("../inner.git") is None and repo_of(relative_url("https://h/o/mid.git", "../inner.git")) == "o/inner"
