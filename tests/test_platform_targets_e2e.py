"""GPU hosts as they are really found (issue 23), over real sshd test hosts and real builds:

- an aarch64 node (GH200/GB200 class) beside an x86_64 node of the same SM, CUDA, torch and Python
  builds its own class: the platform is part of the build key, nothing is pushed across, and
  ``--plan`` names each class's platform;
- two inventory hosts whose venv is one folder (a shared file system) are refused, naming both
  hosts and the folder, alike in ``--plan``, ``--dry-run`` and the deploy.

How the aarch64 host is made, on an x86_64 test machine: ``setarch`` cannot claim aarch64 there
and ``uname`` cannot be changed, so the host's login environment (sshd ``SetEnv``) sets CPython's
own cross-platform variable ``_PYTHON_HOST_PLATFORM=linux-aarch64``. The facts script's interpreter
probe reads ``sysconfig.get_platform()`` as pip does, and everything on that host then really
behaves as on an aarch64 node: pip there refuses an x86_64 wheel ("is not a supported wheel on
this platform", checked below), and a build backend tags the host's wheels ``linux_aarch64``. The
facts script honours nothing of fleetctl's own for it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from fleetctl.reporting.plan_table import plan_rows
from tests.support.fake_gpu import H200, B200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import _plan_hosts
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

PLAY = """\
name: toy kernels
hosts: all
tasks:
  - name: Upload the toy sources
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/toy"}}
  - name: Build the toy wheel
    build_wheel: {{src: "{{{{ workdir }}}}/src/toy", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1, env: {{TOY_PLATFORM_WHEEL: "1"}},
                  archs: "{{{{ archs | default(none) }}}}"}}
    register: build
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
"""


def _setup(tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    return play


def _actions(hosts: dict) -> dict[str, str]:
    return {h: (r["builds"][0]["action"] if r["builds"] else r["status"]) for h, r in plan_rows(hosts).items()}


def _three(inv, play, tmp_path, pattern="fleet"):
    def deploy(*extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=900)

    plan_text = deploy("--plan")
    plan = deploy("--plan", "--json")
    dry = deploy("--dry-run", "--json")
    real = deploy("--json")
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    return plan_text, plan, dry, real, record


def test_an_aarch64_host_builds_its_own_class_and_no_x86_wheel_reaches_it(sshd_farm, tmp_path):
    play = _setup(tmp_path)
    hosts = {}
    for name, env in (("x86a", {}), ("x86b", {}), ("armA", {"_PYTHON_HOST_PLATFORM": "linux-aarch64"}),
                      ("armB", {"_PYTHON_HOST_PLATFORM": "linux-aarch64"})):
        h = sshd_farm.start(name, env=env)
        write_fake_nvidia_smi(h.bin_dir, [H200])  # one SM, CUDA, torch and Python for all four
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    facts = fleetctl("-i", str(inv), "facts", "--hosts", "armA:x86a", "--json", home=tmp_path, timeout_s=300)
    got = json.loads(facts.stdout)
    # the venvs' torch is a CPU build on hosts whose (fake) nvidia-smi lists a GPU: the shipped deploy
    # would refuse them, so their facts read failed (exit 1), naming it; this toy play never verifies
    assert facts.returncode == 1, facts.stderr
    for name in ("armA", "x86a"):
        assert got[name]["status"] == "failed" and "verify_device: cpu" in got[name]["error"], got[name]
    assert got["armA"]["python"]["platform"]["sysconfig"] == "linux-aarch64"
    assert got["x86a"]["python"]["platform"]["sysconfig"] == "linux-x86_64"

    plan_text, plan, dry, real, record = _three(inv, play, tmp_path)
    assert plan.returncode == dry.returncode == real.returncode == 0, real.stderr[-3000:]
    expected = {"x86a": "build", "x86b": "push", "armA": "build", "armB": "push"}
    planned = _actions(_plan_hosts(json.loads(plan.stdout)))
    dried = _actions(json.loads(dry.stdout)["hosts"])
    done = _actions(record["hosts"])
    assert planned == dried == done == expected, (planned, dried, done)
    # --plan's class lines name the platform
    classes = [line.strip() for line in plan_text.stdout.splitlines() if " (build on " in line]
    assert any("x86a,x86b" in c and "linux_x86_64 glibc" in c and "(build on x86a)" in c for c in classes), plan_text.stdout
    assert any("armA,armB" in c and "linux_aarch64 glibc" in c and "(build on armA)" in c for c in classes), plan_text.stdout
    # two builds, each class's own wheel: nothing x86 on the aarch64 hosts, nor the reverse
    wheels = {h: [t for t in r["tasks"] if t["action"] == "build_wheel"][0]["data"]["wheel"]
              for h, r in record["hosts"].items()}
    for h in ("armA", "armB"):
        assert wheels[h].endswith("-py3-none-linux_aarch64.whl"), wheels
        assert not list((tmp_path / "work" / h / "wheels").glob("*/*x86_64.whl"))
    for h in ("x86a", "x86b"):
        assert wheels[h].endswith("-py3-none-linux_x86_64.whl"), wheels
        assert not list((tmp_path / "work" / h / "wheels").glob("*/*aarch64.whl"))
    pushed = {h: [t for t in r["tasks"] if t["action"] == "build_wheel"][0]["data"].get("pushed_from")
              for h, r in record["hosts"].items()}
    assert pushed == {"x86a": None, "x86b": "x86a", "armA": None, "armB": "armA"}
    # the facts are the host's truth: pip on the aarch64 host refuses the x86_64 wheel
    refused = fleetctl("-i", str(inv), "run", "--hosts", "armA", "--", f"{hosts['armA']['venv']}/bin/python3", "-m",
                       "pip", "install", "--no-deps", "--dry-run", wheels["x86a"], home=tmp_path, timeout_s=300)
    assert refused.returncode == 1 and "is not a supported wheel on this platform" in refused.stdout + refused.stderr


def test_two_hosts_sharing_one_venv_are_refused_alike_in_plan_dry_run_and_deploy(sshd_farm, tmp_path):
    play = _setup(tmp_path)
    shared = make_host_venv(tmp_path / "nfs" / "rack1-venv")  # one folder both hosts see as their venv
    hosts = {}
    for name, gpu in (("rackA", H200), ("rackB", B200), ("solo", H200)):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [gpu])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": shared if name != "solo" else make_host_venv(tmp_path / "venv-solo")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    plan_text, plan, dry, real, record = _three(inv, play, tmp_path)
    assert plan.returncode == dry.returncode == real.returncode == 1
    expected = {"rackA": "fail", "rackB": "fail", "solo": "build"}
    planned = _actions(_plan_hosts(json.loads(plan.stdout)))
    dried = _actions(json.loads(dry.stdout)["hosts"])
    done = _actions(record["hosts"])
    assert planned == dried == done == expected, (planned, dried, done)
    line = (f"rackA and rackB share the venv {shared} (one {shared}/.fleetctl-id): one venv holds one wheel, so each "
            "host's install would replace the others' SM: give each host its own venv, or deploy once to one of them "
            "for all their GPUs (--hosts rackA -e archs='9.0a;10.0a')")
    for h in ("rackA", "rackB"):
        assert record["hosts"][h]["status"] == "failed"
        assert line in record["hosts"][h]["error"], record["hosts"][h]["error"]
        assert not (tmp_path / "work" / h / "src").exists()  # refused while planning: nothing uploaded
    assert record["hosts"]["solo"]["status"] == "ok"
    for h in ("rackA", "rackB"):  # --plan and --dry-run give the same one line
        assert line in json.loads(plan.stdout)[h]["error"]
        assert line in json.loads(dry.stdout)["hosts"][h]["error"]
    installed = subprocess.run([f"{shared}/bin/python3", "-c", "import toyfp4"], capture_output=True)
    assert installed.returncode != 0  # neither host installed into the shared venv
    solo = subprocess.run([f"{hosts['solo']['venv']}/bin/python3", "-c", "import toyfp4"], capture_output=True)
    assert solo.returncode == 0
    # the way out the line names: one deploy, from one of them, for both SMs
    once = fleetctl("-i", str(inv), "deploy", "--hosts", "rackA", "--playbook", str(play), "-e", "archs=9.0a;10.0a",
                    home=tmp_path, timeout_s=900)
    assert once.returncode == 0, once.stdout[-2000:] + once.stderr[-2000:]
    info = subprocess.run([f"{shared}/bin/python3", "-c", "import toyfp4; print(toyfp4.build_info()['archs'])"],
                          capture_output=True, text=True)
    assert info.stdout.strip() == "['sm_90a', 'sm_100a']", info
    # another run for rackB alone (its own SM only) would take rackA's SM out of the venv: refused,
    # by --plan too while rackB's wheel is not built yet, and by the deploy before building it
    refusal = (f"{shared} holds rackA's install for 9.0a;10.0a (toyfp4-0.1.0-py3-none-linux_x86_64.whl): this wheel "
               "for 10.0a would take 9.0a away from rackA, which shares the venv")
    planned = fleetctl("-i", str(inv), "deploy", "--hosts", "rackB", "--playbook", str(play), "--plan", "--json",
                       home=tmp_path, timeout_s=900)
    assert planned.returncode == 1, planned.stdout[-2000:] + planned.stderr[-2000:]
    assert refusal in json.loads(planned.stdout)["rackB"]["error"], planned.stdout
    alone = fleetctl("-i", str(inv), "deploy", "--hosts", "rackB", "--playbook", str(play), home=tmp_path, timeout_s=900)
    assert alone.returncode == 1
    error = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["rackB"]["error"]
    assert refusal in error, error
    assert not list((tmp_path / "work" / "rackB").glob("wheels/*/*.whl"))  # refused while planning: nothing built
    again = subprocess.run([f"{shared}/bin/python3", "-c", "import toyfp4; print(toyfp4.build_info()['archs'])"],
                           capture_output=True, text=True)
    assert again.stdout.strip() == "['sm_90a', 'sm_100a']", again


def _umask_077(host) -> tuple:
    """``umask 077`` in the login rc file of ``host``'s user (bash ``~/.bashrc``, zsh ``~/.zshenv``:
    what each reads for an ssh command), as hardened hosts set it; ``(file, its old text or None)``."""
    import pwd

    rc = Path(pwd.getpwnam(host.user).pw_dir) / (".bashrc" if "bash" in host.user else ".zshenv")
    old = rc.read_text() if rc.exists() else None
    rc.write_text((old or "") + "\numask 077\n")
    return rc, old


def test_two_users_with_umask_077_sharing_one_venv_are_refused_and_an_unreadable_id_fails_planning(sshd_farm, tmp_path):
    """Two inventory hosts logging in as different users (umask 077, a hardened host's) share one
    venv: the id file is made 0644 whatever the umask, so the second user reads the first one's id
    and both are refused; an id file the second user cannot read (0600, as older fleetctl made it)
    fails that host's planning naming the file and the user, never taken as "no id"."""
    import os
    import pwd

    play = tmp_path / "install.yaml"  # the install alone: its planner claims the venv before it probes anything
    play.write_text("name: install\nhosts: all\ntasks:\n  - name: Install the wheel\n"
                    "    pip_install: {wheel: /nowhere/toyfp4-0.1.0-py3-none-any.whl}\n")
    shared = sshd_farm.root / "nfs-venv"  # one folder both users may write, as a group's NFS venv
    shared.mkdir()
    shared.chmod(0o777)
    started = {name: sshd_farm.start(name, shell=shell) for name, shell in (("rackA", "bash"), ("rackB", "zsh"))}
    rcs = [_umask_077(h) for h in started.values()]
    try:
        hosts = {}
        for name, h in started.items():
            write_fake_nvidia_smi(h.bin_dir, [H200])
            hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "venv": str(shared),
                           "workdir": f"~/.fleetctl-{name}-{tmp_path.name}"}
        inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

        def plan(pattern: str):
            res = fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), "--plan", "--json",
                           home=tmp_path, timeout_s=300)
            return res, json.loads(res.stdout)

        res, doc = plan("fleet")
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        ident = shared / ".fleetctl-id"
        assert ident.stat().st_mode & 0o777 == 0o644  # umask 077 took nothing from it
        # both fail; a host refused while planning for a cause of its own (the wheel is not there)
        # goes on at once, its own cause its verdict (README, "Dead hosts delay no one"), so the share
        # is named on the host that planned second: it read the first one's id (0644 under umask 077)
        assert all(doc[h]["status"] == "failed" for h in ("rackA", "rackB")), doc
        share = f"rackA and rackB share the venv {shared} (one {ident})"
        assert [h for h in ("rackA", "rackB") if share in doc[h]["error"]], doc
        owner = pwd.getpwnam(started["rackA"].user)  # either user may have won the race to write it
        os.chown(ident, owner.pw_uid, owner.pw_gid)
        ident.chmod(0o600)  # as an older fleetctl made it under umask 077: only its writer (rackA's user) reads it
        res, doc = plan("rackB")
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        assert (f"{ident} exists but user {started['rackB'].user} cannot read it (Permission denied): is {shared} "
                "shared with another user or host?") in doc["rackB"]["error"], doc["rackB"]
    finally:
        for rc, old in rcs:
            rc.unlink() if old is None else rc.write_text(old)


