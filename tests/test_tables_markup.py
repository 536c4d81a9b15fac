"""Text from hosts and preflight checks is printed as text: rich markup in it ("[build-system]",
"[sm_90]") is never eaten as a style tag, in a table that fits and in the list form alike."""

from __future__ import annotations

import io

from rich.console import Console

from fleetctl.reporting.tables import print_table

MSG = "build requirements missing in /v: scikit-build-core (the package's own [build-system] requires) [bold]x"


def test_square_brackets_in_a_cell_reach_the_screen():
    for width in (400, 40):  # the table, then the list form of a table too wide for the screen
        out = io.StringIO()
        print_table(Console(file=out, width=width, color_system=None), "plan",
                    [("host", True, "left"), ("error", False, "left")], [["gpu01", MSG]])
        shown = " ".join(out.getvalue().replace("│", " ").split())
        assert "[build-system]" in shown and "[bold]x" in shown, out.getvalue()
