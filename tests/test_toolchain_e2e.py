"""GPU hosts as they are really found, end to end: a default gcc newer than the host's nvcc
accepts (with and without a supported one installed), and a real disk quota (btrfs qgroups on a
loop device) that ``statvfs`` does not show. Real sshd, real nvcc 13.0, real g++-12, real CMake."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.tiny_ext import cmake_ext, tool_venv
from tests.test_build_kinds_e2e import BUILD_PLAY, entry, tasks_of
from tests.test_toolchain import too_new_gcc

pytestmark = pytest.mark.sshd

REAL_CUDA = Path("/usr/local/cuda").resolve()


def cuda_home_accepting_gcc_up_to(root: Path, major: int) -> Path:
    """A toolkit whose ``crt/host_config.h`` refuses gcc > ``major`` (as CUDA 11.8's refuses > 11):
    the real nvcc 13.0 and its files, through symlinks, with that one header changed; the real
    nvcc reads its headers from beside the nvcc it was started as."""
    home = root / f"cuda-gcc{major}"
    tgt = home / "targets" / "x86_64-linux" / "include"
    (home / "bin").mkdir(parents=True)
    (tgt / "crt").mkdir(parents=True)
    for e in REAL_CUDA.iterdir():
        if e.name not in ("bin", "targets", "include"):
            (home / e.name).symlink_to(e)
    for t in (REAL_CUDA / "bin").iterdir():
        (home / "bin" / t.name).symlink_to(t)
    for e in (REAL_CUDA / "targets" / "x86_64-linux").iterdir():
        if e.name != "include":
            (home / "targets" / "x86_64-linux" / e.name).symlink_to(e)
    real_inc = REAL_CUDA / "targets" / "x86_64-linux" / "include"
    for e in real_inc.iterdir():
        if e.name != "crt":
            (tgt / e.name).symlink_to(e)
    for e in (real_inc / "crt").iterdir():
        if e.name != "host_config.h":
            (tgt / "crt" / e.name).symlink_to(e)
    text = (real_inc / "crt" / "host_config.h").read_text()
    assert "#if __GNUC__ > 15" in text
    (tgt / "crt" / "host_config.h").write_text(text.replace("__GNUC__ > 15", f"__GNUC__ > {major}")
                                               .replace("later than 15", f"later than {major}"))
    (home / "include").symlink_to("targets/x86_64-linux/include")
    return home


def test_a_too_new_default_gcc_is_replaced_by_an_installed_one_nvcc_accepts(sshd_farm, tmp_path):
    h = sshd_farm.start("newgcc")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = tool_venv(tmp_path / "venv")
    gcc = too_new_gcc(Path(venv) / "bin")  # first on the build's PATH: nvcc's default host compiler
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"newgcc": entry(sshd_farm, h, tmp_path / "work", venv=venv,
                                                                        verify_device="cpu")}})
    facts = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)["newgcc"]
    assert facts["host_compilers"]["default"]["path"] == str(gcc)
    assert facts["host_compilers"]["default"]["version"] == "16.1"
    assert facts["cuda"]["host_compiler_max"]["gnu"] == 15
    assert any(n.startswith("host compiler: nvcc's default gcc 16.1") for n in facts["build"]["notes"])  # fleetctl facts says it
    play = tmp_path / "build.yaml"
    play.write_text(BUILD_PLAY.format(src=cmake_ext(tmp_path / "cmake_ext"), package="tiny_cmake_ext"))
    note = (f"host compiler: nvcc's default gcc 16.1 ({gcc}) is refused by nvcc 13.0 at /usr/local/cuda/bin/nvcc "
            "(gcc 16.1 is newer than 15; it accepts clang <= 20 and gcc <= 15, /usr/local/cuda/include/crt/host_config.h): "
            "using gcc 12.2 (/usr/bin/g++-12)")
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", "--json", home=tmp_path)
    assert note in plan.stdout, plan.stdout[-3000:]
    dry = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--dry-run", "--json", home=tmp_path)
    steps = json.dumps(json.loads(dry.stdout))
    assert note in steps and '"CUDAHOSTCXX": "/usr/bin/g++-12"' in steps, steps[-3000:]  # --plan, --dry-run agree
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    build = tasks_of(tmp_path, "newgcc")["build_wheel"]
    assert build["status"] == "changed" and build["data"]["decision"]["host_compiler"].startswith(note)
    used = build["data"]["host_compiler"]
    assert (used["path"], used["chosen"], used["version"]) == ("/usr/bin/g++-12", True, "12.2")
    assert used["nvcc_accepts"]["gnu"] == 15
    assert build["data"]["build_record"]["cuda_compiler"]["host_compiler"] == "/usr/bin/g++-12"  # read inside CMake
    assert tasks_of(tmp_path, "newgcc")["verify"]["status"] == "ok"
    log = (last_run(tmp_path) / "logs" / "newgcc.log").read_text()
    assert "unsupported GNU version" not in log and "Building CUDA object" in log


def test_no_host_compiler_nvcc_accepts_fails_while_planning_naming_both(sshd_farm, tmp_path):
    home = cuda_home_accepting_gcc_up_to(tmp_path, 11)
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    refused = subprocess.run([str(home / "bin" / "nvcc"), "-c", str(tmp_path / "k.cu"), "-o", str(tmp_path / "k.o")],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "gcc versions later than 11 are not supported" in refused.stderr  # nvcc itself
    refused12 = subprocess.run([str(home / "bin" / "nvcc"), "-ccbin", "/usr/bin/g++-12", "-c", str(tmp_path / "k.cu"),
                                "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert refused12.returncode != 0  # and the g++-12 beside it too: no accepted one is installed
    h = sshd_farm.start("oldcuda")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"oldcuda": entry(sshd_farm, h, tmp_path / "work",
                                                                         venv=tool_venv(tmp_path / "venv"),
                                                                         cuda_home=str(home), verify_device="cpu")}})
    play = tmp_path / "build.yaml"
    play.write_text(BUILD_PLAY.format(src=cmake_ext(tmp_path / "cmake_ext"), package="tiny_cmake_ext"))
    want = (f"nvcc 13.0 at {home}/bin/nvcc refuses the host compiler gcc 12.2 (/usr/bin/gcc) (gcc 12.2 is newer than 11; "
            f"it accepts clang <= 20 and gcc <= 11, {home}/include/crt/host_config.h) and no accepted one is installed "
            "(others found: gcc 12.2 (/usr/bin/g++-12)): install g++-11 or older")
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1 and want in plan.stdout, plan.stdout[-3000:] + plan.stderr[-2000:]
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    build = tasks_of(tmp_path, "oldcuda")["build_wheel"]
    assert build["status"] == "failed" and want in build["msg"] and "found while planning" in build["msg"], build["msg"]
    assert not (tmp_path / "work" / "oldcuda" / "src").exists()  # nothing was uploaded


# -- a real quota -------------------------------------------------------------------------------


@pytest.fixture
def btrfs_quota(tmp_path):
    """A btrfs file system on a loop device with quotas on, and a subvolume ``home`` whose qgroup
    limit the test sets (``limit(mib)``); ``statvfs`` there shows the whole file system free.
    Unmounted and its loop device detached afterwards."""
    for tool in ("mkfs.btrfs", "btrfs", "losetup"):
        assert shutil.which(tool), f"{tool} missing: .ci/run installs btrfs-progs"
    img, mnt = tmp_path / "quota.img", tmp_path / "quota"
    with img.open("wb") as fh:
        fh.truncate(512 * 1024 * 1024)
    subprocess.run(["mkfs.btrfs", "-q", str(img)], check=True, capture_output=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(img)], check=True, capture_output=True, text=True).stdout.strip()
    mnt.mkdir()
    try:
        subprocess.run(["mount", loop, str(mnt)], check=True)
        subprocess.run(["btrfs", "quota", "enable", str(mnt)], check=True)
        subprocess.run(["btrfs", "subvolume", "create", str(mnt / "home")], check=True, capture_output=True)

        def limit(mib: float) -> Path:
            subprocess.run(["btrfs", "qgroup", "limit", f"{int(mib * 1024)}K", str(mnt / "home")], check=True)
            return mnt / "home"

        yield limit
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        subprocess.run(["losetup", "-d", loop], check=False)


UPLOAD_PLAY = """\
name: upload
hosts: all
gather_facts: false
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/big.bin"}}
"""


def test_a_real_quota_is_named_with_the_path_though_statvfs_shows_space(sshd_farm, tmp_path, btrfs_quota):
    home = btrfs_quota(64)
    free = os.statvfs(home)
    assert free.f_bavail * free.f_frsize > 300 * 1024 * 1024  # statvfs: hundreds of MiB free, the quota: 64 MiB
    h = sshd_farm.start("quota")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = tool_venv(tmp_path / "venv")
    work = home / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"quota": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                  "workdir": str(work), "venv": venv,
                                                                  "verify_device": "cpu"}}})
    src = cmake_ext(tmp_path / "cmake_ext")
    # 1. the disk preflight writes what the build needs (100 MiB) and meets the quota, while planning
    play = tmp_path / "build.yaml"
    play.write_text(BUILD_PLAY.format(src=src, package="tiny_cmake_ext").replace("max_jobs: 1", "max_jobs: 1\n      min_free_disk_mib: 100"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    build = tasks_of(tmp_path, "quota")["build_wheel"]
    assert "preflight: Disk quota exceeded (EDQUOT) writing 100 MiB in " in build["msg"], build["msg"]
    assert "statvfs shows" in build["msg"] and "found while planning" in build["msg"]
    assert build["msg"].count("Disk quota exceeded") == 1 and f"(for {work}/tmp, {work}/wheels;" in build["msg"]
    assert not list(work.rglob(".fleetctl-space-probe-*"))  # the probe file is gone
    # 2. an upload that meets the quota: SFTP says only "Failure"; the cause is named with the path
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(80 * 1024 * 1024))
    up = tmp_path / "up.yaml"
    up.write_text(UPLOAD_PLAY.format(src=big))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(up), home=tmp_path)
    assert res.returncode == 1
    error = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["quota"]["error"]
    assert f"Disk quota exceeded (EDQUOT) writing {work}/big.bin" in error, error
    assert not [p for p in work.rglob("*big.bin*")]  # no partial file left
    # 3. a build that meets the quota halfway (the sources fit, the build tree does not)
    play.write_text(BUILD_PLAY.format(src=src, package="tiny_cmake_ext").replace("max_jobs: 1", "max_jobs: 1\n      min_free_disk_mib: 0"))
    used = sum(p.stat().st_size for p in home.rglob("*") if p.is_file())
    btrfs_quota(used / 1048576 + 3)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    tasks = tasks_of(tmp_path, "quota")
    failed = [t for t in tasks.values() if t["status"] == "failed"][0]
    assert "Disk quota exceeded (EDQUOT) writing " + str(work) in failed["msg"], failed["msg"]


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder bind-mounted read-only (``mount --bind``, then ``remount,bind,ro``)."""
    src, ro = tmp_path / "ro-src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        yield ro
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)


