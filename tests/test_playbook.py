"""Pure data tests of the playbook model: loading, validation messages, templating, tags.

Error cases are data: every file in ``tests/data/playbooks/errors/`` starts with
``# expect: MESSAGE``, the exact one line ``str(PlaybookError)`` must be (``{file}`` and ``{dir}``
stand for the file's path and folder); ``# expect-prefix:`` checks the start only, for messages
whose wording belongs to :mod:`fleetctl.util.yamlload`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fleetctl.playbook import templating
from fleetctl.tasks import ACTIONS
from fleetctl.tasks.build_wheel import BuildWheelArgs
from fleetctl.tasks.command import CommandArgs
from fleetctl.tasks.copy import CopyArgs
from fleetctl.tasks.script import ScriptArgs
from fleetctl.tasks.verify import VerifyArgs

COMMAND_ACTIONS = {name for name, a in ACTIONS.items() if a.runs_commands}
from fleetctl.errors import PlaybookError
from fleetctl.playbook import Playbook, load_playbook
from fleetctl.playbook import RenderError, check_undefined, evaluate_when, render, render_vars

DATA = Path(__file__).parent / "data" / "playbooks"
ERROR_FILES = sorted((DATA / "errors").glob("*.yaml"))


def write(tmp_path: Path, text: str, name: str = "play.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path, **kwargs) -> PlaybookError:
    with pytest.raises(PlaybookError) as info:
        load_playbook(path, **kwargs)
    return info.value


# -- valid playbooks -------------------------------------------------------------------------------


def test_valid_playbook_model():
    pb = load_playbook(DATA / "valid.yaml", known_names=())
    assert isinstance(pb, Playbook)
    assert pb.name == "Build and install FP4 kernels"
    assert pb.hosts == "gpu-nodes"
    assert pb.playbook_dir == DATA
    assert pb.vars["symbols"] == ["scaled_fp4_quant", "dequantize_fp4"]
    assert [t.action for t in pb.tasks] == [
        "copy", "script", "command", "shell", "build_wheel", "pip_install", "verify", "debug",
    ]
    assert [t.line for t in pb.tasks] == [9, 15, 21, 28, 34, 47, 51, 56]
    assert [t.index for t in pb.tasks] == list(range(8))
    assert len(pb.sha256) == 64

    upload, patch, listing, shell, build, install, verify, never = pb.tasks
    assert upload.label == "tasks[0] (upload sources)"
    assert isinstance(upload.args, CopyArgs)
    assert upload.args.mode == 0o755
    assert upload.timeout_s == 300
    assert upload.tags == {"build"}

    assert isinstance(patch.args, ScriptArgs)
    assert patch.args.args == ["{{ src_dir }}", "3"]  # numbers become strings
    assert patch.env == {"CUDA_HOME": "{{ facts.cuda.home }}"}

    assert isinstance(listing.args, CommandArgs)
    assert listing.args.creates == "/tmp/x"
    assert (listing.register, listing.retries, listing.delay_s) == ("listing", 2, 1.5)

    assert shell.name is None and shell.label == "tasks[3]" and shell.display_name == "shell"
    assert shell.when == ("listing.rc == 0", "facts.gpus | length > 0")
    assert shell.ignore_errors is True

    assert isinstance(build.args, BuildWheelArgs)
    assert build.timeout_s == 3600
    assert build.args.cmake_defines == {"SGL_KERNEL_ENABLE_FA3": "OFF", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"}
    assert build.args.max_jobs == "{{ facts.build.max_jobs }}"  # rendered per host by resolve_args
    assert build.args.required_build_packages == []  # the package's own pyproject says what it needs
    assert (build.args.min_cmake, build.args.min_free_disk_mib, build.args.tool) == (None, 2048, "auto")
    assert build.notify == ("report",)

    assert install.timeout_s == 900 and install.args.force_reinstall and install.args.no_deps
    assert isinstance(verify.args, VerifyArgs) and verify.args.smoke and verify.args.script is None
    assert never.args.msg == "{{ build }}" and never.tags == {"never", "debug"}

    assert [h.name for h in pb.handlers] == ["report"]
    assert pb.handler("report").line == 60
    assert pb.registered_names == ["listing", "build"]
    assert pb.local_path("../kernel_src") == (DATA / "../kernel_src").absolute()


def test_list_form_and_play_options():
    pb = load_playbook(DATA / "list_form.yaml")
    assert pb.name == "list form"
    assert pb.hosts == "gpu-nodes:!bad"
    assert (pb.serial, pb.max_fail_percentage, pb.gather_facts) == ("25%", 50.0, False)
    (task,) = pb.tasks
    assert task.args.argv == ["nvidia-smi", "-L"]  # command: [..] shorthand
    assert task.tags == {"probe", "gpu"}  # "a, b" splits on commas
    assert task.line == 8


def test_include_tasks_inlines_with_when_and_tags():
    pb = load_playbook(DATA / "with_include.yaml", known_names=())
    labels = [(Path(t.file).name, t.label, t.line) for t in pb.tasks]
    assert labels == [
        ("with_include.yaml", "tasks[0]", 3),
        ("common.yaml", "tasks[0] (common one)", 1),
        ("nested.yaml", "tasks[0] (nested)", 1),
        ("with_include.yaml", "tasks[2]", 8),
    ]
    assert pb.tasks[1].when == ("facts.gpus | length > 0", "true")
    assert pb.tasks[2].tags == {"common", "deep"}
    assert [t.index for t in pb.tasks] == [0, 1, 2, 3]


def test_include_cycle_is_an_error():
    err = error_of(DATA / "include_cycle.yaml")
    inc = DATA / "include"
    assert str(err) == (
        f"{inc / 'cycle_b.yaml'}:2: tasks[1].include_tasks: {inc / 'cycle_a.yaml'} includes itself "
        "(include_cycle.yaml -> cycle_a.yaml -> cycle_b.yaml -> cycle_a.yaml)"
    )


def test_every_action_has_a_finite_default_timeout(tmp_path):
    expected = {"command": 600, "shell": 600, "script": 600, "copy": 300, "build_wheel": 7200,
                "pip_install": 900, "verify": 600, "venv_stage": 1800, "venv_upgrade": 3600, "venv_switch": 600}
    for action, timeout_s in expected.items():
        assert ACTIONS[action].timeout_s == timeout_s
        model, default = ACTIONS[action].args, ACTIONS[action].timeout_s
        assert default == timeout_s and model.model_config["extra"] == "forbid"
    assert COMMAND_ACTIONS == {"script", "command", "shell", "build_wheel", "pip_install", "verify", "venv_stage",
                               "venv_upgrade", "venv_switch"}
    pb = load_playbook(write(tmp_path, "tasks:\n  - fail: {msg: stop}\n  - debug:\n"))
    assert [t.timeout_s for t in pb.tasks] == [60, 60]
    assert pb.tasks[1].args.msg == ""


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ERROR_FILES, ids=[p.stem for p in ERROR_FILES])
def test_error_message(path: Path):
    first = path.read_text().splitlines()[0]
    prefix_only = first.startswith("# expect-prefix: ")  # wording owned by fleetctl.util.yamlload
    expected = first.split(": ", 1)[1].replace("{file}", str(path)).replace("{dir}", str(path.parent))
    err = error_of(path, known_names={"inventory_var"})
    if prefix_only:
        assert str(err).startswith(expected)
    else:
        assert str(err) == expected
    assert "\n" not in str(err)
    assert err.file == str(path) or "include" in path.stem


def test_error_attributes(tmp_path):
    path = write(tmp_path, "tasks:\n  - name: up\n    copy: {src: a, dest: /b, mdoe: 1}\n")
    err = error_of(path)
    assert (err.file, err.line, err.key) == (str(path), 3, "tasks[0] (up).copy.mdoe")
    assert err.message == "unknown argument (did you mean 'mode'?)"


def test_missing_file(tmp_path):
    err = error_of(tmp_path / "nope.yaml")
    assert str(err) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_undefined_check_is_opt_in(tmp_path):
    path = write(tmp_path, "tasks:\n  - debug: '{{ gpu_arch }}'\n")
    load_playbook(path)  # no known names given: no static check
    load_playbook(path, known_names={"gpu_arch"})
    assert str(error_of(path, known_names=())) == f"{path}:2: tasks[0].debug: undefined variable 'gpu_arch'"


def test_undefined_check_known_names(tmp_path):
    path = write(tmp_path, """\
