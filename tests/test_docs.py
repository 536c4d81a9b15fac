"""The documentation site (issue 25): the generated references equal what the code generates now,
every example they print parses with the real playbook parser, every action, argument, keyword,
command and option is in them, and the MkDocs build with warnings as errors passes, offline, and
really fails on a broken link or a missing API object."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from pydantic import Field

from fleetctl.docgen import PAGES, generate
from fleetctl.docgen.cli_ref import command_paths
from fleetctl.docgen.playbook_ref import EXAMPLE_PLAY, field_docs
from fleetctl.playbook import CONTROL_KEYS, INCLUDE_KEYS, PLAY_KEYS, load_playbook
from fleetctl.tasks import ACTIONS
from fleetctl.tasks.argtypes import ActionArgs
from fleetctl.tasks.base import Action
from tests.support.fleet import REPO, fleetctl, last_run

DOCS = REPO / "docs"
MKDOCS = [sys.executable, "-m", "mkdocs"]


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)


def _section(text: str, action: str) -> str:
    return text.split(f"\n### `{action}`\n", 1)[1].split("\n### ", 1)[0]


def test_generated_references_are_current():
    for page, text in generate().items():
        committed = (DOCS / page).read_text(encoding="utf-8")
        assert committed == text, f"docs/{page} is stale: run .venv/bin/python3 -m fleetctl.docgen docs"
    assert set(PAGES) == {"reference/playbook.md", "reference/cli.md"}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_each_actions_example_parses_with_the_real_parser(action, tmp_path):
    play = tmp_path / "play.yaml"
    play.write_text(EXAMPLE_PLAY.format(tasks=ACTIONS[action].example), encoding="utf-8")
    parsed = load_playbook(play)
    assert [t.action for t in parsed.tasks] == [action]


def test_every_example_the_page_prints_parses(tmp_path):
    text = (DOCS / "reference" / "playbook.md").read_text(encoding="utf-8")
    blocks = _yaml_blocks(text)
    assert len(blocks) == len(ACTIONS)
    for i, block in enumerate(blocks):
        play = tmp_path / f"play{i}.yaml"
        play.write_text(EXAMPLE_PLAY.format(tasks=block), encoding="utf-8")
        assert len(load_playbook(play).tasks) == 1


def test_the_playbook_reference_names_every_action_argument_and_keyword():
    text = (DOCS / "reference" / "playbook.md").read_text(encoding="utf-8")
    for name, action in ACTIONS.items():
        section = _section(text, name)
        for field in action.args.model_fields:
            assert f"| `{field}` |" in section, f"{name}.{field} missing from its section"
        assert "**`--plan` shows:**" in section and f"default deadline {action.timeout_s:g} s" in section
    for key in (*CONTROL_KEYS, *INCLUDE_KEYS, *PLAY_KEYS):
        assert f"| `{key}` |" in text, key
    # a real row: build_wheel's max_jobs with its type, default and meaning
    row = next(r for r in field_docs(ACTIONS["build_wheel"]) if r["name"] == "max_jobs")
    assert row["type"] == "int | None, >= 1" and row["default"] == "`null`" and "cores and memory" in row["meaning"]


def test_an_argument_without_meaning_or_an_action_without_example_is_refused():
    class Bare(ActionArgs):
        """``bare``: an action nobody documented.

        Attributes:
            known: documented.
        """

        known: int = 1
        unknown: str = "x"

    class Described(ActionArgs):
        """``described``: meaning from Field(description=...)."""

        size_mib: int = Field(default=4, description="how much, MiB")

    def plan(args, host):  # pragma: no cover - never run
        yield from ()

    with pytest.raises(ValueError, match=r"bare\.unknown: the argument has no meaning"):
        field_docs(Action(name="bare", args=Bare, phase="command", timeout_s=1.0, plan=plan))
    rows = field_docs(Action(name="described", args=Described, phase="command", timeout_s=1.0, plan=plan))
    assert rows == [{"name": "size_mib", "type": "int", "default": "`4`", "meaning": "how much, MiB"}]

    from fleetctl.docgen import playbook_ref

    nameless = Action(name="described", args=Described, phase="command", timeout_s=1.0, plan=plan)
    with pytest.raises(ValueError, match="lacks plan_shows or example"):
        playbook_ref.action_section(nameless)


def test_the_cli_reference_names_every_command_and_option():
    from fleetctl.cli import main

    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    paths = command_paths()
    assert {"fleetctl deploy", "fleetctl run", "fleetctl facts", "fleetctl runs show"} <= set(paths)
    for path in paths:
        assert re.search(rf"^#+ `{re.escape(path)}`$", text, re.M), path
        ctx = click.Context(main, info_name="fleetctl")
        cmd = main
        for word in path.split()[1:]:
            cmd = cmd.get_command(ctx, word)
            ctx = click.Context(cmd, info_name=word, parent=ctx)
        section = text.split(f"`{path}`\n", 1)[1]
        for param in cmd.get_params(ctx):
            if isinstance(param, click.Option) and param is not cmd.get_help_option(ctx) and not param.hidden:
                assert f"`{param.opts[0]}`" in section.split("\n#", 1)[0], (path, param.opts)
                assert (param.help or "").strip(), f"{path} {param.opts[0]}: the option has no help"
    # defaults and help come from click: deploy's --forks
    assert "| `--forks` | integer >= 1 <= 10000 | `50` | Hosts worked on at once. |" in text


def test_the_landing_page_opens_as_readme_does():
    def opening(text: str) -> str:
        return " ".join(text.split("\n\n", 2)[1].split())

    assert opening((DOCS / "index.md").read_text()) == opening((REPO / "README.md").read_text())


def test_the_facts_contract_names_every_key_a_real_host_reports(tmp_path):
    """docs/contracts.md's facts table against ``fleetctl facts --json`` on this machine."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/work}}\n")
    res = fleetctl("-i", str(inv), "facts", "--hosts", "me", "--json", home=tmp_path / "home")
    facts = json.loads(res.stdout)["me"]
    table = (DOCS / "contracts.md").read_text().split("## Facts", 1)[1].split("\n## ", 1)[0]
    named = {word for span in re.findall(r"`([^`]+)`", table) for word in re.findall(r"[a-z_]+", span)}
    missing = sorted(k for k in facts if k not in named)
    assert missing == [], f"docs/contracts.md's facts table lacks {missing}"


