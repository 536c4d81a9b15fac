"""``fetch``'s check of its DEST (:func:`fleetctl.engine.fetch_paths.check_local_dest`) makes and
removes a hidden probe folder on the controller: it leaves nothing behind when interrupted the
moment after the folder was made, nor when the fetch fails, and never touches a folder of the
user's (one with a probe-like name included)."""

from __future__ import annotations

import os
import sys

import pytest

from fleetctl.engine.fetch_paths import check_local_dest
from tests.support.fleet import fleetctl, write_inventory


def _listing(root) -> dict[str, tuple[int, int]]:
    return {os.path.relpath(os.path.join(d, n), root): (os.lstat(os.path.join(d, n)).st_mode,
                                                         os.lstat(os.path.join(d, n)).st_mtime_ns)
            for d, dirs, files in os.walk(root) for n in dirs + files}


def test_the_dest_probe_leaves_nothing_when_interrupted_or_failed_and_never_touches_the_users_folders(tmp_path):
    dest = tmp_path / "mine"
    (dest / ".fleetctl-probe-0123456789abcdef").mkdir(parents=True)  # the user's own, empty: never removed
    (dest / "notes.txt").write_text("keep\n")
    before = _listing(dest)

    # a Ctrl-C the moment mkdir(2) of the probe returned (a real SIGINT is a KeyboardInterrupt raised
    # at the next bytecode; here raised exactly there, through the profiler's c_return of os.mkdir)
    def interrupt(frame, event, arg):
        if event == "c_return" and arg is os.mkdir:
            sys.setprofile(None)
            raise KeyboardInterrupt

    sys.setprofile(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            check_local_dest(str(dest / "new" / "{host}"), ["h1"])
    finally:
        sys.setprofile(None)
    assert _listing(dest) == before  # the probe made in dest was removed; the user's folders untouched

    # a fetch that fails on its host (no such SRC) after the check: dest as the user left it
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "lh", str(tmp_path / "nope"), str(dest / "{host}-got") + "/",
                   home=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert _listing(dest) == before, res.stderr
