"""``python -m fleetctl.docgen [DOCS_DIR]``: write the generated reference pages (default ``docs``)."""

from __future__ import annotations

import sys

from . import write

if __name__ == "__main__":
    for path in write(sys.argv[1] if len(sys.argv) > 1 else "docs"):
        print(path)
