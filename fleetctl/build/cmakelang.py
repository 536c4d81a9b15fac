"""CMake's command-invocation grammar (cmake-language(7)), enough to read what a file calls: every
``name(args)`` with quoted (``"..."`` with ``\\`` escapes), bracket (``[=[...]=]``) and unquoted
arguments; ``#`` line and ``#[[...]]`` bracket comments skipped. Pure; variables are left as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class CMakeSyntaxError(ValueError):
    """A file the grammar cannot read: ``file:line: construct: why`` (one line)."""

    def __init__(self, file: str, line: int, construct: str, why: str) -> None:
        self.file, self.line, self.construct, self.why = file, line, construct, why
        super().__init__(f"{file}:{line}: {construct}: {why}")


@dataclass
class Command:
    """One command invocation: its name as written, arguments (unquoted), 1-based line, file."""

    name: str
    args: list[str]
    line: int
    file: str
    quoted: list[bool] = field(default_factory=list)


def parse_commands(text: str, file: str) -> list[Command]:
    """Every command invocation of a CMake file, arguments unquoted (variables left as written).

    Raises:
        CMakeSyntaxError: an unterminated quoted/bracket argument or a missing ``)``.
    """
    out: list[Command] = []
    i, n, line = 0, len(text), 1
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c == "#":
            i, line = _skip_comment(text, i, line, file)
        elif c.isspace():
            i += 1
        else:
            m = ident.match(text, i)
            if not m:  # stray text: not a command (the CMake grammar allows none); skip the line
                j = text.find("\n", i)
                i = n if j < 0 else j
                continue
            j = m.end()
            while j < n and text[j] in " \t":
                j += 1
            if j >= n or text[j] != "(":
                i = m.end()
                continue
            cmd = Command(name=m.group(0), args=[], line=line, file=file)
            i, line = _read_args(text, j + 1, line, cmd)
            out.append(cmd)
    return out


def _skip_comment(text: str, i: int, line: int, file: str) -> tuple[int, int]:
    m = re.match(r"#\[(=*)\[", text[i:])
    if m:
        close = "]" + m.group(1) + "]"
        end = text.find(close, i + m.end())
        if end < 0:
            raise CMakeSyntaxError(file, line, "#[[ comment", "never closed")
        line += text.count("\n", i, end)
        return end + len(close), line
    j = text.find("\n", i)
    return (len(text) if j < 0 else j), line


def _read_args(text: str, i: int, line: int, cmd: Command) -> tuple[int, int]:
    n, depth, start_line = len(text), 0, line
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            i, line = _skip_comment(text, i, line, cmd.file)
        elif c == ")":
            if depth == 0:
                return i + 1, line
            depth -= 1
            i += 1
        elif c == "(":
            depth += 1
            i += 1
        elif c == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    nxt = text[j + 1]
                    if nxt == "\n":  # a line continuation
                        line += 1
                    else:
                        buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
                    j += 2
                    continue
                if text[j] == "\n":
                    line += 1
                buf.append(text[j])
                j += 1
            if j >= n:
                raise CMakeSyntaxError(cmd.file, start_line, f"{cmd.name}(", "a quoted argument is never closed")
            cmd.args.append("".join(buf))
            cmd.quoted.append(True)
            i = j + 1
        elif text.startswith("[", i) and re.match(r"\[=*\[", text[i:]):
            m = re.match(r"\[(=*)\[", text[i:])
            close = "]" + m.group(1) + "]"
            end = text.find(close, i + m.end())
            if end < 0:
                raise CMakeSyntaxError(cmd.file, start_line, f"{cmd.name}(", "a bracket argument is never closed")
            body = text[i + m.end():end]
            line += body.count("\n")
            cmd.args.append(body[1:] if body.startswith("\n") else body)
            cmd.quoted.append(True)
            i = end + len(close)
        else:
            m = re.compile(r'(?:[^\s()#"\\]|\\.)+').match(text, i)
            cmd.args.append(m.group(0))
            cmd.quoted.append(False)
            i = m.end()
    raise CMakeSyntaxError(cmd.file, start_line, f"{cmd.name}(", "the command's ) is missing")
