"""Smaller things an operator trips over (issue 24), through the real CLI on the local connection:
``--retry-failed`` without ``--hosts``, ``--plan`` wrapping, host names said once, key-file faults
per host, and which commands talk about fallback archs."""

from __future__ import annotations

import json
import sys

from tests.support.fleet import fleetctl, last_run


def _two_local_hosts(tmp_path, flag):
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  children:\n    mine:\n      hosts:\n"
                   f"        a1: {{ansible_connection: local, workdir: {tmp_path}/wa1}}\n"
                   f"        a2: {{ansible_connection: local, workdir: {tmp_path}/wa2}}\n")
    play = tmp_path / "play.yaml"
    # the playbook's own `hosts` names a group this inventory lacks, as fp4-kernels.yaml's gpu-nodes may
    play.write_text("name: deploy\nhosts: gpu-nodes\ngather_facts: false\ntasks:\n  - name: needs the fix on a2\n"
                    "    command: {argv: [sh, -c, 'test \"$0\" != a2 || test -e \"$1\"', "
                    "'{{ host }}', " + json.dumps(str(flag)) + "]}\n")
    return inv, play


def test_retry_failed_without_hosts_takes_the_failed_runs_hosts(tmp_path):
    flag = tmp_path / "fixed"
    inv, play = _two_local_hosts(tmp_path, flag)
    first = fleetctl("-i", str(inv), "deploy", "--hosts", "mine", "--playbook", str(play), home=tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    first_id = last_run(tmp_path).name
    flag.touch()
    retry = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--retry-failed", home=tmp_path)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]) == ["a2"]
    # a named run too, and --hosts still narrows it
    by_id = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--retry-failed", first_id, home=tmp_path)
    assert by_id.returncode == 0, by_id.stdout + by_id.stderr
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]) == ["a2"]
    narrowed = fleetctl("-i", str(inv), "deploy", "--hosts", "a1", "--playbook", str(play), "--retry-failed",
                        first_id, home=tmp_path)
    assert narrowed.returncode == 2 and "selects no hosts" in narrowed.stderr, narrowed.stderr


