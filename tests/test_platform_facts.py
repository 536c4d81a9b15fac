"""The platform and install-target facts (issue 23) read by the real facts script, and the pure rules
of :mod:`fleetctl.build.wheeltags` checked against what ``packaging.tags`` (pip's rules) says for the same
interpreter."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging import tags

from fleetctl.build.wheeltags import platform_inputs, platform_label, refusal, supported_platforms, wheel_platforms
from tests.test_facts_script import run_script

VENV = Path(sys.prefix)  # the tests run in the project's venv


def _pip_platforms(env: dict[str, str]) -> set[str]:
    """The platform tags ``packaging.tags.sys_tags()`` gives in the venv's interpreter under ``env``."""
    code = "from packaging import tags; print('\\n'.join(sorted({t.platform for t in tags.sys_tags()})))"
    out = subprocess.run([str(VENV / "bin" / "python3"), "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", **env}).stdout.split()
    return set(out) - {"any"}


def test_the_reported_platform_is_what_pip_accepts_on_that_interpreter(tmp_path):
    for env in ({}, {"_PYTHON_HOST_PLATFORM": "linux-aarch64"}):
        facts, _ = run_script("--workdir", tmp_path, venv=VENV, env=env)
        plat = facts["python"]["platform"]
        assert plat["machine"] == platform.machine()  # the kernel's; the interpreter's platform decides
        assert set(supported_platforms(facts)) == _pip_platforms(env), (env, plat)
        assert plat["libc"] == "glibc" and plat["libc_version"] and plat["interp"]
    assert plat["sysconfig"] == "linux-aarch64"
    assert platform_label(facts).startswith("linux_aarch64 glibc 2.")
    assert platform_inputs(facts) == {"platform": "linux_aarch64", "libc": f"glibc {plat['libc_version']}"}


def test_a_32_bit_interpreter_and_musl_follow_packagings_rules():
    base = {"sysconfig": "linux-x86_64", "machine": "x86_64", "libc": "glibc", "libc_version": "2.17", "bits": 32}
    got = supported_platforms({"python": {"platform": base}})
    assert got[0] == "manylinux_2_17_i686" and got[-1] == "linux_i686" and "manylinux1_i686" in got
    musl = {"sysconfig": "linux-aarch64", "libc": "musl", "libc_version": "1.2.4", "bits": 64}
    assert supported_platforms({"python": {"platform": musl}}) == [
        "musllinux_1_2_aarch64", "musllinux_1_1_aarch64", "musllinux_1_0_aarch64", "linux_aarch64"]
    assert supported_platforms({"python": {}}) is None  # an old facts script: nothing to check


def test_wheel_tags_and_refusals():
    assert wheel_platforms("/w/x-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl") == [
        "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    assert wheel_platforms("x-1.0-1-py3-none-any.whl") == ["any"] and wheel_platforms("notawheel.tar.gz") is None
    arm = {"python": {"platform": {"sysconfig": "linux-aarch64", "libc": "glibc", "libc_version": "2.35", "bits": 64}}}
    assert refusal("gh01", "/w/x-1.0-cp312-cp312-linux_x86_64.whl", arm) == (
        "gh01: refusing x-1.0-cp312-cp312-linux_x86_64.whl: its platform tag linux_x86_64 does not fit the host's "
        "platform linux_aarch64 glibc 2.35")
    assert refusal("gh01", "x-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", arm) is None
    assert refusal("gh01", "x-1.0-cp312-cp312-manylinux_2_39_aarch64.whl", arm) is not None  # newer glibc
    assert refusal("gh01", "x-1.0-py3-none-any.whl", arm) is None
    # linux_ARCH says nothing of the libc: the recorded build libc does
    assert refusal("gh01", "x-1.0-cp312-cp312-linux_aarch64.whl", arm, {"libc": "glibc 2.39"}) == (
        "gh01: refusing x-1.0-cp312-cp312-linux_aarch64.whl: its platform tag linux_aarch64 was built against "
        "glibc 2.39, which does not fit the host's platform linux_aarch64 glibc 2.35")
    assert refusal("gh01", "x-1.0-cp312-cp312-linux_aarch64.whl", arm, {"libc": "musl 1.2.4"}) is not None
    assert refusal("gh01", "x-1.0-cp312-cp312-linux_aarch64.whl", arm, {"libc": "glibc 2.31"}) is None


def test_packaging_agrees_on_this_controller():
    here = {t.platform for t in tags.sys_tags()} - {"any"}
    facts, _ = run_script("--workdir", "/", venv=VENV)
    assert set(supported_platforms(facts)) == here


def test_one_folder_read_by_two_hosts_at_once_has_one_id(tmp_path):
    shared = tmp_path / "nfs-venv"
    shared.mkdir()
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: run_script("--workdir", tmp_path / "w", "--venv", shared)[0], range(4)))
    ids = {r["targets"]["venv"]["id"] for r in runs}
    assert len(ids) == 1 and None not in ids
    assert (shared / ".fleetctl-id").read_text().splitlines()[0] == ids.pop()  # then the "at" lines (target_id)
    assert sorted(p.name for p in shared.iterdir()) == [".fleetctl-id"]  # no temporary file left
    assert runs[0]["targets"]["venv"]["path"] == str(shared.resolve())


