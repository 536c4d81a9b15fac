"""What a CMake tree downloads at configure time: its ``FetchContent_Declare`` calls and its git
submodules, read from the tree's text. Pure (texts in, :class:`Dep` list out), so ``--plan`` and
tests need no host and no network.

Read: ``CMakeLists.txt`` at the root, every file it ``include()``\\ s by an in-tree path (``.cmake``
files; ``include(FetchContent)``-style module names are CMake's own and skipped) and every
``add_subdirectory()`` with an in-tree literal path, recursively; ``.gitmodules`` (``git config``
format, gitmodules(5)) with the commit of each submodule's gitlink, which the caller knows from the
controller's checkout (``git ls-files -s``) or a ``git ls-tree`` on the host.

The grammar is CMake's (cmake-language(7)): command invocations ``name(args)`` with quoted
(``"..."`` with ``\\`` escapes), bracket (``[=[...]=]``) and unquoted arguments, ``#`` line and
``#[[...]]`` bracket comments. ``FetchContent_Declare(NAME ...)`` keywords read (CMake's
FetchContent and ExternalProject docs): ``GIT_REPOSITORY``, ``GIT_TAG``, ``URL`` (the first of its
values), ``URL_HASH``/``URL_MD5``, ``SOURCE_DIR``; any other keyword is kept unread. A declaration that
downloads nothing (only ``SOURCE_DIR``, or a ``URL`` that is a local path or ``file://``) is not a
dependency to fetch and is left out.

``${VAR}`` in those values is resolved from literal ``set(VAR value [CACHE TYPE doc [FORCE]])``
calls in the files read (and from ``overrides``, the build's ``-D`` defines, which win as they do
in CMake). Anything the reader cannot resolve to one literal is refused, naming the file, the line
and the construct (:class:`FetchDepsError`), the patch script's style: a variable that is never
set literally, one set to two different literals, a declaration without ``GIT_REPOSITORY``/``URL``,
a git one without a ``GIT_TAG`` (it would fetch whatever the default branch is then).

CMake's override for a declared dependency is ``FETCHCONTENT_SOURCE_DIR_<uppercaseName>`` (the
name as declared, upper-cased, ``-`` kept) with ``FETCHCONTENT_FULLY_DISCONNECTED=ON`` (FetchContent
docs, "Variables"): :meth:`Dep.source_dir_var`.
"""

from __future__ import annotations

import configparser
import dataclasses
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .cmakelang import CMakeSyntaxError, Command, parse_commands
from ..util.gitmirror import COMMIT_RE  # noqa: F401 - callers import it from here too
from .gitrefs import archive_ref, relative_url, repo_of  # noqa: F401 - callers import them from here too


_BUILTIN_DIRS = ("CMAKE_CURRENT_LIST_DIR", "CMAKE_CURRENT_SOURCE_DIR", "CMAKE_SOURCE_DIR", "PROJECT_SOURCE_DIR")
_VAR_RE = re.compile(r"\$\{([A-Za-z0-9_.+\-/]+)\}")
_KEYWORDS = frozenset({
    "GIT_REPOSITORY", "GIT_TAG", "GIT_SHALLOW", "GIT_PROGRESS", "GIT_SUBMODULES", "GIT_SUBMODULES_RECURSE",
    "GIT_REMOTE_NAME", "GIT_CONFIG", "GIT_REMOTE_UPDATE_STRATEGY", "URL", "URL_HASH", "URL_MD5",
    "DOWNLOAD_NAME", "DOWNLOAD_EXTRACT_TIMESTAMP", "DOWNLOAD_NO_EXTRACT", "TLS_VERIFY", "TLS_CAINFO",
    "SOURCE_DIR", "BINARY_DIR", "SOURCE_SUBDIR", "SUBBUILD_DIR", "PATCH_COMMAND", "UPDATE_COMMAND",
    "UPDATE_DISCONNECTED", "CONFIGURE_COMMAND", "BUILD_COMMAND", "INSTALL_COMMAND", "TEST_COMMAND",
    "FIND_PACKAGE_ARGS", "OVERRIDE_FIND_PACKAGE", "EXCLUDE_FROM_ALL", "SYSTEM", "SVN_REPOSITORY",
    "HG_REPOSITORY", "CVS_REPOSITORY", "HTTP_USERNAME", "HTTP_PASSWORD", "HTTP_HEADER", "NETRC",
    "INACTIVITY_TIMEOUT", "TIMEOUT", "LOG_DOWNLOAD", "USES_TERMINAL_DOWNLOAD", "DOWNLOAD_COMMAND",
})


