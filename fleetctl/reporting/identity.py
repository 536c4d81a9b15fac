"""Taking a host's own identity (its inventory name, address, ``addr:port``) out of free text, so
that the same cause or log tail on many hosts folds into one (``connection refused by <host>``).
Pure string work: it runs for every line of every tail a report folds."""

from __future__ import annotations

from typing import Any


def identity_tokens(host: str, hostvars: dict[str, Any]) -> list[str]:
    """What names ``host`` in free text: ``addr:port``, ``[addr]:port``, its address, its name
    (longest first), for taking a host's own identity out of a cause before folding."""
    addr = str(hostvars.get("ansible_host") or hostvars.get("ansible_ssh_host") or "")
    port = hostvars.get("ansible_port") or hostvars.get("ansible_ssh_port")
    tokens = [host]
    if addr:
        tokens.append(addr)
        if port:
            tokens += [f"{addr}:{port}", f"[{addr}]:{port}"]
    return sorted({t for t in tokens if t}, key=len, reverse=True)


def _word_char(c: str) -> bool:
    return c.isalnum() or c in "_-"


def without_identity(text: str, tokens: list[str]) -> str:
    """``text`` with each token (longest first) replaced by ``<host>`` where it stands as a whole
    name: not inside a longer name (``gpu1`` in ``gpu10``) or a dotted one (``10.0.0.1`` in
    ``10.0.0.12``). Plain string search: this runs for every line of every tail."""
    for tok in tokens:
        if tok not in text:
            continue
        out, i = [], 0
        while (j := text.find(tok, i)) >= 0:
            before = text[j - 1] if j else ""
            after, after2 = text[j + len(tok):j + len(tok) + 1], text[j + len(tok) + 1:j + len(tok) + 2]
            whole = not (before and (_word_char(before) or before == ".")) and not (
                after and (_word_char(after) or after == "." and after2 and _word_char(after2)))
            out.append(text[i:j] + ("<host>" if whole else tok))
            i = j + len(tok)
        text = "".join(out) + text[i:]
    return text
