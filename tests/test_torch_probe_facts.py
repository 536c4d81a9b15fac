"""facts.py's torch reader: a failure of fleetctl's own reader is ``python.torch_probe_error``,
never ``torch_error`` (what is wrong with the host's torch), so the preflight does not call a
torch broken that fleetctl merely failed to read (issue 23)."""

from __future__ import annotations

import glob
from pathlib import Path

from tests.test_facts_script import _make_venv, run_script


def _site(venv: Path) -> Path:
    return Path(glob.glob(str(venv / "lib" / "python3*" / "site-packages"))[0])


def test_the_readers_own_crash_is_fleetctls_probe_error_not_the_hosts_torch(tmp_path):
    venv = _make_venv(tmp_path / "venv", "from .version import __version__\n")
    torch_dir = _site(venv) / "torch"
    (torch_dir / "version.py").write_text("__version__ = '2.3.0'\ncuda = '13.0'\n")
    (torch_dir / "lib").mkdir()
    (torch_dir / "lib" / "libc10.so").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 9)  # an ELF header cut short
    (torch_dir / "lib" / "libtorch_python.so").write_bytes(b"")
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    py = facts["python"]
    assert py["torch_error"] is None, py
    assert py["torch_probe_error"].startswith("fleetctl's probe read_torch failed: "), py


def test_a_torch_whose_version_file_does_not_parse_is_the_hosts(tmp_path):
    venv = _make_venv(tmp_path / "venv", "from .version import __version__\n")
    (_site(venv) / "torch" / "version.py").write_text("__version__ = '2.3.0\n")  # as `import torch` would fail too
    facts, _ = run_script("--workdir", tmp_path, "--venv", venv)
    py = facts["python"]
    assert py["torch_probe_error"] is None and py["torch"] is None
    assert py["torch_error"].startswith("cannot read torch's files: SyntaxError"), py
