"""fleetctl's build hook: records which torch the Python processes of a build import.

fleetctl puts this folder on the build's PYTHONPATH with FLEETCTL_BUILD_RECORD naming a file. Every
Python process of the build (the PEP 517 backend running setup.py, a ``python -c "import torch"``
CMake runs to find Torch) then appends, when it exits having imported torch, one JSON line:
``{"kind": "torch", "torch": "2.11.0+cu130", "torch_cuda": "13.0", "torch_file": ".../torch/__init__.py",
"python": sys.executable}``. That is the torch the build compiled against, read inside the build.

It then runs the ``sitecustomize`` it shadows (the venv's or the distribution's), if any.
stdlib only, Python 3.8+; it never raises.
"""

import atexit
import json
import os
import sys


def _record():
    torch = sys.modules.get("torch")
    path = os.environ.get("FLEETCTL_BUILD_RECORD")
    if torch is None or not path:
        return
    try:
        version = getattr(torch, "version", None)
        line = {"kind": "torch", "torch": str(getattr(torch, "__version__", None)),
                "torch_cuda": getattr(version, "cuda", None), "torch_file": getattr(torch, "__file__", None),
                "python": sys.executable}
        with open(path, "a") as fh:
            fh.write(json.dumps(line) + "\n")
    except Exception:
        pass


def _chain():
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception:
        pass


atexit.register(_record)
_chain()