def test_no_reference_to_a_design_md_the_repository_lacks():
    files = [REPO / "README.md", *REPO.glob("fleetctl/**/*.py"), *REPO.glob("playbooks/**/*.py"),
             *REPO.glob("docs/*.md")]
    found = [str(p.relative_to(REPO)) for p in files if "DESIGN.md" in p.read_text(encoding="utf-8")]
    assert found == []
    assert not (REPO / "DESIGN.md").exists()


def _build(config: Path, site: Path, *, offline: bool = False) -> subprocess.CompletedProcess:
    argv = [*MKDOCS, "build", "--strict", "-f", str(config), "-d", str(site)]
    if offline:  # a new network namespace (only lo, down): nothing can be fetched
        import os

        user_ns = [] if os.geteuid() == 0 else ["--map-root-user"]
        argv = [shutil.which("unshare") or "unshare", *user_ns, "--net", *argv]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_the_docs_build_strict_and_offline(tmp_path):
    res = _build(REPO / "mkdocs.yml", tmp_path / "site", offline=True)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARNING" not in res.stderr, res.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "RunModel" in api and "InputError" in api and "load_playbook" in api
    # new-user trial: Hosts' attributes (property(lambda ..., doc=...)) were missing from the page
    for attr in ("fleet", "pattern", "limit", "names", "aio"):
        assert re.search(rf'id="fleetctl\.api\.hosts(_sync)?\.Hosts\.{attr}"', api), attr
    playbook = (tmp_path / "site" / "reference" / "playbook" / "index.html").read_text(encoding="utf-8")
    assert 'id="build_wheel"' in playbook and "<code>int &#124; None</code>" in playbook


