"""``fleetctl schedule``: systemd units and crontab lines that run the deploy unattended.

What is checked against the real thing:
- systemd's own parser: every quoted word is read back by ``systemd-analyze verify`` (the executable
  of a unit names itself in its "is not executable" message); the rendered units pass
  ``systemd-analyze verify`` (system and --user); time spans agree with ``systemd-analyze timespan``
  and OnCalendar= with ``systemd-analyze calendar``. (systemd-analyze verify works without systemd
  running as PID 1; .ci/run installs Debian's ``systemd`` package when it is missing.)
- cron: the cron line, after crontab(5)'s ``%`` rule, is run by the real /bin/sh and really deploys a
  one-task playbook to a local host; the run record and cron.log land in FLEETCTL_HOME.
- the printed unit: its ExecStart=, Environment= and WorkingDirectory= are read back (with a reader
  that the systemd check above validates) and really run the deploy.
- crontab and systemctl are small scripts on PATH that record what they were asked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fleetctl.cli import schedule as cli_schedule
from fleetctl.cli import schedule_install
from fleetctl import schedule as sch
from fleetctl.errors import InputError
from tests.support.slurm import slurm_cluster, slurm_cluster_session  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
HOSTILE = ["a b", 'say "hi"', "it's", "back\\slash", "trail\\", "100%", "%%n", "%n", "semi;colon", ";",
           "\u00fcn\u00efc\u00f6d\u00e9 \u2713", "two  spaces", " lead", "trail ", '"', "'", '\\"', "x#y", "=eq",
           "a\\nb", "{braces}", "`tick`", "*?[glob]", "-dash", "~tilde", "&|<>"]


# --------------------------------------------------------------------------------------------------
# A reader of systemd's quoting (systemd.syntax(7)), used to read the rendered units back. It is
# itself checked against systemd in test_systemd_reads_back_every_quoted_word.

_ESC = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
        "'": "'", "s": " "}


def specifiers(value: str) -> str:
    """systemd.unit(5): %% -> %; our renderings hold no other specifier."""
    assert re.fullmatch(r"(?:[^%]|%%)*", value), value
    return value.replace("%%", "%")


def unquote_words(value: str) -> list[str]:
    words, i, n = [], 0, len(value)
    while True:
        while i < n and value[i] in " \t":
            i += 1
        if i >= n:
            return words
        quote = value[i] if value[i] in "\"'" else None
        i += bool(quote)
        word = []
        while i < n:
            c = value[i]
            if quote and c == quote:
                i += 1
                assert i >= n or value[i] in " \t", f"closing quote not followed by space: {value!r}"
                break
            if not quote and c in " \t":
                break
            if c == "\\":
                e = value[i + 1]
                if e == "x":
                    word.append(chr(int(value[i + 2:i + 4], 16)))
                    i += 4
                    continue
                word.append(_ESC[e])
                i += 2
                continue
            word.append(c)
            i += 1
        else:
            assert not quote, f"unterminated quote: {value!r}"
        words.append("".join(word))


def read_exec(value: str) -> list[str]:
    """ExecStart=: specifiers, words, then $$ -> $ in the arguments (systemd.service(5))."""
    words = unquote_words(specifiers(value))
    assert all(re.fullmatch(r"(?:[^$]|\$\$)*", w) for w in words[1:]), words
    return words[:1] + [w.replace("$$", "$") for w in words[1:]]


def unit_settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


# --------------------------------------------------------------------------------------------------
# Quoting


def test_systemd_quote_plain_words_stay_plain():
    assert sch.systemd_quote("/usr/bin/fleetctl") == "/usr/bin/fleetctl"
    assert sch.systemd_quote("--hosts") == "--hosts"
    assert sch.systemd_quote("gpu-nodes:!gpu03") == "gpu-nodes:!gpu03"


def test_systemd_quote_escapes():
    q = sch.systemd_quote
    assert q("a b") == '"a b"'
    assert q('say "hi"') == r'"say \"hi\""'
    assert q("back\\slash") == r'"back\\slash"'
    assert q("trail\\") == r'"trail\\"'  # never a line-continuing backslash
    assert q("100%") == "100%%"
    assert q("100% sure") == '"100%% sure"'
    assert q("$HOME") == "$$HOME"
    assert q("$HOME", dollar=False) == "$HOME"
    assert q(";") == '";"'  # a lone ; separates commands
    assert q("") == '""'
    assert q("it's") == "\"it's\""
    assert q("a\tb\nc\x01\x7f") == r'"a\tb\nc\x01\x7f"'
    assert q("\u00e9\u2713") == "\u00e9\u2713"  # UTF-8 is accepted as is
    with pytest.raises(InputError, match="UTF-8"):
        q("bad\udcff")
    with pytest.raises(InputError, match="NUL"):
        q("a\x00b")


@pytest.mark.parametrize("word", HOSTILE + ["", "x\ty", "nl\nin", "$HOME", "${X}", "$$", "%"])
def test_the_test_reader_inverts_systemd_quote(word):
    assert read_exec("/bin/x " + sch.systemd_quote(word)) == ["/bin/x", word]
    assert unquote_words(specifiers(sch.systemd_quote(word, dollar=False))) == [word]


CONTROL = ["tab\there", "\x01ctl", "del\x7f", "nl\nin", "\x1b[31mred"]  # (systemd logs \r as \n)


def test_systemd_reads_back_every_quoted_word(tmp_path):
    """systemd's own parser reads each hostile word back as it was. systemd-analyze verify names an
    Environment= word that is not an assignment ("Invalid environment assignment, ignoring: WORD"),
    and an executable that does not exist ("Command PATH is not executable"); ExecStart= arguments
    are unquoted as Environment= words are (systemd.syntax(7)), plus $$ -> $ (systemd.service(5))."""
    files = []
    for i, word in enumerate(HOSTILE + CONTROL):
        assert "=" not in word[1:]  # else it would be a valid assignment, and not named
        unit = tmp_path / f"e{i}.service"
        unit.write_text(f"[Service]\nType=oneshot\nExecStart=/bin/true\n"
                        f"Environment={sch.systemd_quote(word, dollar=False)}\n")
        files.append(str(unit))
    base = "/nonexistent-fleetctl-test/"
    safe = [w for w in HOSTILE if not re.search(r"[\"'\\]", w)]  # quotes, backslashes: see below
    for i, word in enumerate(safe):
        unit = tmp_path / f"x{i}.service"
        unit.write_text(f"[Service]\nType=oneshot\nExecStart={sch.systemd_exec([base + word, 'arg'])}\n")
        files.append(str(unit))
    res = subprocess.run(["systemd-analyze", "verify", *files], capture_output=True, timeout=120)
    res.stderr = res.stderr.decode()  # bytes: text mode would turn \r into \n
    env_seen = {int(m[1]): m[2] for m in re.finditer(
        r"/e(\d+)\.service:\d+: Invalid environment assignment, ignoring: (.*?)(?=\n\S*\.service|\n?\Z)",
        res.stderr, re.S)}
    exe_seen = dict(re.findall(r"^x(\d+)\.service: Command (.*) is not executable: No such file or directory$",
                               res.stderr, re.M))
    for i, word in enumerate(HOSTILE + CONTROL):
        assert env_seen.get(i) == word, (word, res.stderr)
        # ...and the test's reader reads them the same way
        assert unquote_words(specifiers(sch.systemd_quote(word, dollar=False))) == [word]
    for i, word in enumerate(safe):
        assert exe_seen.get(str(i)) == base + word, (word, res.stderr)
        assert read_exec(sch.systemd_exec([base + word, "arg"]))[0] == base + word
    # systemd refuses quotes and backslashes in an executable path, so systemd_exec does too
    for word in set(HOSTILE) - set(safe):
        unit = tmp_path / "refused.service"
        unit.write_text(f"[Service]\nType=oneshot\nExecStart={sch.systemd_quote(base + word, dollar=False)}\n")
        res = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
        assert "Executable name contains special characters" in res.stderr, (word, res.stderr)
        with pytest.raises(InputError, match="quotes, backslashes"):
            sch.systemd_exec([base + word])


def test_executable_path_refuses_what_systemd_cannot_run():
    with pytest.raises(InputError, match="absolute"):
        sch.systemd_exec(["fleetctl", "deploy"])
    with pytest.raises(InputError, match=r"'\$'"):
        sch.systemd_exec(["/opt/a$b/fleetctl"])  # the path is not $-substituted, argv[0] would be
    for bad in ("/opt/a\tb/fleetctl", "/opt/it's/fleetctl", '/opt/"q"/fleetctl', "/opt/a\\b/fleetctl"):
        with pytest.raises(InputError):
            sch.systemd_exec([bad])
    assert sch.systemd_exec(["/opt/my fleet/fleetctl", "$x"]) == '"/opt/my fleet/fleetctl" $$x'


def test_working_directory_is_not_unquoted_only_percent_escaped():
    assert sch.systemd_path("/srv/my fleet/100%", "dir") == "/srv/my fleet/100%%"
    assert sch.systemd_path('/srv/"q"', "dir") == '/srv/"q"'
    for bad in ("/srv/a\nb", "/srv/trail ", "/srv/x\\"):
        with pytest.raises(InputError):
            sch.systemd_path(bad, "dir")


# --------------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize("text,want", [("02:30", (2, 30)), ("2:30", (2, 30)), ("00:00", (0, 0)),
                                       ("23:59", (23, 59)), (" 07:05 ", (7, 5))])
def test_at_valid(text, want):
    assert sch.parse_at(text) == want


@pytest.mark.parametrize("text", ["24:00", "02:60", "2:3", "0230", "02:30:00", "-1:00", "ab:cd", "", "2:30pm",
                                  "\uff10\uff12:30"])
def test_at_invalid_names_the_option(text):
    with pytest.raises(InputError, match=r"^--at: want HH:MM"):
        sch.parse_at(text)


def test_on_calendar_is_what_systemd_reads():
    assert sch.on_calendar(2, 30) == "*-*-* 02:30:00"
    res = subprocess.run(["systemd-analyze", "calendar", sch.on_calendar(2, 30)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Normalized form: *-*-* 02:30:00" in res.stdout
    assert re.search(r"Next elapse: \w+ \d{4}-\d\d-\d\d 02:30:00", res.stdout), res.stdout


def test_names():
    assert sch.default_name("playbooks/nightly.yaml") == "fleetctl-nightly"
    assert sch.default_name("/x/my play book.yml") == "fleetctl-my-play-book"
    assert sch.check_name("fleetctl-nightly_2.gpu") == "fleetctl-nightly_2.gpu"
    for bad in ("a b", "", "-x", "a/b", "a@b", "x" * 101, "n\u00e9", "a%b", "a$b", "a;b"):
        with pytest.raises(InputError, match="^--name: "):
            sch.check_name(bad)
    assert sch.check_on_failure("notify-failure@%n.service") == "notify-failure@%n.service"
    for bad in ("notify", "a b.service", "x@%.service", "x.exe"):
        with pytest.raises(InputError, match="^--on-failure: "):
            sch.check_on_failure(bad)


SPANS = ["6h", "90min", "1h 30min", "1h30m", "3600", "0", "2.5h", ".5h", "15 min", "1w", "1M", "1y", "500ms",
         "1d 2h 3min 4s 5ms 6us", "3 hours", "48hr", "55s500ms", " 6h ", "1.5s", "10msec", "1\u00b5s",
         "1\u03bcs", "5 min 3", "1.5 .2h", "1s.5h", "1 2", "1h2", "5s3m", "12.5", "1 h", "1 2h3", "3 4min"]
BAD_SPANS = ["", "h", "6 hrs", "1.h", "1.5.2h", "1e3", "0x10", "6H", "1Min", "1ns", "Infinity", "1_000", "5s,",
             "1mo", "+5s", "-5s", "5.s", "1h2.5.1", "h1"]


@pytest.mark.parametrize("text", SPANS)
def test_timespan_agrees_with_systemd(text):
    res = subprocess.run(["systemd-analyze", "timespan", "--", text], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    usec = int(re.search(r"\u03bcs: (\d+)", res.stdout)[1])
    assert sch.parse_timespan(text, "--timeout") == usec


@pytest.mark.parametrize("text", BAD_SPANS)
def test_timespan_refuses(text):
    with pytest.raises(InputError, match=r"^--timeout: want a time span"):
        sch.parse_timespan(text, "--timeout")


def test_timespan_infinity():
    assert sch.parse_timespan("infinity", "--timeout") is None


# --------------------------------------------------------------------------------------------------
# Rendering


def job(tmp_path: Path, **kw) -> sch.Job:
    base = dict(name="fleetctl-nightly", hour=2, minute=30, fleetctl=("/opt/fleet ctl/bin/fleetctl",),
                inventory=("/srv/fleet/inventory.yaml",), playbook="/srv/fleet/playbooks/nightly.yaml",
                pattern="gpu-nodes:!gpu03", workdir="/srv/fleet", home="/var/lib/fleet 100%",
                env=(("FLEETCTL_HOME", "/var/lib/fleet 100%"),))
    base.update(kw)
    return sch.Job(**base)


def test_service_and_timer(tmp_path):
    j = job(tmp_path, extra_vars=("torch_spec=torch==2.12 $x %y",), on_failure=("notify@%n.service",),
            nice=10, idle_io=True)
    svc = sch.render_service(j)
    s = unit_settings(svc)
    assert s["Type"] == ["oneshot"]
    assert s["TimeoutStartSec"] == ["6h"]
    assert s["OnFailure"] == ["notify@%n.service"]  # a specifier on purpose: %n is this service
    assert s["Nice"] == ["10"] and s["IOSchedulingClass"] == ["idle"]
    assert "User" not in s  # user units run as their user
    assert s["WorkingDirectory"] == ["/srv/fleet"]
    assert s["Environment"] == ['"FLEETCTL_HOME=/var/lib/fleet 100%%"']
    assert s["ExecStart"] == ['"/opt/fleet ctl/bin/fleetctl" -i /srv/fleet/inventory.yaml deploy --hosts '
                              'gpu-nodes:!gpu03 --playbook /srv/fleet/playbooks/nightly.yaml '
                              '-e "torch_spec=torch==2.12 $$x %%y" --json']
    assert read_exec(s["ExecStart"][0]) == j.argv()
    timer = unit_settings(sch.render_timer(j))
    assert timer["OnCalendar"] == ["*-*-* 02:30:00"]
    assert timer["Persistent"] == ["true"]
    assert timer["RandomizedDelaySec"] == ["0"]
    assert timer["Unit"] == ["fleetctl-nightly.service"]
    assert timer["WantedBy"] == ["timers.target"]
    system = unit_settings(sch.render_service(job(tmp_path, system=True, user="root")))
    assert system["User"] == ["root"] and system["After"] == ["network-online.target"]
    assert unit_settings(sch.render_service(job(tmp_path, timeout="infinity")))["TimeoutStartSec"] == ["infinity"]


def cron_sh_command(line: str) -> tuple[str, str]:
    """What cron runs for ``line`` (crontab(5)): the sixth field on; an unescaped % ends the command
    (the rest is stdin, newlines for %), \\% is a %. Returns (command for /bin/sh, stdin)."""
    fields = line.split(None, 5)
    assert len(fields) == 6 and fields[2:5] == ["*", "*", "*"], line
    cmd, stdin, i, text = [], None, 0, fields[5]
    while i < len(text):
        if text[i] == "\\" and text[i + 1:i + 2] == "%":
            cmd.append("%")
            i += 2
        elif text[i] == "%":
            stdin = text[i + 1:].replace("%", "\n")
            break
        else:
            cmd.append(text[i])
            i += 1
    return "".join(cmd), stdin or ""


def test_cron_line_shape(tmp_path):
    j = job(tmp_path, extra_vars=("v=50% off",))
    line = sch.cron_line(j)
    assert line.startswith("30 2 * * * log='/var/lib/fleet 100\\%/cron.log'; [ -z \"$(find \"$log\" -size "
                           "+10485760c 2>/dev/null)\" ] || mv -f \"$log\" \"$log.1\"; { cd /srv/fleet && FLEETCTL_HOME='/var/lib/fleet 100\\%' timeout "
                           "--kill-after=90s 21600s '/opt/fleet ctl/bin/fleetctl' -i /srv/fleet/inventory.yaml "
                           "deploy --hosts 'gpu-nodes:!gpu03' --playbook /srv/fleet/playbooks/nightly.yaml "
                           "-e 'v=50\\% off' --json; } >> \"$log\" 2>&1 ")
    assert line.endswith(" # fleetctl:fleetctl-nightly")
    assert "\n" not in line
    cmd, stdin = cron_sh_command(line)
    assert stdin == "" and "%" in cmd and "\\%" not in cmd
    with pytest.raises(InputError, match="line break"):
        sch.cron_line(job(tmp_path, extra_vars=("v=a\nb",)))
    with pytest.raises(InputError, match="^--on-failure"):
        sch.cron_line(job(tmp_path, on_failure=("x.service",)))
    assert " timeout " not in sch.cron_line(job(tmp_path, timeout="infinity"))
    wrapped = sch.cron_line(job(tmp_path, nice=5, idle_io=True, randomized_delay="10min"))
    assert 'sleep "$(shuf -i 0-600 -n 1)" && ' in wrapped
    assert " 21600s ionice -c 3 nice -n 5 '/opt/fleet ctl/bin/fleetctl' " in wrapped


def test_cron_line_runs_through_sh_as_written(tmp_path):
    """The exact argv, folder and FLEETCTL_HOME reach the program, hostile characters and all."""
    weird = tmp_path / "we'ird $HOME `x` 100% \"q\" \\b"
    weird.mkdir()
    fake = weird / "fleet ctl"
    fake.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                    "json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'home': os.environ['FLEETCTL_HOME']},"
                    " sys.stdout)\n")
    fake.chmod(0o755)
    j = job(tmp_path, fleetctl=(str(fake),), workdir=str(weird), home=str(weird), env=(("FLEETCTL_HOME", str(weird)),),
            inventory=(str(weird / "i%.yaml"),),
            pattern="a:&b:!c", extra_vars=("x=$(touch /tmp/pwned) ; `id` 'q' %s %%",), nice=3, idle_io=True,
            randomized_delay="0")
    cmd, stdin = cron_sh_command(sch.cron_line(j))
    res = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    got = json.loads((weird / "cron.log").read_text())
    assert got == {"argv": j.argv()[1:], "cwd": str(weird), "home": str(weird)}


def test_cron_logs_a_failing_cd_and_keeps_cron_log_bounded(tmp_path):
    """Operator trial: the redirection covered only fleetctl, so ``can't cd`` (the folder the job was
    scheduled in, since removed) went to cron's mail; and cron.log grew by every night's JSON
    document with nothing pruning it. The whole command's output is logged, and a cron.log over
    CRON_LOG_KEEP_BYTES is moved to cron.log.1 (the one before replaced) when a run starts."""
    home = tmp_path / "state 100%"
    home.mkdir()
    fake = tmp_path / "fleetctl"
    fake.write_text("#!/bin/sh\necho ran in \"$(pwd)\"\n")
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def run_line(**kw) -> subprocess.CompletedProcess:
        cmd, stdin = cron_sh_command(sch.cron_line(job(tmp_path, fleetctl=(str(fake),), home=str(home), env=(),
                                                        timeout="infinity", **kw)))
        return subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=60,
                              env=env)

    res = run_line(workdir=str(tmp_path / "gone"))
    assert res.returncode != 0 and res.stdout == res.stderr == "", res  # nothing for cron to mail
    log = (home / "cron.log").read_text()
    assert "gone" in log and "ran in" not in log, log

    # at the limit: kept and appended to; over it: moved to cron.log.1 and a fresh log started
    os.truncate(home / "cron.log", sch.CRON_LOG_KEEP_BYTES)
    assert run_line(workdir=str(tmp_path)).returncode == 0
    assert not (home / "cron.log.1").exists()
    assert (home / "cron.log").stat().st_size > sch.CRON_LOG_KEEP_BYTES
    res = run_line(workdir=str(tmp_path))
    assert res.returncode == 0 and res.stdout == res.stderr == "", res
    assert (home / "cron.log").read_text() == f"ran in {tmp_path}\n"
    assert (home / "cron.log.1").stat().st_size > sch.CRON_LOG_KEEP_BYTES
    os.truncate(home / "cron.log", sch.CRON_LOG_KEEP_BYTES + 1)
    assert run_line(workdir=str(tmp_path)).returncode == 0
    assert (home / "cron.log").read_text() == f"ran in {tmp_path}\n"
    assert (home / "cron.log.1").stat().st_size == sch.CRON_LOG_KEEP_BYTES + 1  # the one before replaced
    assert sorted(p.name for p in home.iterdir()) == ["cron.log", "cron.log.1"]


OTHER_LINES = textwrap.dedent("""\
    # my own jobs
    MAILTO=ops@example.com
    SHELL=/bin/sh
    */5 * * * * /usr/local/bin/heartbeat  # fleetctl:fleetctl-nightly is mentioned, not marked
    0 3 * * * /usr/bin/backup --pct 10\\% # fleetctl:fleetctl-nightly2
    @reboot /usr/bin/true
    """)


def test_merge_crontab_adds_replaces_keeps_the_rest():
    a = "30 2 * * * run a # fleetctl:fleetctl-nightly"
    b = "45 4 * * * run b # fleetctl:fleetctl-nightly"
    text, action = sch.merge_crontab(OTHER_LINES, a, "fleetctl-nightly")
    assert action == "added" and text == OTHER_LINES + a + "\n"
    text2, action = sch.merge_crontab(text, b, "fleetctl-nightly")
    assert action == "replaced" and text2 == OTHER_LINES + b + "\n"
    assert sch.merge_crontab(text2, b, "fleetctl-nightly") == (text2, "unchanged")
    # our line in the middle stays in place; a duplicate is dropped; no final newline is fixed
    mid = "# top\n" + a + "\n0 1 * * * other\n" + a
    assert sch.merge_crontab(mid, b, "fleetctl-nightly") == ("# top\n" + b + "\n0 1 * * * other\n", "replaced")
    assert sch.merge_crontab("", a, "fleetctl-nightly") == (a + "\n", "added")
    assert sch.merge_crontab(a, a, "fleetctl-nightly") == (a + "\n", "unchanged")


FAKE_CRONTAB = """#!/bin/sh
# a crontab(1) that keeps the table in $FAKE_CRONTAB_FILE
case "$1" in
  -l) [ -f "$FAKE_CRONTAB_FILE" ] || { echo "no crontab for $(id -un)" >&2; exit 1; }
      cat "$FAKE_CRONTAB_FILE" ;;
  -) [ -n "$FAKE_CRONTAB_BROKEN" ] && { echo "crontab: permission denied" >&2; exit 1; }; cat > "$FAKE_CRONTAB_FILE" ;;
  *) echo "usage" >&2; exit 2 ;;