class FetchDepsError(CMakeSyntaxError):
    """A construct the reader cannot resolve: ``file:line: construct: why`` (one line)."""


@dataclass(frozen=True)
class Dep:
    """One dependency the tree would download.

    Attributes:
        name: as declared (``repo-cutlass``); for a submodule its ``.gitmodules`` name.
        kind: ``"git"`` (``GIT_REPOSITORY``), ``"url"`` (``URL``) or ``"submodule"``.
        url: the repository URL (git, submodule) or the archive URL (url), variables resolved.
        ref: the pinned ``GIT_TAG``, the archive's ref, or the gitlink's commit.
        repo: ``owner/name`` of the repository the sources are (the mirror's key), or ``None`` for
            an archive URL that names no repository.
        url_hash: ``URL_HASH`` (``SHA256=...``) or ``MD5=...`` of a URL form, else ``None``.
        path: a submodule's path in the tree; a declaration's ``SOURCE_DIR`` as written.
        file: the file (relative to the tree) and line of the declaration.
        runs_cmake: the tree runs the dependency's own CMake (``FetchContent_MakeAvailable`` or
            ``add_subdirectory(${<name>_SOURCE_DIR})``), so its own declarations count too.
        submodules: ``GIT_SUBMODULES`` as given (``()``: none); ``None``: not given, so a git
            clone would check out all of them (FetchContent/ExternalProject docs).
    """

    name: str
    kind: str
    url: str
    ref: str
    repo: str | None
    file: str
    line: int
    url_hash: str | None = None
    path: str | None = None
    runs_cmake: bool = False
    submodules: tuple[str, ...] | None = None

    @property
    def pinned(self) -> bool:
        """The ref is a full commit id (else a tag or branch the mirror resolves)."""
        return bool(COMMIT_RE.match(self.ref))

    @property
    def source_dir_var(self) -> str | None:
        """``FETCHCONTENT_SOURCE_DIR_<NAME>`` (FetchContent docs), ``None`` for a submodule."""
        return None if self.kind == "submodule" else "FETCHCONTENT_SOURCE_DIR_" + self.name.upper()

    def label(self) -> str:
        """``repo-cutlass (NVIDIA/cutlass @ 57e3cfb47a2d)`` for one line of output."""
        ref = self.ref[:12] if self.pinned else self.ref
        return f"{self.name} ({self.repo or self.url} @ {ref})"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "url": self.url, "ref": self.ref, "repo": self.repo,
                "file": self.file, "line": self.line, "url_hash": self.url_hash, "path": self.path,
                "runs_cmake": self.runs_cmake,
                "submodules": None if self.submodules is None else list(self.submodules)}