def test_the_strict_build_fails_on_a_broken_link_and_a_missing_api_object(tmp_path):
    """The gate can fail: the same configuration's strictness over a page with a broken link, and
    over a page whose mkdocstrings directive names an object that does not exist."""
    for i, page in enumerate(["See [the missing page](missing.md).\n", "::: fleetctl.no_such_module\n"]):
        site = tmp_path / f"s{i}"
        docs = site / "docs"
        docs.mkdir(parents=True)
        (docs / "index.md").write_text(f"# t\n\n{page}", encoding="utf-8")
        config = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[0]
        config = config.replace("docs_dir: docs", f"docs_dir: {docs}").replace("paths: [.]", f"paths: [{REPO}]")
        (site / "mkdocs.yml").write_text(config, encoding="utf-8")
        res = _build(site / "mkdocs.yml", site / "out")
        assert res.returncode != 0, (page, res.stderr[-2000:])
        assert "missing.md" in res.stderr or "no_such_module" in res.stderr, res.stderr[-2000:]


#: The actions whose examples run as one play on a ``local`` host without a GPU stack or a build.
_LOCAL_ACTIONS = ("copy", "script", "command", "shell", "debug", "fail")


def _shown_word(row: dict) -> str:
    """What ``--plan``'s table prints in its action column for a task row of a play without builds
    (:func:`fleetctl.reporting.plan_table.print_plan_table`)."""
    return str((row.get("decision") or {}).get("action") or row["status"])


def test_what_the_reference_says_plan_shows_is_what_plan_shows(tmp_path):
    """The examples of the actions that need no GPU, as one play on a local host: ``--plan --json``
    shows for each task a word its action's ``plan_shows`` names, and ``--dry-run`` gives every task
    the same status as ``--plan`` (the same planners)."""
    play_dir = tmp_path / "play"
    (play_dir / "scripts").mkdir(parents=True)
    (play_dir / "scripts" / "check_gpus.py").write_text("print('ok')\n")
    (tmp_path / "kernel_src").mkdir()
    (tmp_path / "kernel_src" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    play = play_dir / "play.yaml"
    play.write_text(EXAMPLE_PLAY.format(tasks="".join(ACTIONS[a].example for a in _LOCAL_ACTIONS)))
    home = tmp_path / "home"
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"all:\n  hosts:\n    me: {{ansible_connection: local, workdir: {tmp_path}/work}}\n")
    planned = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", "--plan", "--json",
                       home=home)
    rows = json.loads(planned.stdout)["me"]["tasks"]
    assert [r["action"] for r in rows] == list(_LOCAL_ACTIONS), planned.stderr[-2000:]
    for row in rows:
        word = _shown_word(row)
        assert f"`{word}`" in ACTIONS[row["action"]].plan_shows, (row, ACTIONS[row["action"]].plan_shows)
    # a plan says what WOULD happen, never that it happened (fresh operator's trial: "changed",
    # "uploaded 1 of 1 files"), and does nothing
    upload = next(r for r in rows if r["action"] == "copy")
    assert (upload["status"], upload["msg"]) == ("would change", "would upload 1 of 1 files"), upload
    assert "changed" not in {r["status"] for r in rows}, rows
    assert not (tmp_path / "work" / "src").exists()
    dry = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "me", "--dry-run", "--json",
                   home=home)
    record = json.loads((last_run(home) / "run.json").read_text())
    statuses = {t["name"]: t["status"] for t in record["hosts"]["me"]["tasks"] if t.get("action") != "facts"}
    # the same planners: a dry run's simulated change is the plan's "would change"
    assert {t: "would change" if s == "changed" else s for t, s in statuses.items()} == \
        {r["task"]: r["status"] for r in rows}, dry.stderr[-2000:]