esac
"""


def fake_bin(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(text)
    p.chmod(0o755)
    return p


def test_install_cron_with_an_injected_crontab(tmp_path, monkeypatch):
    table = tmp_path / "table"
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    crontab = str(fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB))
    out, err = [], []
    j = job(tmp_path)
    assert schedule_install.install_cron(sch.cron_line(j), j.name, crontab=crontab, out=out.append, err=err.append) == 0
    assert table.read_text() == sch.cron_line(j) + "\n"
    table.write_text(OTHER_LINES + table.read_text())
    j2 = job(tmp_path, hour=4, minute=5)
    assert schedule_install.install_cron(sch.cron_line(j2), j.name, crontab=crontab, out=out.append, err=err.append) == 0
    assert table.read_text() == OTHER_LINES + sch.cron_line(j2) + "\n"
    assert out[-1] == "crontab: replaced # fleetctl:fleetctl-nightly"
    assert schedule_install.install_cron(sch.cron_line(j2), j.name, crontab=crontab, out=out.append, err=err.append) == 0
    assert out[-1] == "crontab: unchanged # fleetctl:fleetctl-nightly"
    # crontab - fails: says so, exit 1, table as it was
    monkeypatch.setenv("FAKE_CRONTAB_BROKEN", "1")
    before = table.read_text()
    assert schedule_install.install_cron(sch.cron_line(j), j.name, crontab=crontab, out=out.append, err=err.append) == 1
    assert "permission denied" in err[-1] and table.read_text() == before
    # crontab -l fails for another reason than "no crontab": nothing is overwritten
    bad = fake_bin(tmp_path / "bin2", "crontab", "#!/bin/sh\necho 'cannot open spool' >&2\nexit 1\n")
    assert schedule_install.install_cron(sch.cron_line(j), j.name, crontab=str(bad), out=out.append, err=err.append) == 1
    assert "crontab -l` failed" in err[-1] and "cannot open spool" in err[-1]
    assert schedule_install.install_cron("x", j.name, crontab=None, out=out.append, err=err.append) == 1
    assert "crontab not found" in err[-1]


FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMCTL_LOG"
[ -n "$FAKE_SYSTEMCTL_FAIL" ] && { echo "Failed to connect to bus: No medium found" >&2; exit 1; }
exit 0
"""


