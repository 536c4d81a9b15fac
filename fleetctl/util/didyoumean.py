"""Did-you-mean for one-line error messages: difflib, imported only when a message needs it.

difflib costs every command's start-up ~4 ms when imported at the top of a module on the path
of `fleetctl run` (issue 27 counts that start-up), so the modules that name a close match call
:func:`close_matches` instead of importing difflib themselves.
"""

from __future__ import annotations

from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """``difflib.get_close_matches(word, candidates, n, cutoff)``: up to ``n`` candidates whose
    similarity ratio to ``word`` is at least ``cutoff`` (0 to 1), best first."""
    import difflib

    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=cutoff)