def test_the_architecture_pages_example_action_documents_itself():
    """docs/architecture.md's ``touch`` action, run as written: its reference section has its
    argument with type, default and meaning, what --plan shows, and its example."""
    from fleetctl.docgen import playbook_ref

    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace = {"__name__": "fleetctl.tasks.touch", "__package__": "fleetctl.tasks"}
    exec(compile(code, "docs/architecture.md", "exec"), namespace)
    section = "\n".join(playbook_ref.action_section(namespace["ACTION"]))
    assert "| `path` | `str, non-empty` | required | remote path of the file |" in section
    assert "**`--plan` shows:** `changed` when it creates the file" in section
    assert "touch: {path: /var/tmp/provisioned}" in section


def test_readme_and_the_slurm_page_say_how_many_allocations_a_run_holds():
    """New-user trial: README said "A run holds one allocation" while docs/slurm.md (and the Slurm
    kind: fleetctl/connection/slurm.py) make one job per request of idle nodes (GRES list included:
    tests/test_slurm_e2e.py::test_allocation_is_released_at_the_end_and_steps_overlap holds two on
    the test cluster), at most MAX_NODES_PER_JOB nodes a job, and one per busy node."""
    from fleetctl.connection.slurm import MAX_NODES_PER_JOB

    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    slurm = " ".join((DOCS / "slurm.md").read_text(encoding="utf-8").split())
    for name, text in (("README.md", readme), ("docs/slurm.md", slurm)):
        assert not re.search(r"holds (\*\*)?one (\*\*)?allocation", text), f"{name} says a run holds one allocation"
        assert f"at most {MAX_NODES_PER_JOB} nodes a job" in text, name
    said = readme.split("A run holds its nodes as Slurm jobs", 1)[1].split("Slurm's reason", 1)[0]
    for part in ("one job for the idle nodes that share a request", "GRES list", "busy with other work",
                 "one `sbcast` per job", "released at the end, on failure and on Ctrl-C"):
        assert part in said, part