def test_install_systemd_with_an_injected_systemctl(tmp_path, monkeypatch):
    log = tmp_path / "systemctl.log"
    monkeypatch.setenv("FAKE_SYSTEMCTL_LOG", str(log))
    systemctl = str(fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL))
    units = {tmp_path / "u" / "n.service": "[Service]\n", tmp_path / "u" / "n.timer": "[Timer]\n"}
    out, err = [], []
    assert schedule_install.install_systemd(units, "n", system=False, systemctl=systemctl, out=out.append,
                                        err=err.append) == 0
    assert log.read_text() == "--user daemon-reload\n--user enable --now n.timer\n"
    assert out == [f"wrote {p}" for p in units]
    assert all(p.read_text() == t and (p.stat().st_mode & 0o777) == 0o644 for p, t in units.items())
    log.unlink()
    assert schedule_install.install_systemd(units, "n", system=True, systemctl=systemctl, out=out.append,
                                        err=err.append) == 0
    assert log.read_text() == "daemon-reload\nenable --now n.timer\n"
    assert out[-1] == f"unchanged {tmp_path / 'u' / 'n.timer'}"
    monkeypatch.setenv("FAKE_SYSTEMCTL_FAIL", "1")
    assert schedule_install.install_systemd(units, "n", system=False, systemctl=systemctl, out=out.append,
                                        err=err.append) == 1
    assert "`systemctl --user daemon-reload` failed (exit 1): Failed to connect to bus" in err[-2]
    assert "systemctl --user daemon-reload && systemctl --user enable --now n.timer" in err[-1]
    assert schedule_install.install_systemd(units, "n", system=False, systemctl=None, out=out.append,
                                        err=err.append) == 1
    assert "systemctl not found" in err[-1] and all(p.exists() for p in units)