def read_fetch_deps(texts: Mapping[str, str], *, overrides: Mapping[str, str] | None = None,
                    gitlinks: Mapping[str, str] | None = None) -> list[Dep]:
    """Every dependency of the tree: declarations in file order (following includes), then submodules.

    Args:
        texts: relative path (POSIX, from the tree's root) -> text, at least ``CMakeLists.txt``;
            the ``.cmake`` files it includes and ``.gitmodules`` when there. A file a literal
            ``include()`` names that is not in ``texts`` is refused.
        overrides: CMake ``-D`` defines of the build (they win over ``set(... CACHE ...)``).
        gitlinks: submodule path -> the commit its gitlink pins (``git ls-files -s`` mode 160000);
            ``None``: unknown (the tree is no git checkout), so a ``.gitmodules`` is refused.

    Returns:
        :class:`Dep` list; a name declared twice keeps its first declaration (FetchContent's rule:
        the first declaration wins).

    Raises:
        FetchDepsError: a construct it cannot resolve (file, line, construct named).
    """
    overrides = dict(overrides or {})
    gitlinks = None if gitlinks is None else dict(gitlinks)
    if "CMakeLists.txt" not in texts:
        raise FetchDepsError("CMakeLists.txt", 0, "the tree", "has no CMakeLists.txt at its root")
    commands: list[Command] = []
    _collect("CMakeLists.txt", texts, commands, set())
    values = _literal_sets(commands)
    declared = {c.args[0] for c in commands if c.name.lower() == "fetchcontent_declare" and c.args}
    # dependency names are case-insensitive (FetchContent: <lowercaseName>_SOURCE_DIR, and
    # FetchContent_MakeAvailable(FOO) is the FetchContent_Declare(foo) dependency)
    running = set()
    for cmd in commands:
        low = cmd.name.lower()
        if low == "fetchcontent_makeavailable":
            running.update(a.lower() for a in cmd.args)
        elif low == "add_subdirectory" and cmd.args:
            m = re.match(r"^\$\{(.+)_SOURCE_DIR\}", cmd.args[0])
            if m:
                running.add(m.group(1).lower())
        elif low == "externalproject_add" and cmd.args:
            _external_project(cmd)
    deps: list[Dep] = []
    seen: set[str] = set()
    for cmd in commands:
        if cmd.name.lower() != "fetchcontent_declare":
            continue
        dep = _declaration(cmd, values, overrides, declared)
        if dep is not None and dep.name.lower() not in seen:
            seen.add(dep.name.lower())
            deps.append(dataclasses.replace(dep, runs_cmake=dep.name.lower() in running))
    # a submodule the tree's CMake add_subdirectory()s runs its own CMake (its declarations count)
    subdirs = {_in_tree_path(c.args[0], posixpath.dirname(c.file), True) for c in commands
               if c.name.lower() == "add_subdirectory" and c.args}
    deps += [dataclasses.replace(x, runs_cmake=(x.path or "").strip("/") in subdirs)
             for x in submodules(texts.get(".gitmodules"), gitlinks)]
    return deps


def _collect(rel: str, texts: Mapping[str, str], out: list[Command], seen: set[str]) -> None:
    if rel in seen:
        return
    seen.add(rel)
    here = posixpath.dirname(rel)
    try:
        parsed = parse_commands(texts[rel], rel)
    except CMakeSyntaxError as exc:
        raise FetchDepsError(exc.file, exc.line, exc.construct, exc.why) from None
    for cmd in parsed:
        out.append(cmd)
        low = cmd.name.lower()
        if low not in ("include", "add_subdirectory") or not cmd.args:
            continue
        target = _in_tree_path(cmd.args[0], here, low == "add_subdirectory")
        if target is None:
            continue  # a CMake module (include(FetchContent)) or a path in a dependency's sources
        if low == "add_subdirectory":
            target = posixpath.join(target, "CMakeLists.txt")
        if target not in texts:
            if low == "add_subdirectory" or "OPTIONAL" in cmd.args[1:]:
                continue  # no CMakeLists there in what the caller gave: nothing of it is read
            raise FetchDepsError(rel, cmd.line, f"include({cmd.args[0]})", f"{target} is not in the tree")
        _collect(target, texts, out, seen)


def _in_tree_path(arg: str, here: str, subdirectory: bool = False) -> str | None:
    """The tree-relative path an ``include()``/``add_subdirectory()`` argument names, or ``None``
    (a CMake module name such as ``FetchContent``, a path through another variable, such as a
    dependency's ``<name>_SOURCE_DIR``, or a path outside the tree)."""
    text = arg
    for var in _BUILTIN_DIRS:
        base = here if var in ("CMAKE_CURRENT_LIST_DIR", "CMAKE_CURRENT_SOURCE_DIR") else ""
        text = text.replace("${" + var + "}", "/" + base)
    if "${" in text or "$<" in text:
        return None
    if not subdirectory and "/" not in text and not text.endswith(".cmake"):
        return None  # include(FetchContent): a module of CMake's own
    if text.startswith("/") and arg == text:
        return None  # an absolute path of some machine: not the tree's
    path = posixpath.normpath(text.lstrip("/") if text.startswith("/") else posixpath.join(here, text))
    return None if path.startswith("..") else path