def _tree(*roots: Path) -> dict:
    """Every entry under ``roots``: path -> (mode, uid, size, mtime in ns, sha256 of a file's bytes or a
    link's target): equal trees are byte-identical, an entry made and removed again changes its folder's mtime."""
    import hashlib
    import os

    out = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in [""] + dirs + files:
                p = Path(folder) / name
                st = p.lstat()
                body = (os.readlink(p) if p.is_symlink() else
                        hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
                out[str(p)] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, body)
    return out


def test_facts_writes_nothing_on_a_fresh_host_and_reads_an_existing_id(sshd_farm, tmp_path):
    """``fleetctl facts`` (like Ansible's setup module) changes nothing on a host: a fresh user's
    home folder (where the default workdir ~/.fleetctl/<host> would go) and venv are byte-identical
    after it; it reads an id a deploy left, and reports none when there is none."""
    import pwd

    h = sshd_farm.start("ro", shell="dash")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = sshd_farm.root / "venv-ro"  # the system's Python (one the test user may run), as users make venvs
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    entry = pwd.getpwnam(h.user)
    subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(venv)], check=True)  # the user's own venv
    home = Path(entry.pw_dir)
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"ro": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                     "venv": str(venv)}}})

    def facts() -> dict:
        res = fleetctl("-i", str(inv), "facts", "--hosts", "ro", "--json", home=tmp_path, timeout_s=300)
        # a bare venv (no torch, no pip): a deploy refuses the host, so its facts are failed (exit 1)
        got = json.loads(res.stdout)["ro"]
        assert res.returncode == 1 and "torch does not import" in got["error"], res.stdout[-2000:] + res.stderr[-2000:]
        return got

    before = _tree(home, venv)
    got = facts()
    assert _tree(home, venv) == before
    assert not (home / ".fleetctl").exists() and not (venv / ".fleetctl-id").exists()
    assert got["targets"]["venv"]["id"] is None and got["python"]["version"]
    (venv / ".fleetctl-id").write_text("0123456789abcdef0123456789abcdef\n")  # as a deploy leaves it
    before = _tree(home, venv)
    assert facts()["targets"]["venv"]["id"] == "0123456789abcdef0123456789abcdef"
    assert _tree(home, venv) == before


