"""patch_sgl_kernel.py against every construct family of sgl-kernel's real history.

tests/data/sgl_kernel_history.json is what scripts/sgl_history.py recorded when it ran over the
real upstream history (a clone is needed, so it is run by hand: docs/sgl-kernel-patch.md). CI has
no clone and no network, so here each family is one fixture tree written in our own words
(tests/support/sgl_families.py), held to the record: the fixture has its family's features, and
the patch script gives it the same statuses and the same pass / n/a outcome per check as the real
revisions of that family got, with a real cmake configure and a real import.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import sgl_checks
from tests.support.sgl_families import FAMILIES, cmakelists, flash_attn_py

DATA = Path(__file__).parent / "data" / "sgl_kernel_history.json"
HISTORY = json.loads(DATA.read_text())
RECORDED = {f["id"]: f for f in HISTORY["families"]}


def first_revision(family_id: str) -> dict:
    return next(r for r in HISTORY["revisions"] if r["family"] == family_id)


@pytest.fixture(scope="module")
def prober(tmp_path_factory):
    return sgl_checks.Prober(tmp_path_factory.mktemp("probe"))


def test_the_record_covers_the_real_history_and_every_revision_passed():
    s = HISTORY["summary"]
    assert s["revisions"] == len(HISTORY["revisions"]) >= 150
    assert s["passed"] == s["revisions"], [r["first_commit"] for r in HISTORY["revisions"] if not r["ok"]]
    assert {r["layout"] for r in HISTORY["revisions"]} == {"sgl-kernel", "aot"}
    assert min(r["date"] for r in HISTORY["revisions"]) == "2025-03-27"  # the first CMake build
    for r in HISTORY["revisions"]:
        assert re.fullmatch(r"[0-9a-f]{40}", r["first_commit"]) and re.fullmatch(r"[0-9a-f]{40}", r["cmake_blob"])
        assert set(r["checks"]) == set(sgl_checks.CHECKS)
        assert set(r["checks"].values()) <= {"pass", "n/a"}
    keys = [(r["layout"], r["cmake_blob"], r["flash_attn_blob"]) for r in HISTORY["revisions"]]
    assert len(keys) == len(set(keys))  # distinct revisions
    # the BUILD_FA3 era, the gap this record closed: FA3 was forced and the patch now applies
    build_fa3 = [r for r in HISTORY["revisions"] if "BUILD_FA3" in RECORDED[r["family"]]["features"]["fa3"]]
    assert build_fa3 and all(r["statuses"]["fa3-respect-option"] == "Applied" for r in build_fa3)


def test_every_recorded_family_has_a_fixture():
    assert set(FAMILIES) == set(RECORDED)


@pytest.mark.parametrize("family_id", sorted(FAMILIES, key=lambda k: FAMILIES[k].date))
def test_fixture_has_its_familys_constructs(family_id):
    f = FAMILIES[family_id]
    feats = sgl_checks.features(cmakelists(f), flash_attn_py(f), f.layout)
    assert feats == RECORDED[family_id]["features"]
    assert f.date == RECORDED[family_id]["date"]


@pytest.mark.parametrize("family_id", sorted(FAMILIES, key=lambda k: FAMILIES[k].date))
def test_family_passes_the_checks_the_real_revisions_passed(family_id, tmp_path, prober):
    f = FAMILIES[family_id]
    res = sgl_checks.check_revision(cmakelists(f), flash_attn_py(f), f.layout, tmp_path, prober)
    failed = {k: v["detail"] for k, v in res["checks"].items() if v["ok"] is False}
    assert res["ok"], failed
    real = first_revision(family_id)
    got = {k: {True: "pass", None: "n/a"}[v["ok"]] for k, v in res["checks"].items()}
    assert got == real["checks"]
    assert res["statuses"] == real["statuses"]


def test_forced_fa3_is_never_not_needed(tmp_path, prober):
    """The issue's gap, on the BUILD_FA3 family: OFF was ignored and the script said Not needed."""
    f = FAMILIES["b8b6008f4"]
    res = sgl_checks.check_revision(cmakelists(f), flash_attn_py(f), f.layout, tmp_path, prober)
    assert res["statuses"]["fa3-respect-option"] == "Applied"
    assert "unpatched tree ignores -DSGL_KERNEL_ENABLE_FA3=OFF" in res["checks"]["honest-status"]["detail"]
    assert res["checks"]["fa3-off"]["ok"] and res["checks"]["fa3-on"]["ok"]


def test_fa3_in_common_ops_is_refused_naming_file_line_and_construct(tmp_path):
    f = FAMILIES["37c66ec85"]
    kdir = sgl_checks.write_revision(tmp_path, f.layout, cmakelists(f), flash_attn_py(f))
    before = sgl_checks.digest(tmp_path)
    res = sgl_checks.run_patch(tmp_path)
    assert res.returncode == 1 and res.stdout == ""
    line = cmakelists(f).splitlines().index('    "${repo-flash-attention_SOURCE_DIR}/hopper/flash_api.cpp"') + 1
    assert f"{kdir / 'CMakeLists.txt'}:{line}: " in res.stderr
    assert "fa3-respect-option" in res.stderr and "flash_api.cpp" in res.stderr
    assert "nothing was changed" in res.stderr
    assert sgl_checks.digest(tmp_path) == before
