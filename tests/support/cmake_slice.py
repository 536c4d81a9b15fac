"""A small CMake reader: statements, top-level units, and the probe project the sgl-kernel checks
configure with a real ``cmake``.

The sgl-kernel CMakeLists cannot be configured here as a whole (it needs CUDA, torch and a dozen
fetched repositories), but the logic the patch script changes can: the policy settings, the
include directories, the FA3 switch and nvcc's ``--threads``. :func:`probe_project` keeps, in the
order the file has them, the top-level units that touch those, with only side-effect-free
commands inside (``set``, ``option``, ``list``, ``if`` ...), and replaces the command that builds
FA3's module (``flash_ops``) with a message. CMake itself then evaluates the real conditions.

The grammar is CMake's (cmake-language(7)): commands ``name(args)``, quoted and bracket
arguments, line and bracket comments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Commands kept in the probe: they only set variables, policies or directory properties.
PURE = frozenset({
    "set", "unset", "option", "list", "string", "math", "message", "cmake_policy", "include_directories",
    "if", "elseif", "else", "endif", "foreach", "endforeach",
})
OPENERS = {"if": "endif", "foreach": "endforeach", "while": "endwhile", "function": "endfunction",
           "macro": "endmacro", "block": "endblock"}
#: Names whose mention makes a unit part of the probe.
TOUCHES = re.compile(
    r"\b(?:SGL_KERNEL_ENABLE_FA3|BUILD_FA3|DEFAULT_SGL_KERNEL_ENABLE_FA3|FLEETCTL_SGL_KERNEL_FA3_EXPLICIT"
    r"|SGL_KERNEL_COMPILE_THREADS|SGL_KERNEL_CUDA_FLAGS|_fleetctl_cuda_include_dir)\b|--threads|cmake_policy",
    re.IGNORECASE)
FA3_MODULE = re.compile(r"^\s*flash_ops\b")
PROBE_MARK = "FLEETCTL_PROBE"


@dataclass
class Statement:
    name: str  # lower case
    args: str
    line: int  # 1-based line of the command name
    start: int  # offsets into the source
    end: int

    def text(self, source: str) -> str:
        return source[self.start:self.end]


_BRACKET_OPEN = re.compile(r"\[(=*)\[")


def statements(source: str) -> list[Statement]:
    """The commands of a CMake file, in order.

    Raises:
        ValueError: an unterminated quoted/bracket argument or parenthesis (names the line).
    """
    out = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch == "#":
            m = _BRACKET_OPEN.match(source, i + 1)
            if m:
                close = source.find("]" + m.group(1) + "]", m.end())
                i = n if close < 0 else close + len(m.group(1)) + 2
            else:
                nl = source.find("\n", i)
                i = n if nl < 0 else nl + 1
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(source, i)
        if not m:
            i += 1
            continue
        j = m.end()
        while j < n and source[j] in " \t":
            j += 1
        if j >= n or source[j] != "(":
            i = m.end()
            continue
        depth, k = 0, j
        while k < n:
            c = source[k]
            if c == '"':
                k += 1
                while k < n and source[k] != '"':
                    k += 2 if source[k] == "\\" else 1
            elif c == "[" and _BRACKET_OPEN.match(source, k):
                bm = _BRACKET_OPEN.match(source, k)
                close = source.find("]" + bm.group(1) + "]", bm.end())
                if close < 0:
                    raise ValueError(f"line {source.count(chr(10), 0, k) + 1}: unterminated bracket argument")
                k = close + len(bm.group(1)) + 1
            elif c == "#":
                nl = source.find("\n", k)
                k = n if nl < 0 else nl - 1
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if k >= n:
            raise ValueError(f"line {source.count(chr(10), 0, i) + 1}: {m.group(0)}( is never closed")
        out.append(Statement(m.group(0).lower(), source[j + 1:k], source.count("\n", 0, i) + 1, i, k + 1))
        i = k + 1
    return out


def strip_comments(args: str) -> str:
    """A command's arguments without ``#`` comments (outside quoted arguments)."""
    out, in_quote, escaped, skip = [], False, False, False
    for ch in args:
        if skip:
            if ch == "\n":
                skip = False
                out.append(ch)
            continue
        if in_quote:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_quote = False
        elif ch == "#":
            skip = True
        else:
            in_quote = ch == '"'
            out.append(ch)
    return "".join(out)


def units(stmts: list[Statement]) -> list[list[Statement]]:
    """Top-level units: a block (``if`` ... ``endif``, ``foreach`` ..., ``function`` ...) or one command."""
    out: list[list[Statement]] = []
    stack: list[str] = []
    for st in stmts:
        if not stack:
            out.append([])
        out[-1].append(st)
        if st.name in OPENERS:
            stack.append(OPENERS[st.name])
        elif stack and st.name == stack[-1]:
            stack.pop()
    return out


def _unit_text(unit: list[Statement], source: str) -> str:
    return "\n".join(st.text(source) for st in unit)


def fa3_module_statement(stmts: list[Statement]) -> Statement | None:
    """The command that builds FA3's own module ``flash_ops`` (``Python_add_library(flash_ops ...``)."""
    for st in stmts:
        if st.name in ("python_add_library", "add_library") and FA3_MODULE.match(st.args):
            return st
    return None


def probe_project(source: str, *, keep_policies: bool = True) -> str:
    """The probe CMake project for one CMakeLists (see the module docstring).

    It prints ``FLEETCTL_PROBE FA3_MODULE=built`` when the block building ``flash_ops`` runs, and
    last ``FLEETCTL_PROBE INCS=<directory include dirs>`` and ``FLEETCTL_PROBE FLAGS=<SGL_KERNEL_CUDA_FLAGS>``.
    ``keep_policies=False`` drops ``cmake_policy`` commands (an unpatched tree on an older CMake).
    """
    stmts = statements(source)
    target = fa3_module_statement(stmts)
    out = ["cmake_minimum_required(VERSION 3.20...3.31)", "project(fleetctl_sgl_probe LANGUAGES NONE)"]
    for unit in units(stmts):
        has_target = target is not None and any(st is target for st in unit)
        if unit[0].name in ("function", "macro"):
            continue
        if not has_target and not (TOUCHES.search(_unit_text(unit, source))
                                   or unit[0].name == "include_directories"):
            continue
        for st in unit:
            if st is target:
                out.append(f'message(STATUS "{PROBE_MARK} FA3_MODULE=built")')
            elif st.name in PURE and (keep_policies or st.name != "cmake_policy"):
                out.append(st.text(source))
        if has_target:
            break
    out += [
        "get_directory_property(_fleetctl_probe_incs INCLUDE_DIRECTORIES)",
        f'message(STATUS "{PROBE_MARK} INCS=${{_fleetctl_probe_incs}}")',
        f'message(STATUS "{PROBE_MARK} FLAGS=${{SGL_KERNEL_CUDA_FLAGS}}")',
    ]
    return "\n".join(out) + "\n"


def probe_results(cmake_stdout: str) -> dict[str, str]:
    """``{"FA3_MODULE": "built", "INCS": "...", "FLAGS": "..."}`` from a configure's output."""
    found = {}
    for line in cmake_stdout.splitlines():
        m = re.search(PROBE_MARK + r" (\w+)=(.*)$", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found