def test_folded_output_lists_diagnostics_not_compile_lines_of_a_file_named_error(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  children:\n    gpus:\n      hosts:\n        gpu[01:09]:\n"
                   "          ansible_connection: local\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: folded\nhosts: all\ngather_facts: false\ntasks:\n  - name: build\n"
                    "    command: {argv: [sh, -c, 'echo \"[1/2] Building CXX object CMakeFiles/x.dir/src/error.cpp.o\"; "
                    "echo \"/src/error.cpp:3:1: warning: unused variable y\" >&2; echo \"copying errors.py -> build\"']}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play), "--output", "folded",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    listed = res.stdout.split("error and warning lines:", 1)[1]
    assert "gpu[01-09]: /src/error.cpp:3:1: warning: unused variable y" in listed
    assert "Building CXX object" not in listed and "copying errors.py" not in listed


def test_a_loose_key_file_fails_only_its_host_naming_the_file_and_the_fix(sshd_farm, tmp_path):
    """A key file OpenSSH refuses for its mode fails its host when it connects (the fix is chmod, not
    the inventory); a key path that is not there is bad input, refused before the run
    (tests/test_inventory_cli.py::test_a_missing_key_file_is_refused_for_the_commands_that_select_its_host)."""
    import shutil

    from tests.support.fleet import write_inventory

    host = sshd_farm.start("keys")
    loose = tmp_path / "loose_key"
    shutil.copyfile(sshd_farm.client_key, loose)
    loose.chmod(0o644)
    good = host.inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "good": good,
        "loose": {**good, "ansible_ssh_private_key_file": str(loose)}}})
    for argv in (("run", "--hosts", "g", "--json", "--", "echo", "ran"), ("facts", "--hosts", "g", "--json")):
        res = fleetctl("-i", str(inv), *argv, home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr  # not 2: the command ran for the good host
        doc = json.loads(res.stdout)
        doc = doc.get("hosts", doc)
        assert doc["good"].get("status", "ok") == "ok" or doc["good"].get("reachable", True)
        loose_error = doc["loose"]["error"]
        assert f"{loose} has mode 0644" in loose_error and f"chmod 600 {loose}" in loose_error, loose_error
        assert not loose_error.startswith("loose:")
    # --plan, --dry-run and a deploy agree: the same host fails, for the same cause
    play = tmp_path / "play.yaml"
    play.write_text("name: t\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n")
    for mode in ("--plan", "--dry-run", None):
        argv = ["-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json"] + ([mode] if mode else [])
        res = fleetctl(*argv, home=tmp_path)
        assert res.returncode == 1, (mode, res.stdout + res.stderr)
        doc = json.loads(res.stdout)
        hosts = doc.get("hosts", doc)
        assert hosts["good"]["status"] == "ok", (mode, hosts["good"])
        assert "chmod 600" in hosts["loose"]["error"], (mode, hosts)


def test_a_hosts_error_names_the_host_once(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    h3: {{ansible_connection: local, workdir: {tmp_path}/w}}\n")
    (tmp_path / "f.txt").write_text("x\n")
    play = tmp_path / "copy.yaml"
    play.write_text("name: c\nhosts: all\ngather_facts: false\ntasks:\n  - name: put it\n"
                    f"    copy: {{src: {tmp_path}/f.txt, dest: /proc/nope/f.txt}}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "h3", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    assert "h3: FAILED: put it: put " in res.stdout, res.stdout
    assert "h3: FAILED: put it: h3:" not in res.stdout
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert record["hosts"]["h3"]["error"].count("h3:") == 0, record["hosts"]["h3"]["error"]


def test_only_a_build_says_it_builds_for_fallback_archs(tmp_path):
    """verify and rollback gather the same facts, but only a play that builds tells the build
    plan's notes ("no GPU found ...: building for fallback_archs ...")."""
    import os

    from tests.support.fleet import REPO

    # a build host: no NVIDIA driver at all (no nvidia-smi on PATH; a failing one is a broken stack)
    path = ":".join(d for d in os.environ["PATH"].split(":") if d and not os.path.exists(os.path.join(d, "nvidia-smi")))
    env = {"PATH": path}
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w, "
                   f"venv: {sys.prefix}}}\n")  # the venv running the tests (a worktree has no .venv)
    for argv in (("verify", "--hosts", "me"), ("rollback", "--hosts", "me")):
        res = fleetctl("-i", str(inv), *argv, home=tmp_path, env=env)
        assert "fallback_archs" not in res.stdout + res.stderr, (argv, res.stdout + res.stderr)
        assert "Traceback" not in res.stderr
    dry = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--dry-run", home=tmp_path, env=env)
    assert "no GPU found" in dry.stdout and "building for fallback_archs 9.0a;12.0a" in dry.stdout, dry.stdout
    # -e archs: the note says what is built and why (fresh operator's trial: it named fallback_archs
    # 9.0a;12.0a, then only sm_90a was built)
    given = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--dry-run", "-e", "archs=9.0a", home=tmp_path, env=env)
    flat = " ".join(given.stdout.split())
    assert "no GPU found (no NVIDIA driver: a build host): building for 9.0a (-e archs=9.0a), not fallback_archs " \
           "9.0a;12.0a" in flat and "building for fallback_archs" not in flat, given.stdout


def _plan_lines(width: int, terminal: bool) -> list[str]:
    import io

    from rich.console import Console

    from fleetctl.reporting.plan_table import plan_rows, print_plan_table

    results = {
        "h1": {"status": "unreachable", "error": "connection refused by 127.0.0.1:1 (no sshd listening on that port)"},
        "h3": {"status": "failed", "error": "Build sgl-kernel: source tree /tmp/x/w3/sglang/python/sglang/kernels/aot "
               "is not a folder on the host (build_wheel src)",
               "tasks": [{"name": "Build sgl-kernel", "action": "build_wheel", "status": "failed", "msg":
               "source tree /tmp/x/w3/sglang/python/sglang/kernels/aot is not a folder on the host (build_wheel src)",
               "decision": {"action": "fail"}}]},
    }
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None, highlight=False)
    print_plan_table(console, "plan: p", plan_rows(results))
    return buf.getvalue().splitlines()


def test_plan_wraps_at_word_boundaries_never_inside_a_word():
    words = set("connection refused by 127.0.0.1:1 (no sshd listening on that port) source tree "
                "/tmp/x/w3/sglang/python/sglang/kernels/aot is not a folder on the host (build_wheel src)".split())
    for width in (60, 80, 100, 120, 160):
        lines = _plan_lines(width, terminal=True)
        assert all(len(line) <= width for line in lines), (width, lines)
        shown = {w for line in lines for w in line.replace("│", " ").replace("┃", " ").split()}
        assert "connectio" not in shown and "/tmp/x/w3/sglang/python/sglang/ke" not in shown, (width, lines)
        text = " ".join(lines)
        assert "/tmp/x/w3/sglang/python/sglang/kernels/aot" in text and "connection" in text, (width, lines)
        headers = set("host task action arch list class changed inputs / cause plan: p".split())
        assert not {w for w in shown - words - headers if any(o.startswith(w) for o in words)}, (width, lines)
    piped = _plan_lines(80, terminal=False)  # piped: each field whole on one line, for grep
    assert any(line.endswith("connection refused by 127.0.0.1:1 (no sshd listening on that port)") for line in piped)


def test_a_no_op_deploy_says_reused_whatever_the_connection():
    """The same decision in the same words: a class whose members all reuse their wheel is
    '(reused)', also when a member's wheel was pushed to it by an earlier run (as sbcast does
    for a Slurm class)."""
    from fleetctl.reporting.tables import build_classes

    def task(pushed_from=None, reused=True, status="ok"):
        data = {"key": "k" * 64, "reused": reused, "inputs": {"cuda": "13.0", "torch": "2.11.0", "python": "cp312"},
                "sass": ["sm_90a"], "decision": {"action": "reuse" if reused else "push"}}
        if pushed_from:
            data["wheel_from" if reused else "pushed_from"] = pushed_from
        return {"tasks": [{"action": "build_wheel", "status": status, "data": data}]}

    assert build_classes({"n1": task(), "n2": task("n1")}) == ["n[1-2] sm_90a cu13.0 torch2.11 cp312 (reused)"]
    pushed = build_classes({"n1": task(reused=False, status="changed"), "n2": task("n1", reused=False,
                                                                                   status="changed")})
    assert pushed == ["n[1-2] sm_90a cu13.0 torch2.11 cp312 (built on n1)"]
    # only a build that succeeded names its builder (new-user trial: every build failed, and the
    # line said "(built on gpu04)"; a push that failed on its receiver is not a build)
    def build_failed():
        r = task(reused=False, status="failed")
        r["tasks"][0]["data"]["decision"] = {"action": "fail"}
        return r
    failed = build_classes({"n1": build_failed(), "n2": build_failed()})
    assert failed == ["n[1-2] sm_90a cu13.0 torch2.11 cp312 (build failed on n[1-2])"]
    def push_failed():
        r = task(reused=False, status="failed")
        r["tasks"][0]["data"].update(decision={"action": "fail"}, role="push")
        return r
    # a member that never got the wheel is named apart, not folded into the hosts that have it
    # (fresh operator's trial: gpu03, refused for its disk, read "gpu[01-03] ... (built on gpu01)")
    assert build_classes({"n1": task(reused=False, status="changed"), "n2": push_failed()}) == [
        "n1 sm_90a cu13.0 torch2.11 cp312 (built on n1; not received on n2)"]
    assert build_classes({"n1": push_failed()}) == ["n1 sm_90a cu13.0 torch2.11 cp312 (not built)"]


def test_a_staged_deploy_tells_each_note_once(tmp_path):
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w, venv: {venv}}}\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: e\nhosts: all\ngather_facts: false\ntasks:\n  - name: hi\n    command: {argv: [echo, hi]}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(play), "--staged", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    notes = [line for line in res.stdout.splitlines() if line.startswith("me | note: ")]
    assert notes and any("adopts it as v1" in n for n in notes), res.stdout
    assert len(notes) == len(set(notes)), notes
    events = [json.loads(line) for line in (last_run(tmp_path) / "events.jsonl").read_text().splitlines()]
    told = [e["message"] for e in events if e["event"] == "note.added"]
    assert len(told) == len(set(told)), told