def test_an_upload_to_a_read_only_file_system_is_named_with_the_path(sshd_farm, tmp_path, read_only_folder):
    h = sshd_farm.start("rofs")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"rofs": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                 "workdir": str(tmp_path / "work")}}})
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 4096)
    up = tmp_path / "up.yaml"
    up.write_text(f"name: up\nhosts: all\ngather_facts: false\ntasks:\n"
                  f"  - name: upload\n    copy: {{src: {small}, dest: '{read_only_folder}/sub/small.bin'}}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(up), home=tmp_path)
    assert res.returncode == 1
    error = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["rofs"]["error"]
    assert f"Read-only file system (EROFS) writing {read_only_folder}/sub" in error, error
    assert "remount it read-write" in error


def test_a_disk_that_fills_during_the_build_is_named_with_the_path(sshd_farm, tmp_path):
    """ENOSPC in the build itself (the preflight told to check nothing): a 4 MiB tmpfs workdir
    holds the sources but not the build tree."""
    from tests.support.tiny_ext import tmpfs

    with tmpfs(tmp_path / "small", "4m") as small:
        h = sshd_farm.start("fills")
        write_fake_nvidia_smi(h.bin_dir, [H200])
        work = small / "work"
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"fills": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                      "workdir": str(work), "verify_device": "cpu",
                                                                      "venv": tool_venv(tmp_path / "venv")}}})
        play = tmp_path / "build.yaml"
        play.write_text(BUILD_PLAY.format(src=cmake_ext(tmp_path / "cmake_ext"), package="tiny_cmake_ext")
                        .replace("max_jobs: 1", "max_jobs: 1\n      min_free_disk_mib: 0"))
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
        assert res.returncode == 1
        failed = [t for t in tasks_of(tmp_path, "fills").values() if t["status"] == "failed"][0]
        assert f"No space left on device (ENOSPC) writing {work}" in failed["msg"], failed["msg"]
        assert "df -i" in failed["msg"]