def test_fleetctl_command(tmp_path):
    script = fake_bin(tmp_path / "venv" / "bin", "fleetctl", "#!/bin/sh\n")
    assert cli_schedule.fleetctl_command(str(script), "/x/python3") == (str(script.resolve()),)
    assert cli_schedule.fleetctl_command(str(REPO / "fleetctl" / "__main__.py"), "venv/bin/python3") == (
        os.path.abspath("venv/bin/python3"), "-m", "fleetctl")


# --------------------------------------------------------------------------------------------------
# The real CLI


def fleet(tmp_path: Path, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "FLEETCTL_INVENTORY")}
    full.update({"HOME": str(tmp_path / "home"), "FLEETCTL_HOME": str(tmp_path / "runs home %$'\""), **(env or {})})
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], capture_output=True, text=True, timeout=120,
                          env=full, cwd=cwd)


def fleet_dir(tmp_path: Path) -> Path:
    """A folder with a hostile name holding an inventory (a local host) and a one-task playbook."""
    d = tmp_path / "my fleet 100% \"q\" it's $X \\b"
    d.mkdir()
    (d / "inv.yaml").write_text("all:\n  children:\n    here:\n      hosts:\n        localhost:\n"
                                "          ansible_connection: local\n")
    (d / "pb.yaml").write_text("name: trivial\nhosts: here\ngather_facts: false\nvars: {greeting: world}\ntasks:\n"
                               "  - name: greet\n    command:\n      argv: [echo, \"hi {{ greeting }}\"]\n")
    return d