def test_a_first_copy_prints_no_probe_errors_into_the_host_log(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"f{i}.py").write_text(f"x = {i}\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w}}\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: c\nhosts: all\ngather_facts: false\ntasks:\n  - name: sources\n"
                    f"    copy: {{src: {src}, dest: {tmp_path}/dest}}\n")
    first = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(play), home=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    log = (last_run(tmp_path) / "logs" / "me.log").read_text()
    assert "No such file" not in log and "sha256sum:" not in log, log
    (src / "f3.py").write_text("x = 'changed'\n")
    (tmp_path / "dest" / "f7.py").unlink()
    again = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(play), "--json", home=tmp_path)
    task = json.loads(again.stdout)["hosts"]["me"]["tasks"][0]
    assert task["msg"] == "uploaded 2 of 30 files", task  # the hashes of the files there still count
    assert "No such file" not in (last_run(tmp_path) / "logs" / "me.log").read_text()


def test_a_deploys_causes_wrap_at_word_boundaries_on_a_terminal():
    import io

    from rich.console import Console

    from fleetctl.reporting.tables import print_summary

    error = "connection refused by 127.0.0.1:1 (no sshd listening on that port)"
    results = {"h1": {"status": "unreachable", "error": error, "duration_s": 0.1, "tasks": []}}
    for terminal in (True, False):
        buf = io.StringIO()
        console = Console(file=buf, width=60, force_terminal=terminal, color_system=None, soft_wrap=True)
        print_summary(console, results, "r1", fold=False, causes_below=True)
        lines = buf.getvalue().splitlines()
        cause = [line for line in lines if "UNREACHABLE" in line or line.startswith("    ")]
        if terminal:
            assert all(len(line) <= 60 for line in lines), lines
            assert " ".join(part.strip() for part in cause) == f"h1: UNREACHABLE: {error}", cause
        else:
            assert cause == [f"h1: UNREACHABLE: {error}"], lines


