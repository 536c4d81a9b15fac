"""Reference pages generated from the code: the playbook reference from the action registry
(:mod:`.playbook_ref`) and the command-line reference from click's command tree (:mod:`.cli_ref`).

``python -m fleetctl.docgen [DOCS_DIR]`` (default ``docs``) writes ``DOCS_DIR/reference/playbook.md``
and ``DOCS_DIR/reference/cli.md``; both are committed, and ``tests/test_docs.py`` fails when they
differ from what the code generates now. The site itself is built by MkDocs (``mkdocs.yml``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PAGES", "generate", "write"]

#: page path under the docs folder -> the module that renders it.
PAGES: dict[str, str] = {"reference/playbook.md": "playbook_ref", "reference/cli.md": "cli_ref"}


def generate() -> dict[str, str]:
    """page path under the docs folder -> its generated text."""
    import importlib

    return {page: importlib.import_module(f"{__name__}.{mod}").render() for page, mod in PAGES.items()}


def write(docs_dir: str | Path) -> list[Path]:
    """Write every generated page under ``docs_dir``; returns the paths written."""
    out = []
    for page, text in generate().items():
        path = Path(docs_dir) / page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        out.append(path)
    return out
