"""Loads the compiled extension ``fp4_kernels._C`` with an error that names the file."""
from __future__ import annotations

import glob
import os

_DIR = os.path.dirname(os.path.abspath(__file__))


def load():
    """Import and return ``fp4_kernels._C``.

    Raises:
        ImportError: naming the extension file(s) found in the package folder (or saying
            none was found) and the dynamic loader's message.
    """
    try:
        from . import _C  # noqa: WPS433
    except ImportError as e:
        files = sorted(glob.glob(os.path.join(_DIR, "_C*")))
        where = ", ".join(files) if files else "no _C* extension file in %s" % _DIR
        raise ImportError(
            "fp4_kernels: cannot load the compiled extension (%s): %s" % (where, e)
        ) from e
    return _C
