"""The words of a ``NAME=VALUE`` item, as Ansible's key=value form (``parse_kv``) splits them.

One grammar for the two places that read such items: ``-e`` (:func:`fleetctl.cli.extravars.pairs_of`)
and the masking of secret values in a recorded command line (:meth:`fleetctl.util.redact.Redactor.obj`),
so that what is masked is exactly what ``-e`` took as a value. Pure.
"""

from __future__ import annotations

import re

__all__ = ["WORD", "WORDS"]

#: a word of a key=value item: runs of non-space, '...' and "..." (a quoted part may hold spaces).
#: Each repetition takes one character or one whole quoted part, so a text splits into words one
#: way only: a run of plain characters that could be cut among repetitions in many ways made a
#: failed match (an unclosed quote: ``login's PATH``) try them all, exponential in the words
#: (``fleetctl run`` spun at 100% CPU redacting an error line holding ``rc=127`` and ``login's``).
WORD = re.compile(r"""(?:[^\s'"]|'[^']*'|"[^"]*")+""")
#: a whole item of such words (no unclosed quote), the words apart by whitespace
WORDS = re.compile(rf"\s*(?:{WORD.pattern}(?:\s+{WORD.pattern})*)?\s*")
