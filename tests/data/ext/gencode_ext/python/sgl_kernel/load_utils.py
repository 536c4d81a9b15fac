"""A stand-in for sgl_kernel's loader rule (the form of sgl-kernel's python/sgl_kernel/load_utils.py):
the library in sm90/ for exactly SM 9.0, the one in sm100/ for every other SM."""

import glob
import importlib.util
from pathlib import Path


def ops_folder(compute_capability):
    """The folder whose common_ops this SM loads (compute_capability: major * 10 + minor)."""
    if compute_capability == 90:
        ops_subdir = "sm90"
    elif compute_capability is not None:
        ops_subdir = "sm100"
    else:
        ops_subdir = "sm100"
    return ops_subdir


def load(compute_capability):
    """Import the folder's common_ops; ImportError when the wheel has none there."""
    found = glob.glob(str(Path(__file__).parent / ops_folder(compute_capability) / "common_ops.*"))
    if not found:
        raise ImportError("no common_ops for SM %s" % compute_capability)
    spec = importlib.util.spec_from_file_location("common_ops", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