SILENT_FILL_CMAKE = """cmake_minimum_required(VERSION 3.18)
project(silent_fill LANGUAGES C)
# a "compiler" that, as nvcc did on a full tmpfs, writes its intermediate under TMPDIR until the disk
# is full and exits 1 printing nothing: ninja then says only FAILED: OBJECT
add_custom_command(OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/cuda_pk.cu.o"
                   COMMAND sh "${CMAKE_CURRENT_SOURCE_DIR}/fake_nvcc.sh" "${CMAKE_CURRENT_BINARY_DIR}/cuda_pk.cu.o")
add_custom_target(kernels ALL DEPENDS "${CMAKE_CURRENT_BINARY_DIR}/cuda_pk.cu.o")
"""


def test_a_disk_that_fills_while_the_compiler_says_nothing_is_named_from_what_df_shows(sshd_farm, tmp_path):
    """Operator trial: a tmpfs workdir filled during the build, nvcc exited 1 printing nothing and
    the summary was ninja's ``FAILED: OBJECT``. The build's own step measures its file systems when
    it fails (before its TMPDIR is removed): the cause names the full one, what was being built and
    that the compiler said nothing."""
    from tests.support.tiny_ext import tmpfs

    src = tmp_path / "silent_fill"
    src.mkdir()
    (src / "pyproject.toml").write_text('[build-system]\nrequires = ["scikit-build-core>=0.10"]\n'
                                        'build-backend = "scikit_build_core.build"\n[project]\nname = "silent_fill"\n'
                                        'version = "0.1.0"\n[tool.scikit-build]\nwheel.packages = []\n')
    (src / "CMakeLists.txt").write_text(SILENT_FILL_CMAKE)
    (src / "fake_nvcc.sh").write_text('cat /dev/zero > "${TMPDIR:-/tmp}/fake_nvcc_$$.ii" 2>/dev/null\nexit 1\n')
    with tmpfs(tmp_path / "ws", "12m") as ws:
        h = sshd_farm.start("fillws")
        write_fake_nvidia_smi(h.bin_dir, [H200])
        work = ws / "work"
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"fillws": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                       "workdir": str(work), "verify_device": "cpu",
                                                                       "venv": tool_venv(tmp_path / "venv")}}})
        play = tmp_path / "build.yaml"
        play.write_text(BUILD_PLAY.format(src=src, package="silent_fill")
                        .replace("max_jobs: 1", "max_jobs: 1\n      min_free_disk_mib: 0"))
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--force", home=tmp_path)
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        failed = [t for t in tasks_of(tmp_path, "fillws").values() if t["status"] == "failed"][0]
        msg = failed["msg"]
        free = re.match(rf"build failed \(pip\): no space left on {re.escape(str(ws))} \((\d+) (bytes|KiB) free of 12 MiB; "
                        rf"the build's workdir {re.escape(str(work))}, TMPDIR {re.escape(str(work))}/tmp/", msg)
        assert free, msg
        assert " while building cuda_pk.cu.o (ENOSPC, measured after the build failed; the compiler's own message " \
               "was empty): the file system is full (or out of inodes: df -h, df -i)" in msg, msg
        assert "fleetctl: room after the failed build: TMPDIR bytes: tmpfs" in failed_log(tmp_path, "fillws")