def test_every_python_example_of_the_api_page_runs_as_printed_against_the_shipped_inventory(tmp_path):
    """docs/api.md's examples, run as printed from a folder holding the shipped inventory.yaml,
    playbooks/ and kernel_src/: an example host pattern naming a host the inventory lacks raised
    PatternError (``gpu-nodes:!gpu03``; the refusal stays: a typo in an exclusion must not deploy to
    the host meant to be excluded). The example hosts do not resolve, so each is unreachable in
    the results, never an exception. Host names the prose indexes results by must be hosts too."""
    text = (DOCS / "api.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert blocks
    shutil.copy(REPO / "inventory.yaml", tmp_path / "inventory.yaml")
    for folder in ("playbooks", "kernel_src"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    named = re.findall(r'res\["([^"]+)"\]', text)
    check = "\n".join(f"assert res[{h!r}].status" for h in named)
    for block in blocks:
        proc = subprocess.run([sys.executable, "-c", block + "\n" + check], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "FLEETCTL_HOME": str(tmp_path / "state")})
        assert proc.returncode == 0, block + "\n" + proc.stderr[-3000:]


def test_readme_and_inventory_page_say_a_legacy_and_modern_name_together_are_refused(tmp_path):
    """New-user trial: README said the legacy ``ansible_ssh_*`` names "win wherever they are set, as
    in Ansible" while fleetctl refuses a host setting both to different values (exit 2,
    fleetctl/inventory/merge.py ``_alias_conflicts``; ansible-core's ``MAGIC_VARIABLE_MAPPING`` would
    silently use the legacy one). Both pages must say what fleetctl does, checked against it here."""
    from fleetctl.errors import InventoryError
    from fleetctl.inventory import load_inventory

    inv_path = tmp_path / "inv.yaml"
    inv_path.write_text("all:\n  hosts:\n    n1: {ansible_ssh_port: 2201, ansible_port: 2202}\n"
                        "    n2: {ansible_ssh_port: 2203}\n")
    inv = load_inventory(inv_path)
    with pytest.raises(InventoryError, match="keep one"):
        inv.check_hosts(inv.select("n1"))
    inv.check_hosts(inv.select("n2"))
    assert inv.hosts["n2"].port == 2203  # a legacy name alone is read
    for name in ("README.md", "docs/inventory.md"):
        text = " ".join((REPO / name).read_text(encoding="utf-8").split())
        assert not re.search(r"win(s|ning)? wherever (they are|it is) set", text), name
        assert re.search(r"sets? (both|a legacy name and its modern one) to different values is refused", text), name


def test_the_home_folder_page_names_every_folder_fleetctl_writes_under_state_and_cache():
    """docs/files.md is the one list of what fleetctl writes under ~ (new-user trial: probes/ and
    sass-check/ in ~/.cache/fleetctl were in no doc): every ``cache_dir() / "X"`` and
    ``state_dir() / "X"`` in the code, and the schedule's files, are named on it."""
    page = (DOCS / "files.md").read_text(encoding="utf-8")
    code = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "fleetctl").rglob("*.py"))
    found = set(re.findall(r"(?:cache_dir|state_dir)\(\) / \"([^\"]+)\"", code))
    assert {"wheels", "probes", "sass-check", "fetchdeps", "runs"} <= found, found
    for name in found:
        assert re.search(rf"`<(?:cache|state)>/{re.escape(name)}[/`.]", page), name
    for name in ("locks", "schedule", "cron.log", "tmp/<key16>", "~/.cache/uv", "~/.config/systemd/user"):
        assert name in page, name
    assert "docs/files.md" in (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_says_runs_timeout_and_copys_host_placeholder(tmp_path):
    """Operator trial: README's command table did not say that ``run`` stops a command after 600 s
    (nor how to change it), and only ``fetch`` documented ``{host}``, which ``copy`` replaces in
    DEST too; ``run --json`` carries the words the CLI and the API use (checked on a real run)."""
    from fleetctl.cli.adhoc import run

    rows: dict[str, str] = {}
    for m in re.finditer(r"^\| `fleetctl (\w+)[^|]*\| (.*) \|$", (REPO / "README.md").read_text(encoding="utf-8"),
                         re.M):
        rows.setdefault(m.group(1), m.group(2))  # the command's first row
    timeout = next(p for p in run.params if p.name == "timeout_s")
    assert f"{timeout.default:g} s" in rows["run"] and "--timeout SECONDS" in rows["run"], rows["run"]
    assert "`{host}` in DEST" in rows["copy"], rows["copy"]
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n    lh:\n      ansible_connection: local\n")
    doc = json.loads(fleetctl("-i", str(inv), "run", "--hosts", "all", "--json", "--", "true", home=tmp_path).stdout)
    assert doc["lh"]["status"] == "ok" and "`ok`, `failed`, `unreachable`" in rows["run"], doc


def test_every_argument_of_an_api_operation_is_in_its_docstrings_args():
    """New-user trial: the API page's Args of ``facts`` (forks, observers), ``fetch`` (src, dest,
    timeout...), ``verify`` and ``rollback`` left arguments out. Every argument of each public
    AsyncHosts operation (the sync Hosts ones point at them) is named in its Args section."""
    import inspect

    from fleetctl.api.hosts import AsyncHosts

    missing = []
    for name, fn in inspect.getmembers(AsyncHosts, inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue
        doc = inspect.getdoc(fn) or ""
        args = doc.split("Args:", 1)[1].split("Returns:", 1)[0] if "Args:" in doc else ""
        missing += [f"{name}({p})" for p in inspect.signature(fn).parameters if p != "self"
                    and not re.search(rf"^\s+{p}:", args, re.M)]
    assert missing == []
