"""Tables for the terminal (rich): facts, the run summary, arch classes (the plan's: :mod:`fleetctl.reporting.plan_table`).

A table never cuts what identifies a host or its problem: identifying columns do not wrap, the
others wrap at words but are never squeezed below a readable width, and a table that would not
be readable at the console's width (80 columns when piped) is printed as blocks instead
(:func:`print_table`); long causes go on lines of their own under the table.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .terminal import FOLD_THRESHOLD, STYLE, fold_note, is_detail_note

#: The narrowest a wrapping column may be made (columns of text): narrower, a sentence stands
#: two or three words a line and a 6-column ``--plan`` at 80 columns read ``change`` / ``d`` /
#: ``inputs`` (a new-user trial). A table that cannot give each wrapping column this much (or its
#: whole text, when shorter) is printed as blocks instead (:func:`print_table`).
READABLE_COLS = 20


def _cell_lines(cell: Any) -> list[str]:
    return str(cell).splitlines() or [""]


def column_widths(columns: list[tuple[str, bool, str]], rows: list[list[Any]], width: int) -> list[int] | None:
    """Each column's width (cells, without padding) for a table of ``rows`` on ``width`` columns,
    or None when it would not be readable there. Each column gets its widest cell or header when
    that fits, else it is narrowed, widest first: an identifying column never below its widest
    cell (its header wraps at words), a wrapping one never below its longest word (cell or
    header) nor below :data:`READABLE_COLS` (or its whole text, when shorter). rich's own
    shrinking heeds no minimum (it cut ``changed`` into ``change`` / ``d``), so the widths are
    given to it whole. Widths are in terminal cells (``rich.cells.cell_len``)."""
    from rich.cells import cell_len

    natural, floor = [], []
    for i, (name, ident, _) in enumerate(columns):
        cells = [line for r in rows if i < len(r) for line in _cell_lines(r[i])]
        head_word = max(cell_len(w) for w in name.split())
        widest = max([cell_len(c) for c in cells] + [head_word])
        natural.append(max(widest, cell_len(name)))  # the header on one line when there is room
        word = max([cell_len(w) for c in cells for w in c.split()] + [head_word])
        floor.append(widest if ident else max(word, min(READABLE_COLS, natural[-1])))
    room = width - 1 - 3 * len(columns)  # rich's default box: a border each side, one space of padding
    widths = list(natural)
    while sum(widths) > room:
        over = [i for i, w in enumerate(widths) if w > floor[i]]
        if not over:
            return None
        top = max(widths[i] for i in over)
        for i in (i for i in over if widths[i] == top):  # the widest give first, as rich's collapse does
            widths[i] -= 1
            if sum(widths) <= room:
                break
    return widths


def print_long(console: Console, text: Text | str, *, indent: int = 2, continuation: int = 4) -> None:
    """One long line: piped, whole (as grep wants it); on a terminal, wrapped at word boundaries
    to its width with the continuation lines indented (a terminal's own wrapping cuts words:
    ``connectio`` / ``n refused``); only a word wider than the screen is folded."""
    text = text if isinstance(text, Text) else Text(text)
    lead = Text(" " * indent)
    if not console.is_terminal:
        console.print(lead + text, soft_wrap=True)
        return
    width = max(20, console.width - continuation)
    lines = text.wrap(console, width, overflow="fold")
    for i, line in enumerate(lines):
        console.print(Text(" " * (indent if i == 0 else continuation)).append(line), soft_wrap=True)


def print_table(console: Console, title: str, columns: list[tuple[str, bool, str]], rows: list[list[Any]], *,
                nested: bool = False, whole_when_piped: bool = False) -> None:
    """Print ``rows`` as a table when it is readable at the console's width (80 columns when piped;
    :func:`column_widths`), else as blocks: each row's first cell on a line of its own, then
    ``  column: value`` lines. Columns are ``(name, identifies, justify)``: a column that identifies
    a host or its problem (host names, arch lists, versions) is never wrapped or cut; the others
    wrap at words, never losing text. ``nested`` (rows of one host, as ``--plan``'s): rows whose
    first cell repeats share one head, and each row is a line ``  second: third`` (``Build the
    wheel: build``) with its other cells under it, indented: one block per host, as an operator
    reads a plan top down, rather than the host's name repeated over each of its tasks.
    ``whole_when_piped`` (``--plan``'s): piped, the table only when every row fits on one line,
    else the blocks, whose lines are whole (operator trial: a plan with a failed host became a
    table whose causes wrapped at 35 columns in a file, where ``grep`` finds half a cause)."""
    widths = column_widths(columns, rows, console.width)
    if whole_when_piped and not console.is_terminal and widths != column_widths(columns, rows, 1 << 20):
        widths = None
    if widths is not None:
        table = Table(title=title)
        for (name, _, justify), w in zip(columns, widths):  # a given width: rich wraps to it, never below
            table.add_column(name, width=w, overflow="fold", justify=justify)  # type: ignore[arg-type]
        for row in rows:  # a str cell is text, never rich markup (an error may say "[build-system] requires")
            table.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in row))
        console.print(table)
        return
    console.print(Text(title, style="bold"))
    head_before = None
    for row in rows:
        cells = [c if isinstance(c, Text) else Text(str(c)) for c in row]
        if not nested or cells[0].plain != head_before:
            console.print(cells[0] if isinstance(row[0], Text) else Text(cells[0].plain, style="bold cyan"),
                          soft_wrap=True)
        head_before = cells[0].plain
        fields = list(zip((name for name, _, _ in columns[1:]), cells[1:]))
        indent = 2
        if nested and len(fields) >= 2:
            lead = [c for _, c in fields[:2] if c.plain]
            print_long(console, Text(": ").join(lead), indent=2, continuation=6)
            fields, indent = fields[2:], 4
        for name, cell in fields:
            if cell.plain:
                print_long(console, Text(f"{name}: ").append(cell), indent=indent, continuation=indent + 2)


def print_facts(console: Console, facts: dict[str, dict[str, Any]], *, lines_shown: bool = False) -> None:
    """One row per host whose facts were gathered (GPUs and SMs, arch list, CUDA, Python/torch,
    cores, memory, disk, max jobs), a failed one's too; then one line per host that could not be
    reached or read or was refused after gathering, with its cause.
    Above :data:`~fleetctl.reporting.terminal.FOLD_THRESHOLD` hosts (where the deploy summary
    folds), hosts with identical cells share one row under their node set and count
    (``m[001-120] (120)``, as ``fleetctl run -b``), and hosts failing alike share one line.

    ``lines_shown``: each host's line with every cell was printed as its facts came in
    (:class:`~fleetctl.reporting.lines.FactsLines`, not brief); then the table is printed only
    where it is one (the console is wide enough): its fallback, a block per host, would say each
    host's cells a second time (operator trial 10: every host printed twice when piped)."""
    from ..inventory import fold_hosts
    from .lines import facts_failed, facts_row

    fold = len(facts) > FOLD_THRESHOLD
    groups: dict[tuple[str, ...], list[str]] = {}
    bad: dict[tuple[str, ...], list[str]] = {}
    for host, f in facts.items():
        if facts_failed(f):
            state = "UNREACHABLE" if not f.get("reachable", True) else "FAILED"
            bad.setdefault((state, str(f.get("error"))) if fold else (state, str(f.get("error")), host), []).append(host)
            if state == "UNREACHABLE" or "gpus" not in f:
                continue  # gathered, then refused (a venv a deploy refuses): its row too, the cause below
        cells = facts_row(host, f)
        groups.setdefault(tuple(cells[1:]) if fold else (host,), []).append(host)
    rows = [[f"{fold_hosts(names)} ({len(names)})" if fold else names[0], *facts_row(names[0], facts[names[0]])[1:]]
            for names in groups.values()]
    cols = [("host", True, "left"), ("gpus", False, "left"), ("arch list", True, "left"),
            ("cuda", False, "left"), ("cmake", False, "left"), ("python / torch", True, "left"), ("cores", True, "right"),
            ("mem GiB", True, "right"), ("workdir free GiB", True, "right"), ("venv free", True, "right"),
            ("max jobs", True, "right")]
    if rows and not (lines_shown and column_widths(cols, rows, console.width) is None):
        print_table(console, "facts", cols, rows)
    for host, f in facts.items():
        envs = f.get("environments") or {}
        if envs.get("versions"):
            disk = envs.get("disk") or {}
            sizes = disk.get("versions") or {}
            kept = ", ".join(f"v{k} ({v.get('state')}, " + ("MISSING: its folder is gone)" if v.get("missing") else
                                                           f"torch {v.get('torch') or '?'}, own "
                                                           f"{(sizes.get(k) or {}).get('own_mib', '?')} MiB)")
                             for k, v in sorted(envs["versions"].items(), key=lambda kv: int(kv[0])))
            live = (f"the live version v{envs.get('live_version')} is missing (its folder is gone: roll back to a kept "
                    "one, fleetctl rollback --to N)" if envs.get("live_missing") else f"live v{envs.get('live_version')}")
            print_long(console, f"{host}: environments in {envs.get('versions_dir')}: {live}; "
                       f"{kept}; {disk.get('total_mib', '?')} MiB together (measured {disk.get('measured', '?')})",
                       indent=0)
    for (state, error, *_), names in bad.items():
        print_long(console, Text(f"{fold_hosts(names)}: ", style="bold cyan").append(f"{state}: {error}",
                                                                                 style=STYLE["unreachable"]), indent=0)


def folded_notes(facts: dict[str, dict[str, Any]], *, verbose: bool = False) -> list[str]:
    """The facts' build notes, each once with its folded host set (``gpu[01-16]: no GPU found...``),
    less the warning a failed host's ``FAILED:`` line already gives as its cause. The ``max_jobs`` derivation is a detail (the table shows max jobs): shown with ``-v`` only."""
    from ..inventory import fold_hosts

    groups: dict[str, list[str]] = {}
    for host, f in facts.items():
        error = str(f.get("error") or "")
        for note in (f.get("build") or {}).get("notes", []):
            if is_detail_note(note) and not verbose:
                continue
            cause = note[len("warning: "):] if note.startswith("warning: ") else None
            if cause and error and (error == cause or error.startswith(f"{cause} (and ")):
                continue  # the host's FAILED line gave it already (fleetctl.facts.refusals.refusal_error)
            groups.setdefault(fold_note(note), []).append(host)
    return [f"{fold_hosts(hosts)}: {note}" for note, hosts in groups.items()]


def print_summary(console: Console, results: dict[str, dict[str, Any]], run_id: str, *, fold: bool = False,
                  causes_below: bool = True) -> None:
    """The end of a run: host, status, tasks (one letter per task status), duration; with ``fold``
    hosts with the same statuses and error share one row under their folded host set. Then each
    failure's whole cause on lines of its own (folded by host set), never squeezed into a column
    (``causes_below=False`` when the folded terminal output has listed them already)."""
    from ..inventory import fold_hosts

    groups: dict[tuple, list[tuple[str, float]]] = {}
    for host, r in results.items():
        marks = "".join(t["status"][0].upper() for t in _ran(r))
        key = (r.get("status", "?"), marks, r.get("error") or "") if fold else (host,)
        groups.setdefault(key, []).append((host, float(r.get("duration_s", 0) or 0)))
    rows = []
    causes: dict[tuple[str, str], list[str]] = {}
    for members in groups.values():
        names = [h for h, _ in members]
        r = results[names[0]]
        status = r.get("status", "?")
        marks = Text()
        for t in _ran(r):
            marks.append(t["status"][0].upper(), style=STYLE.get(t["status"], ""))
        durations = [d for _, d in members]
        dur = f"{durations[0]:.1f}" if len(durations) == 1 else f"{min(durations):.1f}-{max(durations):.1f}"
        rows.append([fold_hosts(names) if fold else names[0], Text(status, style=STYLE.get(status, "")), marks, dur])
        if r.get("error"):
            causes.setdefault((status, r["error"]), []).extend(names)
    print_table(console, f"run {run_id}", [("hosts" if fold else "host", True, "left"), ("status", True, "left"),
                                           ("tasks", True, "left"), ("duration s", True, "right")], rows)
    for (status, error), names in (causes.items() if causes_below else ()):
        print_long(console, Text(f"{fold_hosts(names)}: ", style="bold cyan").append(
            f"{status.upper()}: {error}", style=STYLE.get(status, "")), indent=0)


def _ran(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of a host's result (``host_json``) that its tasks column shows: every one, but for
    an unreachable host only those that ran: not its connect outcome (no connection, no task ran),
    and none after the first one lost (never a row of U's). A host lost mid-run shows the tasks
    done and the lost one ``U`` (fresh operator's trial: a host lost during its build showed an
    empty column, though facts and the upload were done)."""
    tasks = result.get("tasks", [])
    if result.get("status") != "unreachable":
        return tasks
    ran = []
    for t in tasks:
        if t.get("phase") == "connect":
            continue
        ran.append(t)
        if t.get("status") == "unreachable":
            break
    return ran


def build_classes(results: dict[str, dict[str, Any]]) -> list[str]:
    """One line per arch class, hosts folded the way ClusterShell prints node sets:
    ``gpu[01-12] sm_120a cu13.0 torch2.12 cp312 (built on gpu01)``; ``(built on each host)`` when
    every member built its own (``--build each``), ``(built on each of HOSTS)`` when several did
    and the others reused or were pushed a wheel. A member refused by the
    build's preflight (its task's ``data["preflight"]``: nothing was built there) is not a failed
    build: ``(not built: preflight failed on gpu[01-12])``. When some members got the wheel and
    others did not, the line names those that got it and the others apart: ``gpu[01-02] sm_90a ...
    (built on gpu01; preflight failed on gpu03)``. The SASS is what the wheel holds (its SASS
    check, ``data["sass"]``), else what was asked, labelled so (``asked sm_90a``: no wheel was
    built), else the arch list (``arch 9.0a``)."""
    from ..inventory import fold_hosts

    classes: dict[str, dict[str, Any]] = {}
    for host, r in results.items():
        for t in r.get("tasks", []):
            data = t.get("data") or {}
            if t.get("action") != "build_wheel" or not data.get("key") or t.get("status") == "skipped":
                continue
            c = classes.setdefault(data["key"], {"hosts": [], "data": data, "builder": None, "failed": [],
                                                 "refused": [], "unfinished": False, "built": [], "got": [],
                                                 "not_got": [], "sass": [], "sass_got": [],
                                                 "lost": [], "refused_rx": []})
            c["hosts"].append(host)
            got = t.get("status") in ("ok", "changed")
            c["got" if got else "not_got"].append(host)
            if data.get("sass"):  # a wheel's own SASS (its check): a member's that got the wheel first
                c["sass_got" if got else "sass"] = c["sass_got" if got else "sass"] or data["sass"]
            if data.get("pushed_from"):
                c["builder"] = c["builder"] or data["pushed_from"]
            elif t.get("status") in ("ok", "changed"):
                if not data.get("reused"):
                    c["builder"] = c["builder"] or host
                    c["built"].append(host)
            elif data.get("role") != "push":  # this host's own build failed (a failed push is the receiver's),
                c["refused" if data.get("preflight") else "failed"].append(host)  # or its preflight refused it
            else:
                c["unfinished"] = True
                c["lost" if not data.get("preflight") else "refused_rx"].append(host)
    lines = []
    for c in classes.values():
        d = c["data"]
        inputs = d.get("inputs") or {}
        torch = ".".join(str(inputs.get("torch") or "?").split("+")[0].split(".")[:2])
        # what a wheel holds (its SASS check), else what was asked, labelled so (fresh operator's
        # trial: a build handed over to gpu02 printed the facts' arch list, not the wheel's)
        asked = " ".join(d.get("sass_asked") or [])
        sass = " ".join(c["sass_got"] or c["sass"]) or (f"asked {asked}" if asked else f"arch {d.get('archs')}")
        # only a build that succeeded names its builder (new-user trial: a class whose every build
        # failed read "(built on gpu04)")
        # several members built their own (--build each): never one of them named for all (fresh
        # operator's trial: both hosts logged "built", the class line named one)
        built = c["built"] if len(c["built"]) > 1 else []
        how = ("built on each host" if built and len(built) == len(c["hosts"]) else
               f"built on each of {fold_hosts(built)}" if built else
               f"built on {c['builder']}" if c["builder"] else f"build failed on {fold_hosts(c['failed'])}"
               if c["failed"] else f"not built: preflight failed on {fold_hosts(c['refused'])}" if c["refused"]
               else "not built" if c["unfinished"] else "reused")
        plat = " ".join(str(x) for x in (inputs.get("platform"), inputs.get("libc")) if x)
        # the hosts named first are those that got the wheel; a member that did not (its preflight,
        # its receiving or its build failed) is named apart (fresh operator's trial: gpu03, refused
        # for its disk, was folded into "gpu[01-03] ... (built on gpu01)")
        shown = c["got"] if c["got"] and c["not_got"] else c["hosts"]
        if shown is c["got"]:
            apart = (("build failed", c["failed"]), ("preflight failed", c["refused"] + c["refused_rx"]),
                     ("not received", c["lost"]))
            how += "".join(f"; {what} on {fold_hosts(names)}" for what, names in apart if names)
        lines.append(f"{fold_hosts(shown)} {sass} cu{inputs.get('cuda')} torch{torch} {inputs.get('python')}"
                     f"{' ' + plat if plat else ''} ({how})")
    return lines