def _literal_sets(commands: list[Command]) -> dict[str, list[tuple[str, Command]]]:
    out: dict[str, list[tuple[str, Command]]] = {}
    for cmd in commands:
        if cmd.name.lower() != "set" or len(cmd.args) < 2:
            continue
        rest = cmd.args[1:]
        if "CACHE" in rest:
            rest = rest[:rest.index("CACHE")]
        elif rest[-1] == "PARENT_SCOPE":
            rest = rest[:-1]
        if len(rest) == 1:
            out.setdefault(cmd.args[0], []).append((rest[0], cmd))
    return out


def _resolve(value: str, cmd: Command, values: Mapping[str, list[tuple[str, Command]]],
             overrides: Mapping[str, str], declared: set[str], depth: int = 0) -> str:
    def one(m: re.Match[str]) -> str:
        var = m.group(1)
        if var in overrides:
            return overrides[var]
        sets = values.get(var) or []
        literal = {v for v, _ in sets}
        if not sets:
            raise FetchDepsError(cmd.file, cmd.line, f"${{{var}}} in {cmd.name}({cmd.args[0]})",
                                 f"{var} is never set() to a literal in the files read")
        if len(literal) > 1:
            where = ", ".join(f"{c.file}:{c.line}" for _, c in sets)
            raise FetchDepsError(cmd.file, cmd.line, f"${{{var}}} in {cmd.name}({cmd.args[0]})",
                                 f"{var} is set to different values ({where})")
        got = sets[0][0]
        if depth > 8:
            raise FetchDepsError(cmd.file, cmd.line, f"${{{var}}}", "variables nest too deep")
        return _resolve(got, sets[0][1], values, overrides, declared, depth + 1)
    return _VAR_RE.sub(one, value)


def _declaration(cmd: Command, values: Mapping[str, list[tuple[str, Command]]],
                 overrides: Mapping[str, str], declared: set[str]) -> Dep | None:
    if not cmd.args:
        raise FetchDepsError(cmd.file, cmd.line, "FetchContent_Declare()", "no dependency name")
    name = cmd.args[0]
    if "${" in name:
        raise FetchDepsError(cmd.file, cmd.line, f"FetchContent_Declare({name})", "a computed dependency name")
    kw: dict[str, list[str]] = {}
    key = None
    for arg, quoted in zip(cmd.args[1:], cmd.quoted[1:]):
        if not quoted and arg in _KEYWORDS:
            key = arg
            kw.setdefault(key, [])
        elif key is not None:
            kw[key].append(arg)
    construct = f"FetchContent_Declare({name})"

    def single(k: str) -> str | None:
        vals = kw.get(k)
        if vals is None:
            return None
        if not vals:
            raise FetchDepsError(cmd.file, cmd.line, construct, f"{k} has no value")
        return _resolve(vals[0], cmd, values, overrides, declared)

    source_dir = (kw.get("SOURCE_DIR") or [None])[0]
    if "GIT_REPOSITORY" in kw:
        url = single("GIT_REPOSITORY")
        tag = single("GIT_TAG")
        if not tag:
            raise FetchDepsError(cmd.file, cmd.line, construct,
                                 "GIT_REPOSITORY without GIT_TAG: it would fetch the default branch, unpinned")
        subs = kw.get("GIT_SUBMODULES")
        return Dep(name=name, kind="git", url=url, ref=tag, repo=repo_of(url), file=cmd.file, line=cmd.line,
                   path=source_dir, submodules=None if subs is None else tuple(x for x in subs if x))
    if "URL" in kw:
        raw = kw["URL"][0] if kw["URL"] else ""
        if _local_path(raw):
            return None  # an archive in the tree or on the build machine: nothing is downloaded
        url = single("URL")
        digest = single("URL_HASH")
        if digest is None and kw.get("URL_MD5"):
            digest = "MD5=" + (single("URL_MD5") or "")
        ref = archive_ref(url)
        return Dep(name=name, kind="url", url=url, ref=ref or url.rsplit("/", 1)[-1], repo=repo_of(url) if ref else None,
                   url_hash=digest, file=cmd.file, line=cmd.line, path=source_dir)
    other = sorted(k for k in kw if k.endswith("_REPOSITORY") or k == "DOWNLOAD_COMMAND")
    if not other and "SOURCE_DIR" in kw:
        return None  # FetchContent_Declare(x SOURCE_DIR dir): sources already there, nothing to fetch
    raise FetchDepsError(cmd.file, cmd.line, construct,
                         (f"{other[0]} is not supported (git or URL only)" if other
                          else "neither GIT_REPOSITORY nor URL: nothing to fetch it from"))