def failed_log(home, host: str) -> str:
    """The host's log of the last run (every line the build printed)."""
    return fleetctl("logs", last_run(home).name, host, home=home).stdout


def test_an_install_into_a_full_venv_disk_names_enospc_with_the_venv(sshd_farm, tmp_path):
    """A venv on a real tmpfs that is full: the install is refused while planning, before pip runs
    (pip would stop with ENOSPC and leave a partial package), naming the venv's site-packages, its
    free MiB and the fix. pip's own words on a disk that fills during an install ("[Errno 28] No space
    left on device", no path) become the cause line's named fault with the venv and the TMPDIR:
    tests/test_causes.py."""
    import sys

    from tests.support.tiny_ext import tmpfs, write_wheel

    wheel = write_wheel(tmp_path / "wheels", "tiny_big", "0.1.0",
                        {"tiny_big/__init__.py": "", "tiny_big/data.txt": os.urandom(600_000).hex()})
    with tmpfs(tmp_path / "small", "40m") as small:
        venv = small / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # with ensurepip's pip
        free_kib = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize // 1024
        subprocess.run(["fallocate", "-l", f"{max(free_kib - 64, 0)}k", str(small / "filler")], check=True)
        h = sshd_farm.start("venvfull")
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"venvfull": {
            **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": str(venv),
            "verify_device": "cpu"}}})
        play = tmp_path / "install.yaml"
        play.write_text(f"name: install\nhosts: all\ntasks:\n  - name: install\n    pip_install: {{wheel: {wheel}}}\n")
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        failed = tasks_of(tmp_path, "venvfull")["pip_install"]
        assert failed["status"] == "failed"
        assert failed["msg"].startswith("preflight: venv's site-packages " + str(venv)), failed["msg"]
        assert f" MiB free; {wheel.name} (unpacked, with a margin) needs 18 MiB: pip would stop with ENOSPC" in \
            failed["msg"], failed["msg"]  # the one estimate: 1.2 MB unpacked (2 MiB rounded up) + the margin
        assert "(found while planning: nothing was uploaded or run)" in failed["msg"], failed["msg"]