def test_a_missing_sgl_kernel_checkout_is_named_by_its_var_and_path(tmp_path):
    from tests.support.fleet import REPO

    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w, "
                   f"venv: {sys.prefix}}}\n")  # the venv running the tests (a worktree has no .venv)
    missing = tmp_path / "w" / "sglang" / "python" / "sglang" / "kernels" / "aot"
    # --dry-run: the check is a read-only probe, so the dry run predicts this failure (it showed the
    # check CHANGED and only the build's "source tree ... is not a folder" failing)
    for extra in ((), ("--tags", "build"), ("--dry-run",)):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(REPO / "playbooks" / "sgl-kernel.yaml"),
                       *extra, home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("me: FAILED")]
        assert line and f"sgl_kernel_dir: no sgl-kernel checkout at {missing}" in line[0], res.stdout
        assert "-e sgl_kernel_dir=PATH" in line[0] and "can't cd" not in res.stdout


def test_the_nightly_dry_run_predicts_the_missing_sglang_checkout_as_the_real_run_fails(tmp_path):
    """New-user trial: with no sglang checkout, the nightly's dry run marked `git pull` on the missing
    folder and the sgl-kernel check CHANGED and showed only the build failing; the real run failed at
    the pull (after the nightlies). Now both stop at the first task, with one line saying what to do."""
    from tests.support.fleet import REPO

    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w}}\n")
    repo = tmp_path / "w" / "sglang"
    for extra in (("--dry-run",), ()):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(REPO / "playbooks" / "nightly.yaml"),
                       "-e", "staged=false", *extra, home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        flat = " ".join(res.stdout.split())
        assert (f"me: FAILED: Check the sglang checkout (sgl_repo): sgl_repo: no git checkout at {repo}: clone "
                f"sglang there (git clone https://github.com/sgl-project/sglang {repo}), or give its folder with "
                "-e sgl_repo=PATH") in flat, res.stdout
        assert "pull" not in flat and "CHANGED" not in flat, res.stdout


def test_a_host_lost_mid_run_shows_the_tasks_that_ran_one_never_connected_none():
    """Fresh operator's trial: a host lost during its build showed an empty tasks column although
    facts and the upload were done. Its column shows the tasks that ran, the lost one ``U``; a host
    that never connected (its connect outcome alone) still shows none."""
    import io

    from rich.console import Console

    from fleetctl.reporting.tables import print_summary

    lost = "connection lost during task 'build kernels' (build_wheel): disconnected: Connection lost"
    results = {
        "hz": {"status": "unreachable", "error": lost, "duration_s": 25.0, "tasks": [
            {"name": "gather facts", "phase": "facts", "status": "ok"},
            {"name": "upload", "phase": "upload", "status": "changed"},
            {"name": "build kernels", "phase": "build", "status": "unreachable"}]},
        "hx": {"status": "unreachable", "error": "connection refused by 127.0.0.1:1", "duration_s": 0.1, "tasks": [
            {"name": "connect", "phase": "connect", "status": "unreachable"}]},
    }
    for fold in (False, True):
        buf = io.StringIO()
        print_summary(Console(file=buf, width=200, color_system=None), results, "r1", fold=fold)
        rows = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in buf.getvalue().splitlines()
                if line.startswith("│")}
        assert rows == {"hz": "OCU", "hx": ""}, buf.getvalue()
        assert f"hz: UNREACHABLE: {lost}" in buf.getvalue()


