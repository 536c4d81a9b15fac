"""The package's structure rules, checked over a source tree by reading its code (``ast``), never
importing it: tests/test_structure.py runs :func:`check` over ``fleetctl/`` and over planted
violations in a temporary tree.

The rules (docs/architecture.md draws the layers; :data:`LAYERS` is their order as the imports keep it):

- ``size``: no module over :data:`MAX_LINES` lines (one thing per module).
- ``private-import``: no ``from X import _name`` (nor ``import X._name``) of another module's
  private name: make it a small public API of the module that owns it, or move it.
- ``no-print``: nothing in the layers below reporting and cli (:data:`QUIET_LAYERS`) calls
  ``print()``, writes ``sys.stdout``/``sys.stderr`` (``.write``, ``.writelines``, ``.buffer``), fd 1
  or 2 (``os.write``) or prints a traceback (``traceback.print_exc``):
  observers and the CLI report, a library logs (``logging``).
- ``layers``: a module imports only from the layers below its own (:data:`LAYERS`, top first),
  or its own layer. Imports inside functions count too.
- ``asyncssh``: only ``connection/ssh*.py`` imports asyncssh.

Each violation is one line ``PATH:LINE: [rule] what``, PATH relative to the tree's parent.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: Most lines a module may have.
MAX_LINES = 450

#: The layers, top first: a module may import its own layer and those after it. ``fleetctl`` is
#: the package itself (``__init__.py``, ``__main__.py``); the others are its sub-packages, or its
#: top-level modules (``errors``, ``status``) by name. ``docgen`` (the reference pages, built from
#: the CLI's click tree and the action registry) reads everything. ``api`` is the public Python API: on top of
#: the engine and the reporters, under the CLI. ``playbook`` sits between the engine (which runs
#: playbooks) and the tasks (whose argument models it validates); ``inventory`` and ``schedule``
#: are below the engine; ``util``, ``errors`` and ``status`` are leaves.
LAYERS: tuple[str, ...] = ("fleetctl", "docgen", "cli", "api", "reporting", "engine", "playbook", "tasks", "facts",
                           "build", "inventory", "connection", "schedule", "util", "errors", "status")

#: Layers that never print (everything below reporting and cli).
QUIET_LAYERS = frozenset(LAYERS[LAYERS.index("engine"):])

#: Modules (relative to the package folder) allowed to import asyncssh.
ASYNCSSH_GLOB = "connection/ssh*.py"


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (``path`` relative to the tree's parent, ``line``), which ``rule``, what."""

    path: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.what}"


def _module_name(pkg: Path, path: Path) -> tuple[list[str], list[str]]:
    """(the module's dotted parts, its package's parts) for ``path`` under the package ``pkg``."""
    parts = [pkg.name, *path.relative_to(pkg).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return parts, parts
    return parts, parts[:-1]


def layer_of(parts: list[str], known: set[str]) -> str:
    """The layer of a dotted module name (as parts): its first part below the package, or the
    package itself for the package, its ``__main__`` and a name that is no module of it."""
    if len(parts) < 2 or parts[1] == "__main__" or parts[1] not in known:
        return parts[0]
    return parts[1]


def _imports(tree: ast.AST, me: list[str], pkg_parts: list[str]):
    """(line, target module parts, imported names) for each import in ``tree``, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[:len(pkg_parts) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            yield node.lineno, target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split("."), []


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` at module level."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__" and len(node.test.comparators) == 1
            and isinstance(node.test.comparators[0], ast.Constant) and node.test.comparators[0].value == "__main__")


def _writes_std(node: ast.AST) -> bool:
    """A call that prints: ``print(...)``, ``sys.stdout.write(...)``, ``sys.stderr.buffer.write(...)``,
    ``traceback.print_exc()``, ``os.write(2, ...)``."""
    if not isinstance(node, ast.Call):
        return False
    fn = node.func
    if isinstance(fn, ast.Name) and fn.id == "print":
        return True
    names = []
    while isinstance(fn, ast.Attribute):
        names.append(fn.attr)
        fn = fn.value
    if isinstance(fn, ast.Name):
        names.append(fn.id)
    names.reverse()  # e.g. ["sys", "stdout", "write"]
    if names[:1] == ["traceback"] and len(names) == 2 and names[1].startswith("print_"):
        return True  # traceback.print_exc(): stderr
    if names == ["os", "write"] and node.args and isinstance(node.args[0], ast.Constant):
        return node.args[0].value in (1, 2)  # os.write(2, ...): the process's stdout/stderr
    return len(names) >= 3 and names[0] == "sys" and names[1] in ("stdout", "stderr", "__stdout__", "__stderr__")


def check(pkg: Path, *, max_lines: int = MAX_LINES) -> list[Violation]:
    """Every violation of the rules in the package folder ``pkg`` (e.g. ``Path("fleetctl")``).

    Raises:
        SyntaxError: a module does not parse (named by ``ast``).
    """
    pkg = pkg.resolve()
    files = sorted(p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)
    known = {p.relative_to(pkg).parts[0].removesuffix(".py") for p in files} - {"__init__", "__main__"}
    known |= {d.name for d in pkg.iterdir() if d.is_dir() and (d / "__init__.py").exists()}
    rank = {name: i for i, name in enumerate(LAYERS)}
    out: list[Violation] = []
    for path in files:
        rel = str(path.relative_to(pkg.parent))
        text = path.read_text(encoding="utf-8")
        n_lines = len(text.splitlines())
        if n_lines > max_lines:
            out.append(Violation(rel, n_lines, "size", f"{n_lines} lines, over {max_lines}: split it along a real seam"))
        tree = ast.parse(text, filename=rel)
        me, pkg_parts = _module_name(pkg, path)
        mine = layer_of(me, known)
        for line, target, names in _imports(tree, me, pkg_parts):
            if target[:1] == ["asyncssh"] and not path.relative_to(pkg).match(ASYNCSSH_GLOB):
                out.append(Violation(rel, line, "asyncssh", f"imports asyncssh: only {ASYNCSSH_GLOB} may"))
            if target[:1] != [pkg.name]:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private += [p for p in target[1:] if p.startswith("_") and not p.startswith("__")]
            for name in private:
                out.append(Violation(rel, line, "private-import",
                                     f"imports {name} from {'.'.join(target)}: another module's private name"))
            # ``from fleetctl import errors`` names a module: its layer is the module's
            # (its dunders, ``__version__``, are metadata every layer may read)
            targets = ([target + [n] for n in names if not n.startswith("__")] if len(target) == 1 and names
                       else [target])
            for t in targets:
                theirs = layer_of(t, known)
                if theirs == mine or theirs not in rank or mine not in rank:
                    if mine not in rank:
                        out.append(Violation(rel, line, "layers", f"layer {mine} is not in LAYERS"))
                    continue
                if rank[theirs] < rank[mine]:
                    out.append(Violation(rel, line, "layers",
                                         f"{mine} imports {'.'.join(t)} ({theirs}): {theirs} is above {mine} "
                                         f"({' -> '.join(LAYERS)})"))
        if mine in QUIET_LAYERS:
            # a module's script entry point (``if __name__ == "__main__":``, run as a program, e.g. on
            # a host) answers on stdout: that is its output, not the engine printing
            script = {id(n) for top in tree.body if _is_main_guard(top) for n in ast.walk(top)}
            for node in ast.walk(tree):
                if id(node) not in script and _writes_std(node):
                    out.append(Violation(rel, node.lineno, "no-print",
                                         f"prints (print/sys.stdout/sys.stderr) in layer {mine}: tell the "
                                         f"observers or log (logging) instead"))
    return out
