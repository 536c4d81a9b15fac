"""Session fixtures: really build kernel_src (CUDA for sm_90a + sm_120a) and import it."""
from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fp4_helpers import ARCH_LIST, build_env, pip_wheel


class Built:
    def __init__(self, wheel: Path, site: Path, log: str, seconds: float):
        self.wheel, self.site, self.log, self.seconds = wheel, site, log, seconds

    @property
    def so(self) -> Path:
        return next((self.site / "fp4_kernels").glob("_C*.so"))


@pytest.fixture(scope="session")
def fp4_build(tmp_path_factory) -> Built:
    """Build the wheel with TORCH_CUDA_ARCH_LIST=9.0a;12.0a and install it into a target dir."""
    root = tmp_path_factory.mktemp("fp4_build")
    t0 = time.time()
    res = pip_wheel(root / "wheel", build_env(TORCH_CUDA_ARCH_LIST=ARCH_LIST))
    seconds = time.time() - t0
    (root / "build.log").write_text(res.stdout)
    assert res.returncode == 0, "kernel_src build failed:\n" + res.stdout[-6000:]
    wheel = next((root / "wheel").glob("fp4_kernels-*.whl"))
    site = root / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target",
                           str(site), str(wheel)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert inst.returncode == 0, inst.stdout
    print("\nkernel_src wheel built in %.1f s (%s)" % (seconds, ARCH_LIST))
    return Built(wheel, site, res.stdout, seconds)


@pytest.fixture(scope="session")
def fk(fp4_build):
    """The freshly built fp4_kernels module."""
    sys.path.insert(0, str(fp4_build.site))
    for name in [m for m in sys.modules if m == "fp4_kernels" or m.startswith("fp4_kernels.")]:
        del sys.modules[name]
    mod = importlib.import_module("fp4_kernels")
    assert Path(mod.__file__).resolve().is_relative_to(fp4_build.site.resolve())
    return mod


@pytest.fixture(scope="session")
def ref(fk):
    return fk.reference