vars:
  src: "{{ workdir }}/src"
  dist: "{{ src }}/dist"
  workdir: "{{ workdir }}/override"
tasks:
  - name: "build on {{ host }}"
    shell: "cd {{ src }} && {{ python }} -m build {{ run_dir }} {{ run_id }} {{ venv }} {{ playbook_dir }}"
    when: facts.cpu_count > 1 and range(3) | length == 3
    env: {OUT: "{{ dist }}"}
    register: built
  - debug: "{{ built.rc }} {{ maybe | default('x') }} {{ other.x | d(1) }}"
    when: [later is not defined, true]
  - debug: "{% for g in facts.gpus %}{{ g.index }}{{ loop.index }}{% endfor %}{% set y = 1 %}{{ y }}"
handlers:
  - name: h
    debug: "{{ built }} {{ late }}"
  - debug: x
    name: h2
    register: late
""")
    with pytest.raises(PlaybookError) as info:
        check_undefined(load_playbook(path), ())
    # handlers see registered names of tasks and of *earlier* handlers only
    assert str(info.value) == f"{path}:16: handlers[0] (h).debug: undefined variable 'late'"


def test_undefined_names_in_name_and_env(tmp_path):
    path = write(tmp_path, "tasks:\n  - name: 'x {{ whoami }}'\n    shell: id\n")
    assert str(error_of(path, known_names=())) == f"{path}:2: tasks[0] (x {{{{ whoami }}}}).name: undefined variable 'whoami'"
    path = write(tmp_path, "tasks:\n  - shell: id\n    env:\n      A: '{{ venvv }}'\n")
    assert str(error_of(path, known_names=())) == (
        f"{path}:4: tasks[0].env.A: undefined variable 'venvv' (did you mean 'venv'?)"
    )


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        ("    copy: {src: a, dest: /b, mode: 99999}", "tasks[0].copy.mode: mode must be between 0 and 07777, got 99999"),
        ("    script: {src: s.py, env: {X: true}}",
         "tasks[0].script.env: environment variable X must be a string, got boolean True (quote it)"),
        ("    script: {src: s.py, env: {1X: a}}", "tasks[0].script.env: invalid environment variable name '1X'"),
        ("    build_wheel: {src: /s, out_dir: /o, archs: '9.0;sm_120'}",
         "tasks[0].build_wheel.archs: archs must look like '9.0a;12.0a' (compute capabilities with an optional "
         "a/f suffix, ';'-separated), got '9.0;sm_120'; did you mean '9.0;12.0'?"),
        ("    verify: {package: fp4-kernels}",
         "tasks[0].verify.package: package must be an import name such as 'fp4_kernels', got 'fp4-kernels'"),
        ("    verify: {package: p, symbols: a}", "tasks[0].verify.symbols: symbols must be a list of names"),
        ("    shell: {cmd: ''}", "tasks[0].shell.cmd: cmd must not be empty"),
        ("    copy: [a, b]", "tasks[0].copy: arguments of 'copy' must be a mapping, got a list"),
        ("    command: {argv: [ls, [x]]}", "tasks[0].command.argv[1]: input should be a valid string, got ['x']"),
        ("    shell: ls\n    tags: {a: 1}", "tasks[0].tags: must be a tag or a list of tags, got {'a': 1}"),
        ("    shell: ls\n    when: 3", "tasks[0].when: must be an expression string or a list of them, got 3"),
        ("    shell: ls\n    timeout: .inf", "tasks[0].timeout: must be a number of seconds > 0, got inf"),
        ("    shell: ls\n    delay: -1", "tasks[0].delay: must be a number of seconds >= 0, got -1"),
        ("    shell: ls\n    ignore_errors: 'yes'", "tasks[0].ignore_errors: must be true or false, got 'yes'"),
        ("    shell: ls\n    register: facts", "tasks[0].register: 'facts' is set by fleetctl and cannot be registered"),
        ("    shell: ls\n    notify: x", "tasks[0].notify: unknown handler 'x' (the play has no handlers)"),
        ("    shell: ls\n    become: 1", "tasks[0].become: must be true or false, got 1"),
        ("    shell: ls\n    env: [A]", "tasks[0].env: must be a mapping of NAME: value, got a list"),
        ("    shell: '{{ x | nosuchfilter }}'", "tasks[0].shell: template syntax error: No filter named 'nosuchfilter'."),
        ("    command: [ls, [x]]", "tasks[0].command[1]: input should be a valid string, got ['x']"),
        ("    command:\n      - ls\n      - {a: 1}", "tasks[0].command[1]: input should be a valid string, got {'a': 1}"),
        ("    debug: x\n    include_tasks: y.yaml", "tasks[0].include_tasks: two actions in one task: 'debug' and 'include_tasks' (a task has exactly one)"),
        ("    include_tasks: y.yaml\n    register: r", "tasks[0].register: 'register' cannot be used with include_tasks (only name, when, tags)"),
        ("    include_tasks: '{{ f }}'", "tasks[0].include_tasks: must be a static file path (templates are not allowed here)"),
    ],
)
def test_task_error_messages(tmp_path, snippet, message):
    path = write(tmp_path, "tasks:\n  -\n" + snippet + "\n")
    err = error_of(path)
    assert str(err) == f"{path}:{err.line}: {message}"
    assert err.line >= 3


def test_included_file_errors_name_the_included_file(tmp_path):
    write(tmp_path, "- debug: ok\n- shell: {cmd: ls, shel: x}\n", "inc.yaml")
    path = write(tmp_path, "tasks:\n  - include_tasks: inc.yaml\n")
    err = error_of(path)
    assert err.file == str(tmp_path / "inc.yaml") and err.line == 2 and err.key == "tasks[1].shell.shel"
    write(tmp_path, "debug: no\n", "inc.yaml")
    assert str(error_of(path)) == f"{tmp_path / 'inc.yaml'}:1: an included file must hold a list of tasks, got a mapping"


def test_handlers_unique_and_notify_between_handlers(tmp_path):
    path = write(tmp_path, "tasks: []\nhandlers:\n  - {name: a, debug: x, notify: b}\n  - {name: b, debug: y}\n")
    assert load_playbook(path).handlers[0].notify == ("b",)
    path = write(tmp_path, "tasks: []\nhandlers:\n  - {name: a, debug: x}\n  - {name: a, debug: y}\n")
    assert str(error_of(path)) == f"{path}:4: handlers[1] (a).name: duplicate handler name 'a'"


# -- templating ------------------------------------------------------------------------------------

CTX = {
    "host": "n1",
    "workdir": "/w",
    "jobs": 8,
    "facts": {"gpus": [{"index": 0, "compute_cap": "12.0"}], "cuda": {"version": "13.0"}, "cpu_count": 64},
    "flags": ["-O3", "-g"],
}


def test_render_native_values():
    assert render("{{ jobs }}", CTX) == 8
    assert render("  {{ flags }} ", CTX) == ["-O3", "-g"]
    assert render("{{ facts.gpus[0] }}", CTX) == {"index": 0, "compute_cap": "12.0"}
    assert render("{{ jobs * 2 }}", CTX) == 16
    # Ansible's combine: a new mapping, later keys win (the sgl-kernel play's extra CMake defines)
    assert render("{{ {'A': 'ON', 'B': '1'} | combine({'B': '2'}, {'C': 'x'}) }}", CTX) == {"A": "ON", "B": "2", "C": "x"}
    assert render("{{ none }}", CTX) is None
    assert render("j{{ jobs }}", CTX) == "j8"
    assert render("{{ jobs }}{{ jobs }}", CTX) == "88"  # two expressions: a string
    assert render("{{ jobs }} and {{ host }}", CTX) == "8 and n1"
    assert render("{{ '}}' }}", CTX) == "}}"


def test_render_nested_and_untouched():
    value = {"argv": ["{{ workdir }}/x", 3, True, None], "{{ host }}": {"j": "{{ jobs }}"}, 1.5: "plain"}
    assert render(value, CTX) == {"argv": ["/w/x", 3, True, None], "n1": {"j": 8}, 1.5: "plain"}
    assert render(("a", "{{ host }}"), CTX) == ["a", "n1"]
    assert render(7, CTX) == 7


def test_render_strict_undefined():
    with pytest.raises(RenderError) as info:
        render({"a": ["ok", "{{ nope }}"]}, CTX)
    assert info.value.path == ("a", 1)
    assert info.value.message == "'nope' is undefined"
    with pytest.raises(RenderError, match="has no attribute 'missing'"):
        render("{{ facts.missing }}", CTX)  # native: an Undefined never escapes
    with pytest.raises(RenderError, match="has no attribute 'missing'"):
        render("x {{ facts.missing }}", CTX)
    with pytest.raises(RenderError, match="ZeroDivisionError"):
        render("{{ jobs / 0 }}", CTX)
    with pytest.raises(RenderError, match="unsafe"):
        render("{{ host.__class__.__mro__ }}", CTX)  # sandboxed
    assert render("{{ missing | default('d') }}", CTX) == "d"


def test_evaluate_when():
    assert evaluate_when("jobs > 4", CTX) is True
    assert evaluate_when("facts.gpus | length == 2", CTX) is False
    assert evaluate_when("facts.cuda.version is version('13.0', '>=')", CTX) is True
    assert evaluate_when("facts.gpus[0].compute_cap is version('9.0', '<')", CTX) is False
    # Ansible's regex tests: re.search / re.match of the pattern in the value
    assert evaluate_when("'flttbash' is search('bash')", CTX) is True
    assert evaluate_when("'flttbash' is match('bash')", CTX) is False
    assert evaluate_when("'GPU01' is match('gpu', ignorecase=True)", CTX) is True
    assert evaluate_when("missing is not defined", CTX) is True
    assert evaluate_when("'yes' | bool", CTX) is True
    assert evaluate_when(False, CTX) is False
    with pytest.raises(RenderError, match="'missing' is undefined"):
        evaluate_when("missing", CTX)
    with pytest.raises(RenderError, match="without"):
        evaluate_when("{{ jobs }}", CTX)


def test_task_should_run_resolve_args_and_env(tmp_path):
    path = write(tmp_path, """\