def split_printed(stdout: str) -> dict[str, str]:
    """--print output: ``# PATH`` then the file, for each file."""
    parts = re.split(r"^# (/\S.*\.(?:service|timer))\n", stdout, flags=re.M)
    assert parts[0] == "", parts[0]
    return {parts[i]: parts[i + 1].rstrip("\n") + "\n" for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("scope", ["--user", "--system"])
def test_cli_print_units_verify_and_really_run(tmp_path, scope):
    d = fleet_dir(tmp_path)
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--hosts", "here", "--at", "02:30",
                scope, "--print", "-e", "greeting=a b %s $HOME \"q\" \\", "--on-failure", "notify@%n.service",
                cwd=d)
    assert res.returncode == 0, res.stderr
    files = split_printed(res.stdout)
    unit_dir = Path("/etc/systemd/system") if scope == "--system" else tmp_path / "home/.config/systemd/user"
    assert sorted(files) == [str(unit_dir / "fleetctl-pb.service"), str(unit_dir / "fleetctl-pb.timer")]
    assert "enable --now fleetctl-pb.timer" in res.stderr
    assert not (tmp_path / "home").exists()  # --print touches nothing
    svc = unit_settings(files[str(unit_dir / "fleetctl-pb.service")])
    timer = unit_settings(files[str(unit_dir / "fleetctl-pb.timer")])
    assert timer["OnCalendar"] == ["*-*-* 02:30:00"] and timer["Persistent"] == ["true"]
    assert svc["Type"] == ["oneshot"] and svc["TimeoutStartSec"] == ["6h"]
    assert svc["OnFailure"] == ["notify@%n.service"]
    assert ("User" in svc) == (scope == "--system")
    argv = read_exec(svc["ExecStart"][0])
    home = str(tmp_path / "runs home %$'\"")
    vars_file = f"{home}/schedule/fleetctl-pb.vars.yaml"
    assert argv == [sys.executable, "-m", "fleetctl", "-i", str(d / "inv.yaml"), "deploy", "--hosts", "here",
                    "--playbook", str(d / "pb.yaml"), "-e", f"@{vars_file}", "--json"]
    assert "a b %s" not in res.stdout  # -e values never go into a unit file
    assert f"would write {vars_file}, mode 0600" in res.stderr and not Path(vars_file).exists()
    assert unquote_words(specifiers(svc["Environment"][0])) == [f"FLEETCTL_HOME={home}"]
    assert specifiers(svc["WorkingDirectory"][0]) == str(d)

    # systemd's own verdict on the files (user units need a runtime dir to verify as --user)
    udir = tmp_path / "verify"
    udir.mkdir()
    for path, text in files.items():
        (udir / Path(path).name).write_text(text)
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    verify = ["systemd-analyze", *(["--user"] if scope == "--user" else []), "verify",
              str(udir / "fleetctl-pb.service"), str(udir / "fleetctl-pb.timer")]
    v = subprocess.run(verify, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    assert v.returncode == 0, v.stderr
    assert not [ln for ln in v.stderr.splitlines() if "fleetctl-pb" in ln], v.stderr

    # what systemd would run, run: a real deploy whose record lands in FLEETCTL_HOME
    if scope == "--user":
        fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)  # install: the vars file is written
        installed = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--hosts", "here", "--at",
                          "02:30", "-e", "greeting=a b %s $HOME \"q\" \\", "--on-failure", "notify@%n.service",
                          cwd=d, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
                                      "FAKE_SYSTEMCTL_LOG": str(tmp_path / "systemctl.log")})
        assert installed.returncode == 0, installed.stderr
        assert oct(Path(vars_file).stat().st_mode & 0o777) == "0o600"
        assert oct(Path(vars_file).parent.stat().st_mode & 0o777) == "0o700"
        run = subprocess.run(argv, cwd=specifiers(svc["WorkingDirectory"][0]), capture_output=True, text=True,
                             timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                               "FLEETCTL_HOME": home})
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout)
        assert summary["status"] == "ok"
        record = json.loads((Path(home) / "runs" / summary["run_id"] / "run.json").read_text())
        assert record["status"] == "ok"
        host_log = (Path(home) / "runs" / summary["run_id"] / "logs/localhost.log").read_text()
        assert "hi a b %s $HOME \"q\" \\" in host_log


def test_cli_print_cron_line_really_deploys_through_sh(tmp_path):
    d = fleet_dir(tmp_path)
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "7:05", "--cron", "--print",
                "--name", "nightly", "-e", "greeting=50% off $(id) `id`", cwd=d)
    assert res.returncode == 0, res.stderr
    line = res.stdout.rstrip("\n")
    assert "\n" not in line and line.startswith("5 7 * * * log=" + shlex.quote(
        str(tmp_path / "runs home %$'\"") + "/cron.log").replace("%", "\\%") + "; [ -z ") and line.endswith(
        ' --json; } >> "$log" 2>&1 # fleetctl:nightly')
    assert "crontab" in res.stderr and not (tmp_path / "home").exists()
    assert "50" not in line.split("deploy", 1)[1].split("--json")[0]  # the -e value is not in the line
    home = tmp_path / "runs home %$'\""
    # install it (a fake crontab), which writes the vars file the line names
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    installed = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "7:05", "--cron",
                      "--name", "nightly", "-e", "greeting=50% off $(id) `id`", cwd=d,
                      env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(tmp_path / "tab")})
    assert installed.returncode == 0, installed.stderr
    assert (tmp_path / "tab").read_text() == line + "\n"
    cmd, stdin = cron_sh_command(line)
    run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": "/bin/sh"})
    assert run.returncode == 0, run.stderr
    log = (home / "cron.log").read_text()
    summary = json.loads(log[log.index("{\n"):log.rindex("}") + 1])
    assert summary["status"] == "ok"
    host_log = (home / "runs" / summary["run_id"] / "logs/localhost.log").read_text()
    assert "hi 50% off $(id) `id`" in host_log


def test_cli_installs_user_units_with_systemctl_on_path(tmp_path):
    d = fleet_dir(tmp_path)
    log = tmp_path / "systemctl.log"
    bin_dir = tmp_path / "bin"
    fake_bin(bin_dir, "systemctl", FAKE_SYSTEMCTL)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_SYSTEMCTL_LOG": str(log)}
    args = ["-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--name", "nightly"]
    res = fleet(tmp_path, *args, cwd=d, env=env)
    assert res.returncode == 0, res.stderr
    unit_dir = tmp_path / "home/.config/systemd/user"
    assert sorted(p.name for p in unit_dir.iterdir()) == ["nightly.service", "nightly.timer"]
    assert log.read_text() == "--user daemon-reload\n--user enable --now nightly.timer\n"
    assert "enabled nightly.timer: every day at 02:30" in res.stdout
    # the same units printed are the ones written
    printed = split_printed(fleet(tmp_path, *args, "--print", cwd=d, env=env).stdout)
    assert {Path(p).name: t for p, t in printed.items()} == {p.name: p.read_text() for p in unit_dir.iterdir()}
    # again, at another time: the files are updated in place
    res = fleet(tmp_path, *args[:-4], "--at", "03:00", "--name", "nightly", cwd=d, env=env)
    assert res.returncode == 0 and f"updated {unit_dir / 'nightly.timer'}" in res.stdout
    assert "OnCalendar=*-*-* 03:00:00\n" in (unit_dir / "nightly.timer").read_text()
    # XDG_CONFIG_HOME is where the user manager looks first
    res = fleet(tmp_path, *args, cwd=d, env={**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert res.returncode == 0 and (tmp_path / "xdg/systemd/user/nightly.timer").exists()


def test_cli_without_systemctl_or_with_failing_systemctl_exits_1_and_keeps_files(tmp_path):
    d = fleet_dir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30"]
    res = fleet(tmp_path, *args, cwd=d, env={"PATH": str(empty)})
    assert res.returncode == 1
    assert "systemctl not found" in res.stderr
    assert "systemctl --user daemon-reload && systemctl --user enable --now fleetctl-pb.timer" in res.stderr
    assert (tmp_path / "home/.config/systemd/user/fleetctl-pb.service").exists()
    fake_bin(tmp_path / "bin", "systemctl", FAKE_SYSTEMCTL)
    res = fleet(tmp_path, *args, cwd=d, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_SYSTEMCTL_FAIL": "1",
                                             "FAKE_SYSTEMCTL_LOG": str(tmp_path / "log")})
    assert res.returncode == 1
    assert "Failed to connect to bus" in res.stderr and "enable it with" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_cron_install_is_idempotent_among_other_lines(tmp_path):
    d = fleet_dir(tmp_path)
    table = tmp_path / "table"
    table.write_text(OTHER_LINES)
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(table)}
    args = ["-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--cron", "--name", "nightly"]
    for at, action in (("02:30", "added"), ("02:30", "unchanged"), ("04:15", "replaced")):
        res = fleet(tmp_path, *args, "--at", at, cwd=d, env=env)
        assert res.returncode == 0, res.stderr
        assert f"crontab: {action} # fleetctl:nightly" in res.stdout
    lines = table.read_text().splitlines()
    assert lines[:-1] == OTHER_LINES.splitlines()
    assert lines[-1].startswith("15 4 * * * ") and lines[-1].endswith(" # fleetctl:nightly")
    assert (tmp_path / "runs home %$'\"").is_dir()  # made for cron.log


