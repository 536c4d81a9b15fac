"""Offline build dependencies end to end (fleetctl/tasks/build_deps.py): a real sshd test host,
real git repositories, a real scikit-build-core + nvcc build, a real pip install. The project's
FetchContent (git and URL forms) and submodule dependencies point at git.invalid, which never
resolves (RFC 2606), and the host's sessions have every git protocol disallowed and a dead proxy:
a build that touched the network would fail."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.offline_ext import offline_project
from tests.support.tiny_ext import tool_venv

pytestmark = pytest.mark.sshd

NO_NETWORK = {"GIT_ALLOW_PROTOCOL": "none", "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
              "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}

PLAY = """\
name: build a project whose dependencies are offline
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      max_jobs: 1
      fetch_mirror: "{{{{ fetch_mirror | default('') }}}}"
    register: build
  - name: install
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
  - name: verify
    verify: {{package: tiny_offline_ext, device: cpu}}
"""


def plan(inv: Path, play: Path, home: Path, *extra: str) -> subprocess.CompletedProcess:
    return fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", *extra, home=home)


def test_dependencies_come_from_the_mirror_and_nothing_touches_the_network(sshd_farm, tmp_path):
    fx = offline_project(tmp_path)
    commits = fx["commits"]
    h = sshd_farm.start("offline", env=NO_NETWORK)
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = tool_venv(tmp_path / "venv")
    empty = tmp_path / "empty-mirror"
    empty.mkdir()

    def inventory(**hostvars) -> Path:
        entry = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": venv, **hostvars}
        return write_inventory(tmp_path / "inv.yaml", {"g": {"offline": entry}})

    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=fx["src"]))

    # without a mirror: --plan lists what CMake would download, and this host reaches none of it:
    # it cannot build, said while planning (new-user trial: "build", then "Failed to clone repository")
    res = plan(inventory(), play, tmp_path, "--json")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    deps = json.loads(res.stdout)["offline"]["builds"][0]["deps"]
    lost = "downloaded by CMake (no fetch_mirror): unreachable: "
    assert [(d["name"], d["repo"], d["host"][:len(lost)]) for d in deps] == [
        ("depb", "deps/depb", lost), ("depa", "deps/depa", lost),
        ("third_party/depc", "deps/depc", "submodule of the checkout (no fetch_mirror)")]
    flat = " ".join(plan(inventory(), play, tmp_path).stdout.split())
    assert (f"depa (deps/depa @ {commits['depa'][:12]}) from https://git.invalid/deps/depa.git: git ls-remote: fatal: "
            "transport 'https' not allowed") in flat, flat
    assert "depb (deps/depb @ v1) from https://git.invalid/deps/depb/archive/v1.tar.gz: " in flat
    assert "set the host var fetch_mirror" in flat and "Traceback" not in flat

    # a mirror that lacks them: the host fails while planning, naming each repository and commit
    res = plan(inventory(fetch_mirror=str(empty)), play, tmp_path)
    assert res.returncode != 0
    flat = " ".join(res.stdout.split())
    assert f"depa (deps/depa @ {commits['depa']}): the fetch_mirror {empty} has no repository deps/depa" in flat, flat
    assert "depb (deps/depb @ v1)" in flat and f"third_party/depc (deps/depc @ {commits['depc']})" in flat
    assert "Traceback" not in res.stdout + res.stderr
    # --dry-run runs the same planner and says the same
    dry = fleetctl("-i", str(tmp_path / "inv.yaml"), "deploy", "--hosts", "g", "--playbook", str(play), "--dry-run",
                   home=tmp_path)
    assert dry.returncode != 0
    assert f"depa (deps/depa @ {commits['depa']}): the fetch_mirror {empty} has no repository deps/depa" in " ".join(
        dry.stdout.split())

    # the mirror: --plan says each is yet to fetch and send; the deploy builds offline
    inv = inventory(fetch_mirror=str(fx["mirror"]))
    res = plan(inv, play, tmp_path, "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    deps = json.loads(res.stdout)["offline"]["builds"][0]["deps"]
    assert {(d["name"], d["commit"], d["controller"], d["host"]) for d in deps} == {
        ("depb", commits["depb"], "to fetch", "to send"), ("depa", commits["depa"], "to fetch", "to send"),
        ("third_party/depc", commits["depc"], "to fetch", "to send")}
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    tasks = {t["action"]: t for t in record["hosts"]["offline"]["tasks"]}
    assert tasks["build_wheel"]["data"]["sass"] == ["sm_90a"]
    assert tasks["verify"]["status"] == "ok", tasks["verify"]["msg"]
    log = (last_run(tmp_path) / "logs" / "offline.log").read_text()
    defines = f"FETCHCONTENT_SOURCE_DIR_DEPA={tmp_path}/work/fetchdeps/deps+depa/{commits['depa']}"
    events = (last_run(tmp_path) / "events.jsonl").read_text()
    assert defines in events and "cmake.define.FETCHCONTENT_FULLY_DISCONNECTED=ON" in events
    for word in ("Cloning into", "git clone", "Performing download step", "Downloading", "git.invalid/deps/depa.git"):
        assert word not in log.replace("GIT_REPOSITORY https://git.invalid", ""), word
    py = Path(venv) / "bin" / "python"
    got = subprocess.run([str(py), "-c", "import tiny_offline_ext; print(tiny_offline_ext.value())"],
                         capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "123"  # 100 (depa) + 20 (depb) + 3 (depc, the submodule)

    # now cached on the controller and on the host; a forced rebuild sends no file again
    res = plan(inv, play, tmp_path, "--json")
    deps = json.loads(res.stdout)["offline"]["builds"][0]["deps"]
    assert {(d["controller"], d["host"]) for d in deps} == {("cached", "cached")}
    table = " ".join(fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", home=tmp_path,
                              env={"COLUMNS": "250"}).stdout.split())
    assert "dependency depa │ cached" in table and f"deps/depa @ {commits['depa'][:12]} (git); controller: cached, host: cached" in table, table
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--force", home=tmp_path)
    assert res.returncode == 0, res.stdout[-5000:]
    build = {t["action"]: t for t in json.loads((last_run(tmp_path) / "run.json").read_text())
             ["hosts"]["offline"]["tasks"]}["build_wheel"]
    assert build["data"]["decision"]["deps_sent"] == 0


def test_a_given_source_that_is_not_on_the_host_fails_while_planning(sshd_farm, tmp_path):
    """FETCHCONTENT_SOURCE_DIR_<NAME> (the operator's own copy of a dependency) must name a folder
    on the host: a missing one fails the host while planning, naming the define and the folder,
    not the configure after the plan said ok."""
    fx = offline_project(tmp_path)
    h = sshd_farm.start("given", env=NO_NETWORK)
    write_fake_nvidia_smi(h.bin_dir, [H200])
    gone = tmp_path / "nowhere" / "depa"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"given": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": tool_venv(tmp_path / "v"),
        "fetch_mirror": str(fx["mirror"]), "extra_defines": {"FETCHCONTENT_SOURCE_DIR_DEPA": str(gone)}}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=fx["src"]).replace(
        "      max_jobs: 1\n", "      max_jobs: 1\n      cmake_defines: \"{{ extra_defines }}\"\n"))
    res = plan(inv, play, tmp_path)
    assert res.returncode != 0
    flat = " ".join(res.stdout.split())
    assert (f"FETCHCONTENT_SOURCE_DIR_DEPA={gone}: no such folder on the host (the source given for depa instead of "
            "fetching it)") in flat, flat
    gone.mkdir(parents=True)  # there now: the plan goes on, depa given, the others fetched
    res = plan(inv, play, tmp_path, "--json")
    assert res.returncode == 0, res.stdout[-3000:]
    rows = {d["name"]: d["host"] for d in json.loads(res.stdout)["given"]["builds"][0]["deps"]}
    assert rows["depa"] == f"given: {gone}" and rows["depb"] == "to send"


def test_a_tree_already_on_the_host_is_read_there_and_each_download_is_checked(sshd_farm, tmp_path):
    """No ``copy`` in the play and no fetch_mirror (new-user trial: ``--plan`` said "build", deps
    [], and CMake cloned CUTLASS during the build): the tree's declarations are read on the host,
    listed, and each is asked for. This host's git may use file:// only and its proxy is dead:
    depa (a file:// repository) answers, depb (an https archive) does not, so the host fails while
    planning, naming depb and fetch_mirror; with depb's sources given the plan goes on."""
    fx = offline_project(tmp_path)
    cml = Path(fx["src"]) / "CMakeLists.txt"
    cml.write_text(cml.read_text().replace("https://git.invalid/deps/depa.git", f"file://{fx['mirror']}/deps/depa.git"))
    h = sshd_farm.start("present", env={**NO_NETWORK, "GIT_ALLOW_PROTOCOL": "file"})
    write_fake_nvidia_smi(h.bin_dir, [H200])
    given = tmp_path / "depb-src"
    given.mkdir()

    def inventory(**defines) -> Path:
        return write_inventory(tmp_path / "inv.yaml", {"g": {"present": {
            **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
            "venv": tool_venv(tmp_path / "venv"), "extra_defines": defines}}})

    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=fx["src"]).split("  - name: build\n")[0].replace(
        "  - name: upload\n", "  - name: build\n").replace(
        f'    copy: {{src: {fx["src"]}, dest: "{{{{ workdir }}}}/src"}}\n', "    build_wheel:\n"
        f'      src: "{fx["src"]}"\n      out_dir: "{{{{ workdir }}}}/wheels"\n'
        '      cmake_defines: "{{ extra_defines }}"\n'))
    res = plan(inventory(), play, tmp_path)
    assert res.returncode == 1, res.stdout[-3000:]
    flat = " ".join(res.stdout.split())
    assert "depb (deps/depb @ v1) from https://git.invalid/deps/depb/archive/v1.tar.gz: URLError:" in flat, flat
    assert "set the host var fetch_mirror" in flat and "depa (deps" not in flat and "Traceback" not in flat
    res = plan(inventory(FETCHCONTENT_SOURCE_DIR_DEPB=str(given)), play, tmp_path, "--json")
    assert res.returncode == 0, res.stdout[-3000:]
    rows = {d["name"]: d["host"] for d in json.loads(res.stdout)["present"]["builds"][0]["deps"]}
    assert rows == {"depb": f"given: {given}", "depa": "downloaded by CMake (no fetch_mirror): reachable",
                    "third_party/depc": "submodule of the checkout (no fetch_mirror)"}
