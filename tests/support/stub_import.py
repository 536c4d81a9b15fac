"""Import a revision's ``sgl_kernel.flash_attn`` without its dependencies (for tests/support/sgl_checks.py).

A revision's flash_attn.py imports torch, sibling modules of sgl_kernel and more at module level.
The check only asks what the module does about ``flash_ops``, so everything else it imports is
stubbed: a permissive module whose attributes are permissive classes (callable, subscriptable,
usable as decorators, base classes and in ``X | None``). ``flash_ops`` itself is never stubbed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Run in a fresh interpreter: import sgl_kernel.flash_attn from a package folder with every
#: third-party module (torch, triton ...) and every absent sgl_kernel submodule stubbed, so the
#: real module-level code of any revision runs without its dependencies. flash_ops itself is never
#: stubbed: it is importable only when the check writes one.
IMPORT_RUNNER = r'''
import importlib.abc, importlib.machinery, json, os, sys, types, warnings
root = sys.argv[1]
sys.path.insert(0, root)

class _Any(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any(name, (), {})
    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _Any):
            return args[0]
        return cls
    def __getitem__(cls, item):
        return cls
    def __or__(cls, other):
        return cls
    __ror__ = __or__
    def __iter__(cls):
        return iter(())

class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any(name, (), {})

class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top in sys.stdlib_module_names:
            return None
        if top == "sgl_kernel":
            if fullname.endswith(".flash_ops"):
                return None
            rel = os.path.join(root, *fullname.split("."))
            if os.path.exists(rel + ".py") or os.path.isdir(rel):
                return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
    def create_module(self, spec):
        mod = _Module(spec.name)
        mod.__path__ = []
        return mod
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Stubs())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import sgl_kernel.flash_attn as fa
    except BaseException as exc:
        print(json.dumps({"imported": False, "error": "%s: %s" % (type(exc).__name__, exc)}))
        sys.exit(0)
fo = getattr(fa, "flash_ops", "<absent>")
print(json.dumps({"imported": True,
                  "flash_ops": None if fo is None else (fo if isinstance(fo, str) else getattr(fo, "__name__", repr(fo))),
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
'''


def import_flash_attn(kdir: Path, with_flash_ops: bool) -> dict:
    """Import ``sgl_kernel.flash_attn`` from ``kdir/python`` in a fresh interpreter (see IMPORT_RUNNER)."""
    pkg = Path(kdir) / "python" / "sgl_kernel"
    fo = pkg / "flash_ops.py"
    if with_flash_ops:
        fo.write_text("LOADED = True\n")
    try:
        res = subprocess.run([sys.executable, "-I", "-B", "-c", IMPORT_RUNNER, str(pkg.parent)],
                             capture_output=True, text=True, timeout=120)
    finally:
        if fo.exists():
            fo.unlink()
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"imported": False, "error": (res.stderr.strip().splitlines() or ["no output"])[-1]}