def test_an_extra_var_the_job_play_does_not_read_is_named_when_scheduling(tmp_path):
    """-e of a job is checked as a deploy's (new-user trial: a misspelt -e was accepted silently):
    one warning line with the closest name the play reads; the job is written all the same."""
    d = fleet_dir(tmp_path)
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--print",
                "-e", "greting=there", "-e", "greeting=you", cwd=d)
    assert res.returncode == 0, res.stderr
    warned = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert warned == ["fleetctl: warning: -e greting: no task or template of pb.yaml reads it, nor does fleetctl; "
                      "did you mean greeting?"], res.stderr
    assert "with: greting=there greeting=you" in res.stderr  # kept in the job: Ansible's extra vars are free-form


def test_an_extra_var_given_as_json_is_carried_by_the_job_and_checked_as_deploys(tmp_path):
    """-e as Ansible's JSON/YAML mapping (new-user trial: refused): its vars go into the job's vars
    file with their types (a secret-looking name marked secret), are named by the did-you-mean
    warning and checked by a task argument's validator now, and the job really deploys with them."""
    d = fleet_dir(tmp_path)
    given = '{"greting": "there", "greeting": "json you", "n": [1, 2], "hf_token": "s3cret"}'
    args = ["-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--cron", "--name", "nightly",
            "-e", given]
    res = fleet(tmp_path, *args, "--print", cwd=d)
    assert res.returncode == 0, res.stderr
    unread = "no task or template of pb.yaml reads it, nor does fleetctl"
    assert [ln for ln in res.stderr.splitlines() if "warning" in ln] == [
        f"fleetctl: warning: -e greting: {unread}; did you mean greeting?",
        f"fleetctl: warning: -e n: {unread}; it is ignored", f"fleetctl: warning: -e hf_token: {unread}; it is ignored"]
    assert "with: greting=there greeting=json you n=[1, 2] hf_token=********)" in res.stderr
    assert "s3cret" not in res.stdout + res.stderr
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    installed = fleet(tmp_path, *args, cwd=d, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
                                                   "FAKE_CRONTAB_FILE": str(tmp_path / "tab")})
    assert installed.returncode == 0, installed.stderr
    home = tmp_path / "runs home %$'\""
    assert yaml.safe_load((home / "schedule/nightly.vars.yaml").read_text()) == {
        "greting": "there", "greeting": "json you", "n": [1, 2], "hf_token": {"value": "s3cret", "secret": True}}
    cmd, stdin = cron_sh_command((tmp_path / "tab").read_text().rstrip("\n"))
    run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": "/bin/sh"})
    assert run.returncode == 0, run.stderr
    log = (home / "cron.log").read_text()
    summary = json.loads(log[log.index("{\n"):log.rindex("}") + 1])
    assert "hi json you" in (home / "runs" / summary["run_id"] / "logs/localhost.log").read_text()

    # a value the play's task cannot take is refused now, as deploy refuses it, not at 02:30
    (d / "build.yaml").write_text("name: build\nhosts: here\ntasks:\n  - name: build\n    build_wheel:\n"
                                  "      src: /nonexistent/src\n      out_dir: /nonexistent/wheels\n"
                                  "      archs: \"{{ archs | default(none) }}\"\n")
    for item in ('{"archs": "sm_90a"}', "archs=sm_90a"):
        res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "build.yaml", "--at", "02:30", "--print",
                    "-e", item, cwd=d)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip() == (
            "fleetctl: error: -e archs: must look like '9.0a;12.0a' (compute capabilities with an optional a/f "
            "suffix, ';'-separated), got 'sm_90a'; did you mean '9.0a'?")


def test_the_job_keeps_the_order_of_e_items_so_a_later_one_wins_as_in_deploy(tmp_path):
    """-e pairs and -e @FILE items keep their order in the job (trial: the pairs were always put
    after every @FILE, so `-e greeting=cli -e @site.yaml` deployed 'cli' at night where deploy
    gives the file's value): each run of pairs is its own private vars file at its place; the job
    really runs and greets as the same deploy run by hand does; scheduled again without pairs,
    the job's vars files are removed."""
    d = fleet_dir(tmp_path)
    site = d / "site.yaml"
    site.write_text("greeting: from the file\n")
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(tmp_path / "tab")}
    home = tmp_path / "runs home %$'\""
    for items, want in ((["-e", "greeting=first", "-e", f"@{site}", "-e", "other=x"], "hi from the file"),
                        (["-e", f"@{site}", "-e", "greeting=last"], "hi last")):
        by_hand = fleet(tmp_path, "-i", "inv.yaml", "deploy", "--playbook", "pb.yaml", *items, cwd=d)
        assert by_hand.returncode == 0 and want in by_hand.stdout, by_hand.stdout + by_hand.stderr
        res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--cron",
                    "--name", "nightly", *items, cwd=d, env=env)
        assert res.returncode == 0, res.stderr
        cmd, stdin = cron_sh_command((tmp_path / "tab").read_text().rstrip("\n"))
        run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": "/bin/sh"})
        assert run.returncode == 0, run.stderr
        log = (home / "cron.log").read_text()
        summary = json.loads(log[log.rindex("\n{\n") + 1:log.rindex("}") + 1])
        assert want in (home / "runs" / summary["run_id"] / "logs/localhost.log").read_text()
    assert (home / "schedule/nightly.vars-2.yaml").exists() is False  # the second scheduling had one run of pairs
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30", "--cron",
                "--name", "nightly", "-e", f"@{site}", cwd=d, env=env)
    assert res.returncode == 0, res.stderr
    assert not list((home / "schedule").glob("nightly.vars*.yaml"))


