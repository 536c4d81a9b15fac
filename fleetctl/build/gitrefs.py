"""Where a dependency's git URL points: ``owner/name`` of git and GitHub archive URLs, and
submodule URLs relative to their superproject (gitmodules(5)). Pure string rules, used by the
FetchContent reader (:mod:`fleetctl.build.fetchdeps`) and the mirror planner."""

from __future__ import annotations

import re

#: GitHub archive URLs (``https://HOST/OWNER/NAME/archive/REF.tar.gz``, ``.../archive/refs/tags/REF.zip``,
#: ``https://codeload.github.com/OWNER/NAME/tar.gz/REF``): the repository and the ref they are of.
_ARCHIVE_RES = (
    re.compile(r"^https?://[^/]+/(?P<owner>[^/]+)/(?P<name>[^/]+)/archive/(?:refs/(?:tags|heads)/)?"
               r"(?P<ref>.+?)\.(?:tar\.gz|tgz|zip|tar\.bz2|tar\.xz)$"),
    re.compile(r"^https?://codeload\.github\.com/(?P<owner>[^/]+)/(?P<name>[^/]+)/(?:tar\.gz|zip)/"
               r"(?:refs/(?:tags|heads)/)?(?P<ref>[^/]+)$"),
)


def repo_of(url: str) -> str | None:
    """``owner/name`` of a git URL (``https://github.com/NVIDIA/cutlass.git``, ``git@host:o/n.git``)
    or of a GitHub archive URL; ``name`` alone for a URL with one path part
    (``https://git.invalid/dep.git``); ``None`` when the URL has no path."""
    if url.startswith(("./", "../")):
        return None  # relative to the superproject's remote (gitmodules(5)): see relative_url()
    for rx in _ARCHIVE_RES:
        m = rx.match(url)
        if m:
            return f"{m.group('owner')}/{m.group('name')}"
    if "://" in url:
        path = url.split("://", 1)[1].partition("/")[2]
    elif re.match(r"^[^@/]+@[^:/]+:", url):  # scp-like git@host:owner/name.git
        path = url.split(":", 1)[1]
    else:
        path = url
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    name = parts[-1][:-4] if parts[-1].endswith(".git") else parts[-1]
    return f"{parts[-2]}/{name}" if len(parts) > 1 else name


def relative_url(base: str, rel: str) -> str:
    """A submodule's ``./x`` or ``../x`` URL resolved against its superproject's URL, as git does
    (gitmodules(5), git-submodule(1): the superproject's URL taken as a folder):
    ``relative_url("https://h/o/mid.git", "../inner.git") == "https://h/o/inner.git"``."""
    head, sep, path = base.rstrip("/").partition("://")
    parts = (path if sep else head).split("/")
    for seg in rel.split("/"):
        if seg == "..":
            if len(parts) > 1:
                parts.pop()
        elif seg not in ("", "."):
            parts.append(seg)
    return (head + sep if sep else "") + "/".join(parts)


def archive_ref(url: str) -> str | None:
    """The ref a GitHub archive URL is of (``.../archive/v1.2.tar.gz`` -> ``v1.2``), else ``None``."""
    for rx in _ARCHIVE_RES:
        m = rx.match(url)
        if m:
            return m.group("ref")
    return None