def _external_project(cmd: Command) -> None:
    """Refuse an ``ExternalProject_Add()`` that downloads (a repository, or a ``URL`` that is no
    local file): it downloads at build time, which no ``FETCHCONTENT_SOURCE_DIR_*`` override
    reaches, so an offline builder would fail mid-build (CMake's ExternalProject docs)."""
    for i, arg in enumerate(cmd.args[1:], 1):
        quoted = cmd.quoted[i] if i < len(cmd.quoted) else False
        if quoted or not (arg.endswith("_REPOSITORY") or arg in ("URL", "DOWNLOAD_COMMAND")):
            continue
        value = cmd.args[i + 1] if i + 1 < len(cmd.args) else ""
        if arg == "URL" and _local_path(value):
            continue
        raise FetchDepsError(cmd.file, cmd.line, f"ExternalProject_Add({cmd.args[0]})",
                             f"{arg} {value}: downloads while building, where no fetch_mirror source can be given "
                             "(make it a FetchContent dependency, or build it beforehand)")


def _local_path(url: str) -> bool:
    """A ``URL`` that is a file, not a download: a path (``/x.tar.gz``, ``deps/x.tar.gz``,
    ``${CMAKE_CURRENT_SOURCE_DIR}/x.tar.gz``) or ``file://``."""
    if url.startswith("file://"):
        return True
    if any(url.startswith("${" + v + "}") for v in (*_BUILTIN_DIRS, "CMAKE_BINARY_DIR", "CMAKE_CURRENT_BINARY_DIR")):
        return True
    return "://" not in url and not url.startswith("${")


def submodules(gitmodules: str | None, gitlinks: Mapping[str, str] | None) -> list[Dep]:
    """The submodules ``.gitmodules`` declares, each pinned to its gitlink's commit.

    ``gitlinks`` ``None`` means the tree's gitlinks are unknown (not a git checkout); an entry
    without a gitlink in a known set is no submodule (git's own rule: ``git submodule update``
    works from the gitlinks, gitmodules(5)) and is left out.

    Raises:
        FetchDepsError: ``.gitmodules`` does not parse, a submodule lacks ``path``/``url``, or the
            gitlinks are unknown (the commit each pins cannot be told).
    """
    if not gitmodules:
        return []
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(gitmodules, source=".gitmodules")
    except configparser.Error as exc:
        raise FetchDepsError(".gitmodules", getattr(exc, "lineno", 0) or 0, "the file", str(exc).splitlines()[0])
    out: list[Dep] = []
    lines = gitmodules.splitlines()
    for section in parser.sections():
        m = re.match(r'^submodule\s+"(.+)"$', section.strip())
        if not m:
            continue
        sub = m.group(1)
        line = next((i + 1 for i, ln in enumerate(lines) if ln.strip().startswith("[") and f'"{sub}"' in ln), 0)
        path = parser.get(section, "path", fallback=None)
        url = parser.get(section, "url", fallback=None)
        if not path or not url:
            raise FetchDepsError(".gitmodules", line, f'[submodule "{sub}"]', "needs both path and url")
        if gitlinks is None:
            raise FetchDepsError(".gitmodules", line, f'[submodule "{sub}"]',
                                 f"the tree is no git checkout: the commit {path} pins is unknown")
        commit = gitlinks.get(path.strip("/"))
        if not commit:
            continue  # in .gitmodules only: git checks out no submodule there
        out.append(Dep(name=sub, kind="submodule", url=url, ref=commit, repo=repo_of(url), file=".gitmodules",
                       line=line, path=path.strip("/")))
    return out


def cmake_files(names: list[str]) -> list[str]:
    """Of a tree's relative file names, those the reader may need: CMake files and ``.gitmodules``."""
    return [n for n in names if n == ".gitmodules" or n.endswith(("CMakeLists.txt", ".cmake"))]