def test_a_relative_e_file_is_the_one_in_the_folder_schedule_ran_in(tmp_path):
    """Operator trial: ``schedule ... --cron --print -e @ev_ok.yml`` (a path relative to the current
    folder) raised ``KeyError: 'ev_ok.yml'``: the vars files were checked and keyed by their
    absolute path, then looked up by the path as given. The job names the file by its absolute
    path (it runs at night, not from this shell), and running it reads that file."""
    d = fleet_dir(tmp_path)
    (d / "ev_ok.yml").write_text("greeting: from the relative file\n")
    fake_bin(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "FAKE_CRONTAB_FILE": str(tmp_path / "tab")}
    args = ["-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--hosts", "here", "--at", "02:30", "--cron"]
    printed = fleet(tmp_path, *args, "--print", "-e", "@ev_ok.yml", cwd=d, env=env)
    assert printed.returncode == 0, printed.stderr
    assert shlex.quote(f"@{d / 'ev_ok.yml'}") in cron_sh_command(printed.stdout.splitlines()[0])[0], printed.stdout
    res = fleet(tmp_path, *args, "-e", "@./ev_ok.yml", cwd=d, env=env)
    assert res.returncode == 0, res.stderr
    cmd, stdin = cron_sh_command((tmp_path / "tab").read_text().rstrip("\n"))
    assert shlex.quote(f"@{d / 'ev_ok.yml'}") in cmd, cmd
    run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": "/bin/sh"}, cwd="/")
    assert run.returncode == 0, run.stderr
    home = tmp_path / "runs home %$'\""
    log = (home / "cron.log").read_text()
    summary = json.loads(log[log.rindex("\n{\n") + 1:log.rindex("}") + 1])
    assert "hi from the relative file" in (home / "runs" / summary["run_id"] / "logs/localhost.log").read_text()