tasks:
  - name: build {{ host }}
    build_wheel:
      src: "{{ workdir }}/src"
      out_dir: /o
      max_jobs: "{{ jobs }}"
      cmake_defines: {FA3: "{{ facts.cpu_count > 100 }}"}
    env: {N: "{{ jobs }}"}
    when: [jobs > 1, facts.cpu_count > 32]
""")
    (task,) = load_playbook(path, known_names=("jobs",)).tasks
    assert task.should_run(CTX)
    assert not task.should_run({**CTX, "jobs": 1})
    args = task.resolve_args(CTX)
    assert isinstance(args, BuildWheelArgs)
    assert (args.src, args.max_jobs, args.cmake_defines) == ("/w/src", 8, {"FA3": "OFF"})
    assert task.resolve_env(CTX) == {"N": "8"}
    assert task.resolve_name(CTX) == "build n1"
    with pytest.raises(RenderError) as info:
        task.resolve_args({**CTX, "jobs": "many"})
    assert str(info.value).startswith(f"{path}:6: tasks[0] (build {{{{ host }}}}).build_wheel.max_jobs: input should be")
    with pytest.raises(RenderError) as info:
        task.resolve_args({k: v for k, v in CTX.items() if k != "workdir"})
    assert str(info.value) == f"{path}:4: tasks[0] (build {{{{ host }}}}).build_wheel.src: 'workdir' is undefined"
    with pytest.raises(RenderError) as info:
        task.should_run({**CTX, "facts": {}})
    assert str(info.value) == f"{path}:9: tasks[0] (build {{{{ host }}}}).when[1]: 'dict object' has no attribute 'cpu_count'"


def test_render_vars_dependency_order_and_override():
    variables = {"dist": "{{ src }}/dist", "src": "{{ workdir }}/src", "workdir": "{{ workdir }}/me", "n": "{{ jobs }}"}
    assert render_vars(variables, CTX) == {"dist": "/w/me/src/dist", "src": "/w/me/src", "workdir": "/w/me", "n": 8}
    with pytest.raises(RenderError, match="cycle: a -> b -> a"):
        render_vars({"a": "{{ b }}", "b": "{{ a }}"}, CTX)
    with pytest.raises(RenderError) as info:
        render_vars({"a": ["{{ nope }}"]}, CTX)
    assert info.value.path == ("a", 0)


# -- actions ---------------------------------------------------------------------------------------


def test_action_models_coerce_and_reject():
    assert CommandArgs(argv=["sleep", 5, 1.5]).argv == ["sleep", "5", "1.5"]
    assert CopyArgs(src="a", dest="/b", mode="0o644").mode == 0o644
    assert CopyArgs(src="a", dest="/b", mode=0o600).mode == 0o600
    defines = BuildWheelArgs(src="/s", out_dir="/o", cmake_defines={"A": True, "B": False, "C": 3}).cmake_defines
    assert defines == {"A": "ON", "B": "OFF", "C": "3"}
    with pytest.raises(ValidationError):
        CommandArgs(argv="ls -l")
    with pytest.raises(ValidationError):
        BuildWheelArgs(src="/s", out_dir="/o", colour="red")
    with pytest.raises(ValidationError):
        BuildWheelArgs(src="/s", out_dir="/o", max_jobs=0)


# -- tags ------------------------------------------------------------------------------------------


@pytest.fixture
def tagged(tmp_path) -> Playbook:
    return load_playbook(write(tmp_path, """\