def test_plan_dry_run_and_deploy_fail_a_tree_the_patch_script_cannot_patch_at_the_patch_step(tmp_path):
    """Fresh trial: a tree with pyproject.toml and a CMakeLists.txt but no python/sgl_kernel/ passed
    the checkout check; --plan and --dry-run assumed the patch would succeed and failed later at the
    build's cutlass download, while the deploy failed at the patch. Now the patch script's own
    read-only run fails all three at the patch step, in the script's words."""
    from tests.support.fleet import REPO

    kdir = tmp_path / "tree"
    kdir.mkdir()
    (kdir / "pyproject.toml").write_text("[build-system]\nrequires = ['scikit-build-core']\n")
    (kdir / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.26)\nproject(sgl-kernel LANGUAGES CXX)\ninclude(FetchContent)\n"
        "FetchContent_Declare(repo-cutlass GIT_REPOSITORY https://github.com/NVIDIA/cutlass GIT_TAG v3.9.2)\n"
        "FetchContent_Populate(repo-cutlass)\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/w, "
                   f"venv: {sys.prefix}}}\n")
    expected = "Patch sgl-kernel (idempotent; files travel over SFTP, never inline): rc=2: " \
               "patch_sgl_kernel: error: no sgl-kernel source tree found: expected CMakeLists.txt and python/sgl_kernel/"
    for extra in (("--plan",), ("--dry-run",), ()):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "me", "--playbook", str(REPO / "playbooks" / "sgl-kernel.yaml"),
                       "-e", f"sgl_kernel_dir={kdir}", *extra, home=tmp_path, env={"COLUMNS": "1000"})
        assert res.returncode == 1, (extra, res.stdout + res.stderr)
        flat = " ".join(res.stdout.split())
        assert expected in flat and ("failed" if extra == ("--plan",) else "me: FAILED: Patch") in flat, res.stdout
        assert "cutlass" not in flat and "WOULD CHANGE Patch" not in flat, (extra, res.stdout)
    assert not (kdir / "python").exists() and sorted(p.name for p in kdir.iterdir()) == ["CMakeLists.txt", "pyproject.toml"]


def test_retry_failed_warns_of_failed_hosts_gone_from_the_inventory_and_retries_the_rest(tmp_path):
    """Operator trial: a failed host deleted from the inventory made ``--retry-failed`` refuse with
    ``pattern 'novenv1' matches no host`` (a pattern the operator never typed) and retry nothing. As
    Ansible's ``@.retry`` limit does: one warning naming the gone hosts and where the retry set came
    from, and the rest retried; none left is one clear line (exit 2)."""
    flag = tmp_path / "fixed"
    inv = tmp_path / "inv.yaml"
    hosts = {n: f"        {n}: {{ansible_connection: local, workdir: {tmp_path}/w{n}}}\n" for n in ("a1", "a2", "gone1")}

    def write(*names):
        inv.write_text("all:\n  children:\n    mine:\n      hosts:\n" + "".join(hosts[n] for n in names))

    write("a1", "a2", "gone1")
    play = tmp_path / "play.yaml"
    play.write_text("name: deploy\nhosts: mine\ngather_facts: false\ntasks:\n  - name: needs the fix but on a1\n"
                    "    command: {argv: [sh, -c, 'test \"$0\" = a1 || test -e \"$1\"', "
                    "'{{ host }}', " + json.dumps(str(flag)) + "]}\n")
    first = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), home=tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    first_id = last_run(tmp_path).name
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["failed_hosts"]) == ["a2", "gone1"]
    write("a1", "a2")  # gone1 decommissioned
    flag.touch()
    retry = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--retry-failed", home=tmp_path)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert sorted(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]) == ["a2"]
    warned = [line for line in retry.stderr.splitlines() if "gone1" in line]
    assert len(warned) == 1, retry.stderr
    assert "no longer in the inventory" in warned[0] and str(tmp_path / "runs" / ".retry-") in warned[0], warned
    assert "matches no host" not in retry.stderr
    # none of the named run's failed hosts left: one line, exit 2, nothing run
    write("a1")
    runs_before = len(list((tmp_path / "runs").iterdir()))
    none_left = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--retry-failed", first_id,
                         home=tmp_path)
    assert none_left.returncode == 2, none_left.stdout + none_left.stderr
    lines = none_left.stderr.strip().splitlines()
    assert len(lines) == 1 and "a2" in lines[0] and "gone1" in lines[0], lines
    assert "nothing to retry" in lines[0] and f"{first_id}/run.json" in lines[0] and str(inv) in lines[0], lines
    assert "matches no host" not in lines[0]
    assert len(list((tmp_path / "runs").iterdir())) == runs_before
