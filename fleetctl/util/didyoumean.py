"""Did-you-mean for one-line error messages: difflib, imported only when a message needs it.

The modules that name a close match call :func:`close_matches` rather than importing difflib at
their top, so a command that makes no such message does not load it for them (issue 27 counts
start-up). click itself imports difflib while it parses a one-dash option such as ``-i`` (it
tries it as a long option first, and that exception computes its own did-you-mean).
"""

from __future__ import annotations

from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """``difflib.get_close_matches(word, candidates, n, cutoff)``: up to ``n`` candidates whose
    similarity ratio to ``word`` is at least ``cutoff`` (0 to 1), best first."""
    import difflib

    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=cutoff)