tasks:
  - {name: plain, debug: x}
  - {name: build, debug: x, tags: build}
  - {name: both, debug: x, tags: [build, verify]}
  - {name: always, debug: x, tags: always}
  - {name: never, debug: x, tags: [never, debug]}
"""))


@pytest.mark.parametrize(
    ("tags", "skip", "expected"),
    [
        (None, None, ["plain", "build", "both", "always"]),
        (set(), set(), ["plain", "build", "both", "always"]),
        ({"build"}, None, ["build", "both", "always"]),
        ({"verify"}, None, ["both", "always"]),
        ({"debug"}, None, ["always", "never"]),
        ({"untagged"}, None, ["plain", "always"]),
        ({"tagged"}, None, ["build", "both", "always"]),
        ({"all"}, None, ["plain", "build", "both", "always"]),
        ({"nosuch"}, None, ["always"]),
        (None, {"build"}, ["plain", "always"]),
        (None, {"always"}, ["plain", "build", "both"]),
        ({"build"}, {"verify"}, ["build", "always"]),
        (None, {"tagged"}, ["plain"]),
        (None, {"untagged"}, ["build", "both", "always"]),
        (None, {"all"}, ["always"]),
    ],
)
def test_select_tags(tagged, tags, skip, expected):
    assert [t.name for t in tagged.select_tags(tags, skip)] == expected


# -- robustness ------------------------------------------------------------------------------------

VALID_TEXT = (DATA / "valid.yaml").read_text()
_TOKENS = [
    ":", "-", " ", "\n", "  ", "[", "]", "{", "}", "{{", "}}", "{%", "'", '"', "&a", "*a", "!", "!!set",
    "<<", "?", "|", ">", "#", ",", "\t", "~", "null", "yes", "0", "-1", "1e9", ".inf", "0644", "[]", "{}",
    "copy", "shell", "command", "when", "tags", "notify", "timeout", "retries", "register", "env",
    "include_tasks", "valid.yaml", "handlers", "tasks", "vars", "name", "argv", "src", "msg", "facts.x",
    "nope", "\x00", "\u00e9", "%", "@", "`", "=", "\\",
]


@st.composite
def mutated(draw) -> str:
    text = VALID_TEXT
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "dup_line", "swap_lines", "indent"]))
        lines = text.split("\n")
        if kind == "delete":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + text[i + draw(st.integers(1, 20)):]
        elif kind == "insert":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.sampled_from(_TOKENS) | st.text(max_size=3)) + text[i:]
        elif kind == "replace":
            words = [w for w in set(text.replace(":", " ").split()) if w]
            word = draw(st.sampled_from(sorted(words)))
            text = text.replace(word, draw(st.sampled_from(_TOKENS)), 1)
        elif kind == "dup_line":
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif kind == "swap_lines":
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        else:
            i = draw(st.integers(0, len(lines) - 1))
            lines[i] = draw(st.sampled_from(["", " ", "  ", "    "])) + lines[i].lstrip()
            text = "\n".join(lines)
    return text


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.sampled_from(_TOKENS)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_TOKENS) | st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def restructured(draw) -> str:
    """The valid playbook's data with keys renamed, dropped or added and values replaced."""
    data = yaml.safe_load(VALID_TEXT)
    for _ in range(draw(st.integers(1, 3))):
        # pick a random container inside the document
        node = data
        for _ in range(draw(st.integers(0, 5))):
            children = [v for v in (node.values() if isinstance(node, dict) else node) if isinstance(v, (dict, list))]
            if not children:
                break
            node = draw(st.sampled_from(children))
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node, key=str)))
            kind = draw(st.sampled_from(["drop", "rename", "replace", "add"]))
            if kind == "drop":
                del node[key]
            elif kind == "rename":
                node[draw(st.sampled_from(_TOKENS))] = node.pop(key)
            elif kind == "replace":
                node[key] = draw(_VALUES)
            else:
                node[draw(st.sampled_from(_TOKENS) | st.text(max_size=6))] = draw(_VALUES)
        elif isinstance(node, list) and node:
            i = draw(st.integers(0, len(node) - 1))
            kind = draw(st.sampled_from(["drop", "replace", "dup"]))
            if kind == "drop":
                del node[i]
            elif kind == "replace":
                node[i] = draw(_VALUES)
            else:
                node.append(node[i])
    return yaml.safe_dump(data, allow_unicode=True)