def test_plan_and_dry_run_make_the_workdir_and_the_ids_as_the_readme_says(tmp_path):
    """README: like Ansible's check mode (which still makes its remote temp folder), ``--plan`` and
    ``--dry-run`` make the host's workdir and ``.fleetctl-id`` in it and in an existing venv, so they
    find shared folders as the deploy does; only ``fleetctl facts`` writes nothing."""
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    for flag in ("--plan", "--dry-run"):
        workdir = tmp_path / f"wd{flag}"
        (venv / ".fleetctl-id").unlink(missing_ok=True)
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local", "venv": str(venv),
                                                                   "workdir": str(workdir)}}})
        res = fleetctl("-i", str(inv), "facts", "--hosts", "lh", "--json", home=tmp_path, timeout_s=300)
        # 1: a bare venv (no torch, no pip) is a host a deploy refuses, so its facts are failed
        assert res.returncode == 1 and not workdir.exists() and not (venv / ".fleetctl-id").exists(), res.stderr
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "lh", flag, home=tmp_path, timeout_s=300)
        assert res.returncode in (0, 1), res.stderr  # 1: the plan says what would fail (this venv has no pip)
        assert (venv / ".fleetctl-id").is_file() and workdir.is_dir(), flag
        assert (workdir / "runs" / last_run(tmp_path).name).is_dir(), flag