def test_a_folder_that_is_not_there_has_no_id_and_none_is_made(tmp_path):
    facts, _ = run_script("--workdir", tmp_path / "absent", "--venv", tmp_path / "no-venv")
    assert facts["targets"]["venv"]["id"] is None and facts["targets"]["workdir"]["id"] is None
    assert not (tmp_path / "absent").exists() and not (tmp_path / "no-venv").exists()


def test_a_folder_copied_with_its_id_file_gets_its_own_id_and_the_copied_install_record_is_not_its(tmp_path):
    """``cp -a ~/venv ~/venv-copy`` copies ``.fleetctl-id`` and ``.fleetctl-install.json``: the copy
    was taken for the same folder (operator trial: ``a and a2 share the venv`` for the two, and
    ``venv-copy holds a's install``). One kernel sees one folder as one inode, so the id file's line
    for this boot naming another inode says it was copied; across boots and machines (NFS) and
    across remounts (another device number, the same inode) one folder keeps its id."""
    venv, work = tmp_path / "venv", tmp_path / "w"
    venv.mkdir()
    first = run_script("--workdir", work, "--venv", venv)[0]["targets"]["venv"]
    assert first["id"] and first.get("copied") is None
    # the install record pip_install writes: the venv's id and local id then (record_folder)
    (venv / ".fleetctl-install.json").write_text(json.dumps({"host": "a", "archs": "9.0a", "id": first["id"],
                                                             "local": first["local"]}))
    subprocess.run(["cp", "-a", str(venv), str(tmp_path / "venv-copy")], check=True)
    copy = tmp_path / "venv-copy"
    looked = run_script("--workdir", work, "--venv", copy, "--read-only", "1")[0]["targets"]["venv"]
    assert looked["id"] is None and "was written for another folder" in (looked.get("copied") or ""), looked  # a plan writes nothing
    assert looked["installed"]["host"] == "a" and looked["installed_copied"], looked
    assert (copy / ".fleetctl-id").read_text().splitlines()[0] == first["id"]
    fresh = run_script("--workdir", work, "--venv", copy)[0]["targets"]["venv"]
    assert fresh["id"] and fresh["id"] != first["id"] and fresh["installed_copied"], fresh
    again = run_script("--workdir", work, "--venv", copy)[0]["targets"]["venv"]
    assert again["id"] == fresh["id"] and again["copied"] is None and again["installed_copied"], again
    orig = run_script("--workdir", work, "--venv", venv)[0]["targets"]["venv"]
    assert orig["id"] == first["id"] and orig["copied"] is None and orig["installed_copied"] is None, orig
    # one folder seen from another boot or machine (an NFS client: another boot id, device and
    # inode), or remounted on this boot (another device number): one id still
    boot, dev, ino = first["local"].split(":")
    for line in (f"at 0f0f0f0f-0000-4000-8000-000000000000:{int(dev) + 7}:{int(ino) + 1}", f"at {boot}:{int(dev) + 7}:{ino}"):
        (venv / ".fleetctl-id").write_text(f"{first['id']}\n{line}\n")
        seen = run_script("--workdir", work, "--venv", venv, "--read-only", "1")[0]["targets"]["venv"]
        assert seen["id"] == first["id"] and seen["copied"] is None, (line, seen)
    # an id file of an older fleetctl (the id alone) is kept, and this boot's view is added for a later copy's sake
    (venv / ".fleetctl-id").write_text(f"{first['id']}\n")
    assert run_script("--workdir", work, "--venv", venv)[0]["targets"]["venv"]["id"] == first["id"]
    assert (venv / ".fleetctl-id").read_text() == f"{first['id']}\nat {first['local']}\n"