_RUN_CTX = {**CTX, "run_id": "r", "run_dir": "/r", "playbook_dir": ".", "venv": "/v", "python": "/v/bin/python3"}


@settings(max_examples=int(os.environ.get("FLEETCTL_HYPOTHESIS_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated() | restructured())
def test_mutated_playbooks_only_raise_playbook_error(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "valid.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            pb = load_playbook(path)
        except PlaybookError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))
            return
        try:
            pb.check_undefined(())
        except PlaybookError as exc:
            assert "\n" not in str(exc)
        pb.select_tags({"build"}, {"never"})
        ctx = {**_RUN_CTX, **{name: {"rc": 0, "stdout": ""} for name in pb.registered_names}}
        try:
            ctx.update(render_vars(pb.vars, ctx))
        except RenderError:
            return
        for task in (*pb.tasks, *pb.handlers):
            for call in (task.should_run, task.resolve_args, task.resolve_env, task.resolve_name):
                try:
                    call(ctx)
                except RenderError as exc:
                    assert "\n" not in str(exc)


def test_valid_text_loads_unmutated(tmp_path):
    pb = load_playbook(write(tmp_path, VALID_TEXT, "valid.yaml"))
    pb.check_undefined(())
    assert len(pb.tasks) == 8
    assert os.path.basename(pb.tasks[0].file) == "valid.yaml"


def test_a_nul_byte_in_a_tasks_literal_argv_or_env_is_refused_when_the_playbook_loads(tmp_path):
    """New-user trial: a NUL byte in a playbook's literal argv was refused only when the command
    ran (CommandRefused on the host, after the tasks before it had run). It is refused at load:
    one line FILE:LINE naming the task and the argument, exit 2, nothing run; env values too.
    (A NUL that only a template renders is refused by the connection: test_api_inputs.)"""
    from tests.support.fleet import fleetctl

    marker = tmp_path / "ran"
    play = write(tmp_path, "- name: p\n  hosts: local\n  tasks:\n"
                           f"    - name: first\n      command: {{argv: [touch, {marker}]}}\n"
                           '    - name: nul arg\n      command: {argv: [echo, "a\\0b"]}\n')
    res = fleetctl("deploy", "--playbook", str(play), "--hosts", "local", home=tmp_path / "home")
    assert res.returncode == 2 and not marker.exists(), res.stdout[-2000:] + res.stderr
    assert res.stderr.splitlines() == [
        f"fleetctl: error: {play}:7: tasks[1] (nul arg).command.argv[1]: 'a\\x00b' holds a NUL byte, which no "
        "program, environment variable or path can be given (execve ends a string at NUL): remove it"]
    for task, key in (('    - name: s\n      shell: "echo a\\0b"\n', "tasks[0] (s).shell"),
                      ('    - name: e\n      command: [env]\n      env: {X: "c\\0"}\n', "tasks[0] (e).env.X")):
        bad = write(tmp_path, f"- name: p\n  hosts: all\n  tasks:\n{task}", name="bad.yaml")
        with pytest.raises(PlaybookError, match="holds a NUL byte") as info:
            load_playbook(bad)
        assert info.value.key == key and info.value.line is not None, str(info.value)