def test_a_venv_copied_with_cp_a_is_its_own_venv_not_one_shared_with_the_original(sshd_farm, tmp_path):
    """Operator trial: host ``a`` deployed into ~/venv, then ``cp -a ~/venv ~/venv-copy`` on the host
    and a second inventory host ``a2`` on the copy: ``deploy --hosts a,a2`` refused both (``a and a2
    share the venv``: the copy carries ``.fleetctl-id``), and a2 alone was refused by the install
    record copied with the venv (``venv-copy holds a's install``). Two folders: both are planned
    and installed into, alike in --plan, --dry-run and the deploy."""
    play = _setup(tmp_path)
    h = sshd_farm.start("a")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "venv")
    base = h.inventory_vars(sshd_farm.known_hosts)
    hosts = {"a": {**base, "workdir": str(tmp_path / "work" / "a"), "venv": venv}}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    first = fleetctl("-i", str(inv), "deploy", "--hosts", "a", "--playbook", str(play), home=tmp_path, timeout_s=900)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    copy = f"{venv}-copy"
    cp = fleetctl("-i", str(inv), "run", "--hosts", "a", "--", "cp", "-a", venv, copy, home=tmp_path, timeout_s=300)
    assert cp.returncode == 0 and (Path(copy) / ".fleetctl-id").read_text() == (Path(venv) / ".fleetctl-id").read_text()
    hosts["a2"] = {**base, "workdir": str(tmp_path / "work" / "a2"), "venv": copy}
    write_inventory(inv, {"fleet": hosts})

    def deploy(pattern: str, *extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=900)

    # a2 alone, for another SM: the record copied with the venv names a, whose install is in ~/venv
    alone = deploy("a2", "-e", "archs=8.0+PTX", "--plan", "--json")  # lacks the 9.0a of a's install
    assert alone.returncode == 0 and json.loads(alone.stdout)["a2"]["status"] != "failed", alone.stdout[-3000:]
    archs = ("-e", "archs=9.0a;10.0a")  # a new wheel: both venvs are installed into
    plan = deploy("fleet", *archs, "--plan", "--json")
    dry = deploy("fleet", *archs, "--dry-run", "--json")
    real = deploy("fleet", *archs, "--json")
    assert plan.returncode == dry.returncode == real.returncode == 0, (plan.stdout + real.stdout + real.stderr)[-4000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    assert "share the venv" not in plan.stdout + dry.stdout + real.stdout
    planned = _actions(_plan_hosts(json.loads(plan.stdout)))
    dried = _actions(json.loads(dry.stdout)["hosts"])
    done = _actions(record["hosts"])
    assert planned == dried == done and set(done) == {"a", "a2"} and "fail" not in done.values(), (planned, dried, done)
    installs = {n: [t for t in r["tasks"] if t["action"] == "pip_install"][0]["status"] for n, r in record["hosts"].items()}
    assert installs == {"a": "changed", "a2": "changed"}, installs
    for folder in (venv, copy):  # each venv holds the new wheel
        info = subprocess.run([f"{folder}/bin/python3", "-c", "import toyfp4; print(toyfp4.build_info()['archs'])"],
                              capture_output=True, text=True)
        assert info.stdout.strip() == "['sm_90a', 'sm_100a']", (folder, info)
    assert (Path(copy) / ".fleetctl-id").read_text() != (Path(venv) / ".fleetctl-id").read_text()


def test_facts_fail_two_logins_of_one_arch_sharing_a_venv_with_the_line_plan_refuses_them_with(sshd_farm, tmp_path):
    """Operator trial: two logins of one machine (bash and zsh users) on one group-writable venv,
    both H200 (one arch list): ``facts`` said ``s1: ok``, ``s2: ok`` while ``--plan`` refused them,
    and the refusal said each install would replace the others' SM, which one arch list cannot.
    Facts now run the plan's cross-host rule on the hosts they gathered: both ``failed`` with the
    line ``--plan`` gives, worded for hosts of one arch list."""
    from tests.test_venv_faults_e2e import _wheel

    started = {"s1": sshd_farm.start("s1", shell="bash"), "s2": sshd_farm.start("s2", shell="zsh")}
    venv = sshd_farm.root / f"shared-venv-{tmp_path.name}"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(["chmod", "-R", "a+rwX", str(venv)], check=True)  # both users may write it
    wheel = _wheel(sshd_farm.root / f"wheels-{tmp_path.name}")
    play = tmp_path / "install.yaml"
    play.write_text(f"name: install\nhosts: all\ntasks:\n  - name: Install the wheel\n    pip_install: {{wheel: {wheel}}}\n")
    hosts = {}
    for name, h in started.items():
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "venv": str(venv),
                       "workdir": f"~/.fleetctl-{name}-{tmp_path.name}"}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    line = (f"s1 and s2 share the venv {venv} (one {venv}/.fleetctl-id): all build for 9.0a, so one install serves "
            "them all, but each host's deploy would install it into that venv at the same time as the others' (pip "
            "does not lock a venv, so the installs would overwrite each other's files): give each host its own venv, "
            "or deploy once to one of them (--hosts s1)")
    try:
        res = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", "--json", home=tmp_path, timeout_s=300)
        assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
        facts = json.loads(res.stdout)
        for h in ("s1", "s2"):
            assert facts[h]["status"] == "failed", facts[h]
            assert f"warning: {line}; a deploy refuses this host until it is fixed" in facts[h]["warnings"], facts[h]
        text = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", home=tmp_path, timeout_s=300)
        assert text.returncode == 1 and f"warning: s1 and s2 share the venv {venv}" in text.stdout, text.stdout
        plan = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--plan", "--json",
                        home=tmp_path, timeout_s=300)
        assert plan.returncode == 1, plan.stdout[-2000:] + plan.stderr[-2000:]
        planned = json.loads(plan.stdout)
        assert [h for h in ("s1", "s2") if line in (planned[h].get("error") or "")], planned  # the same words
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_facts_of_two_hosts_on_one_venv_otherwise_fine_are_failed_with_the_share_as_their_error(tmp_path):
    """Two local hosts (the controller's user) on one venv with torch and pip: each alone is fine,
    so facts said ``ok`` for both; the venv they share makes both ``failed``, the share their
    error, and a third host on its own venv stays ``ok``. Hosts of two arch lists get the line
    that names the SM each install would take away."""
    venv = make_host_venv(tmp_path / "shared")
    hosts = {name: {"ansible_connection": "local", "venv": venv, "workdir": str(tmp_path / "work" / name),
                    "fallback_archs": archs} for name, archs in (("a", "9.0a"), ("b", "12.0a"))}
    hosts["c"] = {"ansible_connection": "local", "venv": make_host_venv(tmp_path / "own"),
                  "workdir": str(tmp_path / "work" / "c")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", "--json", home=tmp_path / "home", timeout_s=300)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    facts = json.loads(res.stdout)
    line = (f"a and b share the venv {venv} (one {venv}/.fleetctl-id): one venv holds one wheel, so each host's "
            f"install would replace the others' SM: give each host its own venv, or deploy once to one of them for "
            "all their GPUs (--hosts a -e archs='9.0a;12.0a')")
    for h in "ab":
        assert (facts[h]["status"], facts[h]["error"]) == ("failed", f"{line}; a deploy refuses this host until it is "
                                                                     "fixed"), facts[h]
    assert facts["c"]["status"] == "ok", facts["c"]
    # the live lines: the host that finishes second is failed at once; the first, whose line was out
    # before the second's facts showed the share, gets a line correcting it (no "ok" left standing)
    text = fleetctl("-i", str(inv), "facts", "--hosts", "fleet", home=tmp_path / "home", timeout_s=300)
    assert text.returncode == 1, text.stdout[-2000:] + text.stderr[-2000:]
    lines = text.stdout.splitlines()
    for h in "ab":
        said = [ln for ln in lines if ln.startswith((f"{h}: ok", f"{h}: WARNING (below)", f"{h}: FAILED ("))]
        assert said and said[-1].startswith(f"{h}: FAILED ("), (h, said)
    assert sum(1 for ln in lines if "FAILED (found after its line above; the cause below)" in ln) <= 1, lines
    assert any(ln.startswith("c: ok: ") for ln in lines), lines