@pytest.mark.parametrize("args,message", [
    (["--at", "25:00"], "fleetctl: error: --at: want HH:MM on a 24-hour clock (00:00 to 23:59), got '25:00'"),
    (["--at", "02:30", "--name", "my job"], "fleetctl: error: --name: 'my job' is not a usable unit name"),
    (["--at", "02:30", "--timeout", "6 hrs"], "fleetctl: error: --timeout: want a time span"),
    (["--at", "02:30", "--randomized-delay", "infinity"], "fleetctl: error: --randomized-delay: infinity"),
    (["--at", "02:30", "-e", "novalue"], "fleetctl: error: -e/--extra-var wants NAME=VALUE"),
    (["--at", "02:30", "-e", '{"greeting": "x"'], "fleetctl: error: -e '{\"greeting\": \"x\"': not a JSON/YAML mapping"),
    (["--at", "02:30", "--on-failure", "mail me"], "fleetctl: error: --on-failure: 'mail me' is not a unit"),
    (["--at", "02:30", "--cron", "--system"], "fleetctl: error: --system: --cron writes the current user's"),
    (["--at", "02:30", "--cron", "--on-failure", "x.service"], "fleetctl: error: --on-failure: names a systemd"),
    (["--at", "02:30", "--playbook", "nope.yaml"], "nope.yaml: --playbook: playbook file not found"),
    (["--at", "02:30", "--hosts", "nosuchgroup"], "nosuchgroup"),
    (["--at", "02:30", "-i", "missing.yaml"], "inventory file not found"),
    ([], "--at HH:MM: required (or --remove to unschedule)"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, message):
    d = fleet_dir(tmp_path)
    args = list(args)
    inv = ["-i", args.pop(args.index("-i") + 1)] if "-i" in args else ["-i", "inv.yaml"]
    if "-i" in args:
        args.remove("-i")
    if "--playbook" not in args:
        args = [*args, "--playbook", "pb.yaml"]
    res = fleet(tmp_path, *inv, "schedule", *args, "--print", cwd=d)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert message in res.stderr and res.stdout == ""


def test_help_lists_the_command():
    res = subprocess.run([sys.executable, "-m", "fleetctl", "--help"], capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert re.search(r"^\s+schedule\s", res.stdout, re.M), res.stdout
    assert shutil.which("systemd-analyze"), "systemd-analyze is needed (Debian package systemd; .ci/run installs it)"


def test_without_fleetctl_home_the_job_uses_the_default_state_folder_and_runs_lists_its_runs(tmp_path):
    """FLEETCTL_HOME is carried only when the user set it: otherwise the unit and the cron line set
    no FLEETCTL_HOME (never the current folder), cron.log is in the state folder, and the job's run
    lands where interactive runs are, so ``fleetctl runs`` from any folder lists it."""
    d = fleet_dir(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CONFIG_HOME", "FLEETCTL_INVENTORY", "FLEETCTL_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = str(tmp_path / "home")
    state = tmp_path / "home/.local/state/fleetctl"

    def cli(*args, cwd=d, **more):
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], capture_output=True, text=True,
                              timeout=300, env={**env, **more}, cwd=cwd)

    units = split_printed(cli("-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "02:30",
                              "--print").stdout)
    svc = unit_settings(units[str(tmp_path / "home/.config/systemd/user/fleetctl-pb.service")])
    assert "Environment" not in svc
    res = cli("-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "7:05", "--cron", "--print",
              "--name", "nightly")
    assert res.returncode == 0, res.stderr
    line = res.stdout.rstrip("\n")
    assert "FLEETCTL_HOME" not in line and str(d) not in line.split(">>", 1)[1]
    assert line.startswith("5 7 * * * log=" + shlex.quote(str(state / "cron.log")) + "; ")
    assert line.endswith('; } >> "$log" 2>&1 # fleetctl:nightly')
    state.mkdir(parents=True)  # schedule (not --print) makes it
    cmd, stdin = cron_sh_command(line)
    run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "SHELL": "/bin/sh"})
    assert run.returncode == 0, run.stderr
    log = (state / "cron.log").read_text()
    run_id = json.loads(log[log.index("{\n"):log.rindex("}") + 1])["run_id"]
    assert not (d / "runs").exists()
    assert (state / "runs" / run_id / "run.json").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = cli("runs", "--json", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout

    # with XDG_STATE_HOME set, that is what the job carries (its runs go where this user's go)
    xdg = tmp_path / "xdg-state"
    res = cli("-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "7:05", "--cron", "--print",
              "--name", "nightly", XDG_STATE_HOME=str(xdg))
    assert f"XDG_STATE_HOME={shlex.quote(str(xdg))} " in res.stdout and "FLEETCTL_HOME" not in res.stdout
    assert shlex.quote(str(xdg / "fleetctl/cron.log")) in res.stdout


def test_cli_schedule_carries_o_options_into_the_job(tmp_path):
    """``fleetctl -o Port=2222 schedule ...``: the unattended deploy connects as the command that
    scheduled it would (the checked ``-o`` options ride in the job's command line)."""
    d = fleet_dir(tmp_path)
    res = fleet(tmp_path, "-i", "inv.yaml", "-o", "port 2222", "-o", "ConnectTimeout=5", "schedule", "--playbook",
                "pb.yaml", "--at", "7:05", "--cron", "--print", "--name", "nightly", cwd=d)
    assert res.returncode == 2 and "-o ConnectTimeout=5: fleetctl sets this itself: use --connect-timeout" in res.stderr  # refused first
    res = fleet(tmp_path, "-i", "inv.yaml", "-o", "port 2222", "schedule", "--playbook", "pb.yaml", "--at", "7:05",
                "--cron", "--print", "--name", "nightly", cwd=d)
    assert res.returncode == 0, res.stderr
    assert " -o Port=2222 deploy --hosts " in res.stdout


def job_inventory(argv: list[str]) -> list[str]:
    """The ``-i`` values of a job's fleetctl argv (those before the command)."""
    head = argv[:argv.index("deploy")]
    return [head[i + 1] for i, a in enumerate(head) if a == "-i"]


def printed_job_argvs(tmp_path: Path, *args: str, cwd: Path, env: dict | None = None) -> dict[str, list[str]]:
    """The job's argv as ``schedule --print`` writes it: read back from the cron line (through cron's
    % rule and sh's words) and from the unit's ExecStart= (systemd's quoting)."""
    out = {}
    for kind in ("cron", "systemd"):
        res = fleet(tmp_path, *args, *(["--cron"] if kind == "cron" else []), "--print", cwd=cwd, env=env)
        assert res.returncode == 0, res.stderr
        if kind == "cron":
            cmd, _ = cron_sh_command(res.stdout.rstrip("\n"))
            words = shlex.split(cmd.split(" >> ", 1)[0])
            out[kind] = words[words.index("-i") - 1:]
        else:
            svc = [t for p, t in split_printed(res.stdout).items() if p.endswith(".service")][0]
            out[kind] = read_exec(unit_settings(svc)["ExecStart"][0])
    return out


def test_cli_job_carries_every_inventory_source_in_order_each_path_absolute(tmp_path):
    """``-i inv.yaml -i extra.yaml -i FOLDER``: the job reads the same inventory as the command that
    scheduled it (issue: only the first -i was kept, a folder was refused)."""
    d = fleet_dir(tmp_path)
    (d / "extra vars.yaml").write_text("all:\n  vars:\n    max_jobs: 1\n")
    folder = tmp_path / "inv dir 100%"
    folder.mkdir()
    (folder / "more.yaml").write_text("all:\n  vars:\n    greeting: folder\n")
    argvs = printed_job_argvs(tmp_path, "-i", "inv.yaml", "-i", "extra vars.yaml", "-i", os.path.relpath(folder, d),
                              "schedule", "--playbook", "pb.yaml", "--at", "02:30", cwd=d)
    for kind, argv in argvs.items():
        assert job_inventory(argv) == [str(d / "inv.yaml"), str(d / "extra vars.yaml"), str(folder)], kind


def test_cli_job_carries_a_slurm_source_as_written(tmp_path):
    """``-i slurm: -i site.yaml``: slurm: is no path; the job passes it on as given."""
    d = fleet_dir(tmp_path)
    (d / "site.yaml").write_text("all:\n  vars:\n    max_jobs: 1\n")
    fake_bin(tmp_path / "bin", "sinfo", "#!/bin/sh\necho 'n1|gpu*|idle|2|1000|sm_90,h200|sm_90,h200|gpu:h200:1|"
                                        "10.200.0.11|Unknown|Unknown|none'\n")
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    argvs = printed_job_argvs(tmp_path, "-i", "slurm:", "-i", "site.yaml", "schedule", "--playbook", "pb.yaml",
                              "--hosts", "n1", "--at", "02:30", cwd=d, env=env)
    for kind, argv in argvs.items():
        assert job_inventory(argv) == ["slurm:", str(d / "site.yaml")], kind


@pytest.mark.parametrize("first", ["inv.yaml", "slurm:"])
@pytest.mark.parametrize("missing", ["nope.yaml", "no such dir/"])
def test_cli_a_missing_inventory_source_is_refused_in_one_line_exit_2(tmp_path, first, missing):
    """Each path is checked now and the missing one named (before: -i slurm: was named as the
    missing file, whatever came after it)."""
    d = fleet_dir(tmp_path)
    fake_bin(tmp_path / "bin", "sinfo", "#!/bin/sh\necho 'n1|gpu*|idle|2|1000|(null)|(null)|(null)|n1|Unknown|"
                                        "Unknown|none'\n")
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    for cron in ([], ["--cron"]):
        res = fleet(tmp_path, "-i", first, "-i", missing, "schedule", "--playbook", "pb.yaml", "--at", "02:30",
                    *cron, "--print", cwd=d, env=env)
        assert res.returncode == 2, (res.stdout, res.stderr)
        assert res.stderr.strip().splitlines() == [f"fleetctl: error: {missing}: inventory file not found "
                                                   "(-i/--inventory or FLEETCTL_INVENTORY)"]
        assert res.stdout == ""


def test_cli_a_slurm_job_carries_the_launcher_and_slurm_conf_and_really_deploys_from_cron(slurm_cluster, tmp_path):
    """The job is started by cron/systemd with an environment of its own: FLEETCTL_SLURM_LAUNCHER and
    SLURM_CONF of the scheduling shell go into the line and the unit, so the nightly run reaches the
    same cluster through the same launcher (real test cluster; here the launcher only enters the
    cluster's network and SLURM_CONF alone names the cluster, so each is needed)."""
    d = fleet_dir(tmp_path)
    launcher = f"nsenter --net=/run/netns/{slurm_cluster.ns}-ctl"
    env = {"FLEETCTL_SLURM_LAUNCHER": launcher, "SLURM_CONF": str(slurm_cluster.conf), "SALLOC_QOS": ""}
    args = ("-i", "slurm:", "schedule", "--playbook", "pb.yaml", "--hosts", "n1", "--at", "7:05", "--name", "nightly")
    unit = fleet(tmp_path, *args, "--print", cwd=d, env=env)
    assert unit.returncode == 0, unit.stderr
    svc = [t for p, t in split_printed(unit.stdout).items() if p.endswith(".service")][0]
    carried = [w for v in unit_settings(svc)["Environment"] for w in unquote_words(specifiers(v))]
    assert carried[-2:] == [f"FLEETCTL_SLURM_LAUNCHER={launcher}", f"SLURM_CONF={slurm_cluster.conf}"], carried
    res = fleet(tmp_path, *args, "--cron", "--print", cwd=d, env=env)
    assert res.returncode == 0, res.stderr
    line = res.stdout.rstrip("\n")
    cmd, stdin = cron_sh_command(line)
    (tmp_path / "runs home %$'\"").mkdir()  # as installing the line does (cron.log goes there)
    # what cron runs, run with cron's bare environment: a real deploy on n1 of the real cluster
    run = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHELL": "/bin/sh",
                              **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})
    log = (tmp_path / "runs home %$'\"" / "cron.log").read_text()
    assert run.returncode == 0, log[-3000:]
    summary = json.loads(log[log.index("{\n"):log.rindex("}") + 1])
    assert summary["status"] == "ok" and list(summary["hosts"]) == ["n1"], summary
    assert slurm_cluster.jobs() == []


def test_cli_a_job_without_slurm_carries_no_slurm_variables(tmp_path):
    d = fleet_dir(tmp_path)
    res = fleet(tmp_path, "-i", "inv.yaml", "schedule", "--playbook", "pb.yaml", "--at", "7:05", "--cron", "--print",
                cwd=d, env={"FLEETCTL_SLURM_LAUNCHER": "ssh login01", "SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert res.returncode == 0, res.stderr
    assert "SLURM" not in res.stdout, res.stdout
