"""The build's summary tells the truth (fresh operator's trial): after a build handed over to the
next member, the class line, the report and run.json name the SASS the wheel holds, not the facts'
fallback list; a member that never got the wheel is named apart; nvcc's own line, not CMake's
compiler-check wrap-up, is a failed build's summary. Real sshd test hosts without a GPU (they
build for ``-e archs``), real venvs, real CMake; the broken toolkit is a real CUDA home whose nvcc
fails on every ``.cu`` file as nvcc does when it cannot allocate memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import cmake_ext, tool_venv

pytestmark = pytest.mark.sshd

PLAY = """\
name: build a tiny CUDA extension once for its arch class
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      archs: "{{{{ archs }}}}"
      max_jobs: 1
      min_free_disk_mib: "{{{{ need_mib | default(1) }}}}"
      receiver_min_free_disk_mib: "{{{{ need_mib | default(1) }}}}"
"""

NO_MEMORY = "nvcc fatal   : Memory allocation failure"


def broken_cuda_home(root: Path) -> Path:
    """A CUDA home (the real one's files) whose nvcc, run in a workdir listed in its
    ``broken-workdirs`` (:func:`mark_broken`), fails every ``.cu`` compile the way nvcc does out of
    memory (``nvcc fatal   : Memory allocation failure``, exit 4); ``--version`` and
    ``--list-gpu-arch`` answer as the real one, so facts and the preflight pass. Every host has this
    CUDA home, so that they are one arch class (its path is one of the class's inputs)."""
    real = Path("/usr/local/cuda")
    home = root / "cuda-nomem"
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for tool in (real / "bin").iterdir():
        if tool.name != "nvcc":
            (home / "bin" / tool.name).symlink_to(tool)
    (home / "broken-workdirs").write_text("")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        broken=
        while read -r w; do case "$PWD" in "$w"/*) broken=1;; esac; done < {home}/broken-workdirs
        [ -n "$broken" ] || exec {real}/bin/nvcc "$@"
        for a in "$@"; do
          case "$a" in *.cu) echo "{NO_MEMORY}" >&2; exit 4;; esac
        done
        exec {real}/bin/nvcc "$@"
        """))
    nvcc.chmod(0o755)
    return home


def mark_broken(home: Path, workdir: str) -> None:
    """Make ``home``'s nvcc fail for builds in ``workdir`` (a host's)."""
    with open(home / "broken-workdirs", "a") as fh:
        fh.write(workdir + "\n")


def controller_cuobjdump() -> Path:
    found = sorted(Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump"))
    if not found:
        pytest.fail("no cuobjdump in the controller's venv (PyPI's nvidia-cuda-cuobjdump): scripts/setup.sh installs it")
    return found[0]


def builds(home: Path) -> dict:
    record = json.loads((last_run(home) / "run.json").read_text())
    return {h: [t for t in r["tasks"] if t["action"] == "build_wheel"][0] for h, r in record["hosts"].items()}


def class_lines(stdout: str) -> list[str]:
    return [ln.strip() for ln in stdout.splitlines() if " cu13." in ln and "(" in ln]


def test_a_build_handed_over_names_the_wheels_sass_and_the_members_that_did_not_get_it(sshd_farm, tmp_path):
    venv = tool_venv(tmp_path / "venv")  # one venv for the three hosts: the build writes only workdirs
    broken = broken_cuda_home(tmp_path)
    hosts = {}
    for name in ("gpu01", "gpu02", "gpu03"):
        h = sshd_farm.start(name)  # no nvidia-smi: the facts' arch list is fallback_archs 9.0a;12.0a
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": venv, "cuda_home": str(broken)}
    mark_broken(broken, hosts["gpu01"]["workdir"])  # the class's builder (first in inventory order) has a broken nvcc
    hosts["gpu03"]["need_mib"] = 1 << 40  # its disk preflight fails: it never gets the wheel
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    play = tmp_path / "build.yaml"
    play.write_text(PLAY.format(src=cmake_ext(tmp_path / "cmake_ext")))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "archs=9.0a",
                   home=tmp_path, timeout_s=600)
    assert res.returncode == 1, res.stdout[-5000:]
    b = builds(tmp_path)
    assert b["gpu02"]["status"] == "changed" and b["gpu02"]["data"]["sass"] == ["sm_90a"], b["gpu02"]
    # the wheel itself holds sm_90a only
    wheel = Path(b["gpu02"]["data"]["wheel"])
    with zipfile.ZipFile(wheel) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        (tmp_path / "ext.so").write_bytes(zf.read(so))
    elf = subprocess.run([str(controller_cuobjdump()), "--list-elf", str(tmp_path / "ext.so")], capture_output=True,
                         text=True, check=True).stdout
    assert "sm_90a" in elf and "sm_120" not in elf, elf
    # run.json: the failed builder names what was asked (9.0a), never the facts' sm_120a
    assert b["gpu01"]["status"] == "failed" and b["gpu01"]["data"]["archs"] == "9.0a"
    assert b["gpu01"]["data"]["sass_asked"] == ["sm_90a"] and "sass" not in b["gpu01"]["data"], b["gpu01"]["data"]
    # nvcc's own line, not CMake's "Compiling the CUDA compiler identification source file ... failed."
    assert b["gpu01"]["msg"].startswith("build failed (pip): nvcc fatal : Memory allocation failure "
                                        "(CMake's CUDA compiler identification) ("), b["gpu01"]["msg"]
    line = [ln for ln in class_lines(res.stdout) if "built on" in ln]
    assert len(line) == 1 and line[0].startswith("gpu02 sm_90a cu13."), res.stdout[-3000:]
    assert line[0].endswith("(built on gpu02; build failed on gpu01; preflight failed on gpu03)"), line
    # the report's SASS column: the wheel's
    html = tmp_path / "report.html"
    rep = fleetctl("report", last_run(tmp_path).name, "--html", str(html), home=tmp_path)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    text = html.read_text()
    assert '<span class="dim">sm_90a</span>' in text and "sm_120a" not in text

    # both builds fail: nothing was built, the line names what was asked, labelled so
    mark_broken(broken, hosts["gpu02"]["workdir"])
    del hosts["gpu03"]
    inv = write_inventory(tmp_path / "inv2.yaml", {"g": hosts})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "archs=9.0a", "--force",
                   home=tmp_path, timeout_s=600)
    assert res.returncode == 1, res.stdout[-5000:]
    assert [ln for ln in class_lines(res.stdout) if "build failed on" in ln][0].startswith("gpu[01-02] asked sm_90a cu13.")
    assert "(build failed on gpu[01-02])" in res.stdout
    assert all("sass" not in t["data"] for t in builds(tmp_path).values())
