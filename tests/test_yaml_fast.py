"""YAML through libyaml (fleetctl.util.yamlfast) gives exactly what PyYAML's Python parser gave:
the same objects, the same lines, the same one-line errors. Every YAML file of the test data and
the repository, the hard cases by hand, and random texts are loaded both ways."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.errors import InputError
from fleetctl.util import yamlload
from fleetctl.util.yamlload import LineDict, LineList, load_yaml_text

REPO = Path(__file__).resolve().parents[1]
FILES = sorted({*REPO.glob("tests/data/**/*.y*ml"), *REPO.glob("playbooks/*.yaml"), REPO / "inventory.yaml"})


def _shape(value, depth=0):
    if depth > 50:
        return "..."
    if isinstance(value, LineDict):
        return ("map", value.line, [(_shape(k), value.key_lines.get(k), _shape(v, depth + 1)) for k, v in value.items()])
    if isinstance(value, LineList):
        return ("seq", value.line, list(value.item_lines), [_shape(v, depth + 1) for v in value])
    if isinstance(value, (dict, list, tuple, set)):
        return (type(value).__name__, repr(value))
    return (type(value).__name__, repr(value) if not isinstance(value, float) or value == value else "nan")


def _both(text: str, monkeypatch) -> tuple:
    out = []
    for loader in (yamlload._CLineLoader, None):  # libyaml when plain, then PyYAML's Python parser only
        monkeypatch.setattr(yamlload, "_CLineLoader", loader)
        try:
            out.append(("ok", _shape(load_yaml_text(text, "f.yaml"))))
        except InputError as exc:
            out.append(("error", type(exc).__name__, str(exc), getattr(exc, "vault", False)))
    return tuple(out)


def test_libyaml_is_there():
    assert yamlload._CLineLoader is not None  # PyYAML's wheels carry it: the fast path is tested


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_yaml_file_loads_alike(path, monkeypatch):
    text = path.read_bytes().decode("utf-8-sig", "replace")
    fast, slow = _both(text, monkeypatch)
    assert fast == slow


HARD = [
    "", "# only a comment\n", "a: 1\nb: [1, 2]\nc: {d: e}\n", "a: 1\na: 2\n", "a: 1\n0x1: x\n1: y\n",
    "x: &a [1, *a]\n", "x: &a\n  y: *a\n", "base: &b {p: 1}\nthis:\n  <<: *b\n  p: 2\n", "a: !vault |\n  $ANSIBLE\n",
    "a: !unsafe '{{ x }}'\nb: !unsafe [1]\n", "a: !nope 1\n", "a:\n\t- 1\n", "a: 1\t# c\n", "--- 1\n--- 2\n",
    "%YAML 1.1\n--- a\n", "a: 'open\n", "a: [1, 2\n", "a:\n  - 1\n   b: 2\n", "a: \x07\n", "a: 1\x85b: 2\n",
    "a: 1\u2028b: 2\n", "? [1, 2]\n: x\n", "{[1]: 2}\n", "a: 2020-01-02\nb: 2020-01-02 10:00:00\nc: .inf\nd: .nan\n",
    "a: yes\nb: No\nc: ~\nd: 0o17\ne: 0b11\nf: 1_000\ng: 12:30\n", "l1: &x [a, b]\nl2: *x\nl3: *x\n",
    "a: *undefined\n", "- a\n- b: c\n  d: e\n- [f]\n", "a: |\n  x\n  y\nb: >-\n  p\n  q\n", "\ufeffa: 1\n",
    "a: \"\\u00e9\\n\"\nb: 'it''s'\n", "k: " + "[" * 40 + "]" * 40 + "\n", "a: b: c\n", "- a\nb: 1\n",
    "laughs: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n", "a: 1\n...\n", "a:\r\n  b: 1\r\n",
    f"t: {dt.date(2020, 1, 1)}\n", "? a\n? a\n", "&x a: &y b\n*y : c\n",
]


@pytest.mark.parametrize("text", HARD, ids=repr)
def test_hard_cases_load_alike(text, monkeypatch):
    fast, slow = _both(text, monkeypatch)
    assert fast == slow


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab1: \n-[]{},#&*!\"'|>?<.~%\t\r\\", max_size=30))
def test_random_texts_load_alike(text):
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = _both(text, mp)
    assert fast == slow