def test_a_login_cuda_home_of_another_cuda_major_than_torch_is_refused_while_planning(sshd_farm, tmp_path):
    """The login environment (~/.bashrc) exports CUDA_HOME=<a 12.4 toolkit> while the venv's torch is
    +cu130: facts warn (and show the build's cmake), --plan refuses the build with the fix (the host
    var cuda_home). With cuda_home set to a CUDA 13 toolkit and the login's CUDA_HOME pointing at a
    folder without bin/nvcc, that folder is a facts note and nothing warns."""
    from tests.support.hostvenv import make_venv, site_packages
    from tests.test_facts_script import write_fake_cuda

    h = sshd_farm.start("cuda-env")  # the current user, bash: ~/.bashrc runs for every ssh command
    write_fake_nvidia_smi(h.bin_dir, [H200])
    old, new = write_fake_cuda(tmp_path / "cuda-12.4", "12.4"), write_fake_cuda(tmp_path / "cuda-13.0", "13.0")
    venv = make_venv(tmp_path / "venv", "virtualenv", torch=False, build_tools=True)
    torch_dir = site_packages(Path(venv)) / "torch"
    torch_dir.mkdir()
    (torch_dir / "version.py").write_text("__version__ = '2.9.0+cu130'\ncuda = '13.0'\n")
    (torch_dir / "__init__.py").write_text("from .version import __version__, cuda\n")
    rc = h.home / ".bashrc"
    rc.write_text(f"export CUDA_HOME={old}\n")
    host = {**h.inventory_vars(sshd_farm.known_hosts), "venv": venv, "workdir": str(tmp_path / "work"),
            "verify_device": "cpu"}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"cu": host}})
    line = (f"nvcc 12.4 at {old}/bin/nvcc (the login environment's CUDA_HOME/CUDA_PATH chose it) is CUDA 12, but "
            f"the venv's torch 2.9.0+cu130 is built for CUDA 13.0: torch.utils.cpp_extension refuses a CUDA major "
            f"mismatch and the build would fail or load two CUDA runtimes; set the host var cuda_home to a CUDA 13 toolkit")

    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    flat = " ".join(facts.stdout.replace("│", " ").split())
    assert "cu: WARNING (below)" in facts.stdout and f"warning: {line}" in flat, facts.stdout
    assert re.search(r"; cuda 12\.4 \S+; cmake \d+\.\d+\S* /\S*/cmake; python", facts.stdout), facts.stdout
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    build = json.loads(plan.stdout)["cu"]["builds"][0]
    assert build["action"] == "fail" and build["msg"].startswith("preflight: " + line), build

    rc.write_text(f"export CUDA_HOME={tmp_path / 'no-cuda'}\n")  # a folder without bin/nvcc: skipped, said
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"cu": {**host, "cuda_home": str(new)}}})
    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    flat = " ".join(facts.stdout.replace("│", " ").split())
    assert "cu: ok: " in facts.stdout and "CUDA major" not in flat, facts.stdout
    assert (f"cu: the login environment's CUDA_HOME {tmp_path / 'no-cuda'} has no executable bin/nvcc: skipped; "
            f"nvcc 13.0 at {new}/bin/nvcc (cuda_home var) is used") in flat, facts.stdout
