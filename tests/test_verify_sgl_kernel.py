"""playbooks/scripts/verify_package.py on an sgl_kernel-shaped package in a real venv.

The package is a stand-in written here (no CUDA): it needs torch imported first (as the real one
needs libtorch loaded), has or lacks the NVFP4 entry points, and ships the flash_attn.py the patch
script makes (soft FA3 import), with or without a flash_ops module beside it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.sgl_checks import PATCH_SCRIPT
from tests.support.sgl_families import FAMILIES, flash_attn_py
from tests.test_deploy_e2e import make_host_venv

VERIFY = Path(__file__).resolve().parents[1] / "playbooks" / "scripts" / "verify_package.py"
_spec = importlib.util.spec_from_file_location("patch_sgl_kernel_for_verify", PATCH_SCRIPT)
psk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(psk)
SYMBOLS = "cutlass_scaled_fp4_mm,scaled_fp4_quant,scaled_fp4_grouped_quant"

INIT = '''import sys
if "torch" not in sys.modules:  # the real package fails this way: libtorch.so is loaded by torch
    raise ImportError("libc10.so: cannot open shared object file: No such file or directory")
{defs}
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    return make_host_venv(tmp_path_factory.mktemp("verify") / "venv")


def install(venv: str, symbols=SYMBOLS.split(","), flash_ops=False) -> Path:
    purelib = subprocess.run([f"{venv}/bin/python3", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    pkg = Path(purelib) / "sgl_kernel"
    shutil.rmtree(pkg, ignore_errors=True)  # files and the __pycache__ an earlier verify left
    pkg.mkdir()
    (pkg / "__init__.py").write_text(INIT.format(defs="\n".join(f"def {s}(*a): pass" for s in symbols)))
    patched, status = psk.patch_fa3_import(flash_attn_py(FAMILIES["32803fb27"]))
    assert status == "Applied"
    (pkg / "flash_attn.py").write_text(patched)
    if flash_ops:
        (pkg / "flash_ops.py").write_text("")
    return pkg


def verify(venv: str, tmp_path: Path, *args: str) -> tuple[int, dict]:
    res = subprocess.run([f"{venv}/bin/python3", str(VERIFY), "--package", "sgl_kernel", "--venv", venv,
                          "--symbols", SYMBOLS, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    return res.returncode, {c["name"]: c for c in summary["checks"]}


def test_fa3_off_build_checks_with_torch_first_and_the_fallback(venv, tmp_path):
    install(venv)
    rc, checks = verify(venv, tmp_path, "--fa3-fallback", "yes")
    assert list(checks)[:2] == ["torch", "import"]  # torch is imported first
    # a package that imports only after torch fails verify by name (a user's `import sgl_kernel` fails too)
    assert rc == 1 and not checks["import-order"]["ok"]
    assert "sgl_kernel imports only after torch" in checks["import-order"]["detail"]
    assert [n for n, c in checks.items() if not c["ok"]] == ["import-order"]
    assert checks["symbols"]["detail"] == "3 present"
    assert checks["fa3-fallback"]["detail"] == "flash_attn.flash_ops is None (built without FA3); expected None"
    assert checks["location"]["ok"]


def test_import_order_fault_fails_also_with_the_old_strict_flag(venv, tmp_path):
    install(venv)
    rc, checks = verify(venv, tmp_path, "--fa3-fallback", "yes", "--strict-import-order")
    assert rc == 1 and not checks["import-order"]["ok"]
    assert "sgl_kernel imports only after torch" in checks["import-order"]["detail"]


def test_missing_fp4_symbol_fails(venv, tmp_path):
    install(venv, symbols=["cutlass_scaled_fp4_mm", "scaled_fp4_quant"])
    rc, checks = verify(venv, tmp_path, "--fa3-fallback", "yes")
    assert rc == 1 and checks["symbols"]["detail"] == "missing: scaled_fp4_grouped_quant"


@pytest.mark.parametrize("flash_ops, expect, ok, detail", [
    (True, "yes", False, "flash_attn.flash_ops is present (FA3 built); expected None"),
    (True, "no", True, "flash_attn.flash_ops is present (FA3 built); expected present"),
    (False, "no", False, "flash_attn.flash_ops is None (built without FA3); expected present"),
])
def test_fa3_fallback_matches_the_recipe(venv, tmp_path, flash_ops, expect, ok, detail):
    install(venv, flash_ops=flash_ops)
    rc, checks = verify(venv, tmp_path, "--fa3-fallback", expect)
    assert checks["fa3-fallback"]["ok"] == ok and checks["fa3-fallback"]["detail"] == detail
