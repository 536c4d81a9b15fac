#!/usr/bin/env python3
"""Patch an sgl-kernel source tree so that it builds on the fleet's hosts.

Usage::

    python3 patch_sgl_kernel.py [--dry-run] [--check] SGL_KERNEL_DIR

Runs on the target host: standard library only, any Python >= 3.8.

SGL_KERNEL_DIR is either the sgl-kernel directory itself (the one holding ``CMakeLists.txt`` and
``python/sgl_kernel/``) or the root of an sglang checkout, in either layout:

* up to 2025: ``<root>/sgl-kernel/CMakeLists.txt`` and ``<root>/sgl-kernel/python/sgl_kernel/``
* from 2026:  ``<root>/python/sglang/kernels/aot/CMakeLists.txt`` and
  ``<root>/python/sglang/kernels/aot/python/sgl_kernel/``

The patches, and the failure each one ends (docs/sgl-kernel-patch.md tells each one's story):

``cmake-policy-guards``
    Every ``cmake_policy(SET CMPxxxx NEW|OLD)`` in the top-level CMakeLists.txt that is not already
    inside ``if(POLICY CMPxxxx)`` is wrapped in one. sgl-kernel sets policies that only newer CMakes
    know (CMP0169 needs 3.30, CMP0177 needs 3.31; the set grew over the years), and
    ``cmake_policy(SET CMP0177 NEW)`` is a fatal "policy is not known" error on CMake 3.28.
    A guarded policy is simply skipped by a CMake that does not know it.

``cuda13-cccl-include``
    CUDA 13 moved CUB, Thrust and libcu++ from ``<toolkit>/include`` to ``<toolkit>/include/cccl``
    (``/usr/local/cuda/targets/x86_64-linux/include/cccl``). nvcc adds that directory by itself, the
    host C++ compiler does not, so host sources that reach ``<cuda/std/...>`` or ``<thrust/...>``
    (through the CUTLASS headers) stop compiling. After the first top-level
    ``include_directories(...)`` (or, failing that, ``set(INCLUDES ...)``) a block is added that,
    when ``CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0``, adds ``<dir>/cccl`` for each
    CUDA include directory CMake knows (``CUDAToolkit_INCLUDE_DIRS``,
    ``CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES``, ``${CUDA_TOOLKIT_ROOT_DIR}/include``) that has one.
    Not needed when the CMakeLists already names a ``cccl`` include directory itself.

``fa3-respect-option``
    FA3 (Hopper-only code; it does not build for SM120) must follow an explicit
    ``-DSGL_KERNEL_ENABLE_FA3=ON|OFF``. Which variable switches FA3 is read from the tree: the
    ``flash_ops`` module is built inside an ``if()`` naming it. sgl-kernel has had, since its first
    CMake build (2025-03-27):

    * no FA3 at all (until 2025-03-31): Not needed;
    * FA3's sources compiled into ``common_ops`` and registered from C++, with no switch
      (2025-03-31 .. 2025-04-04): refused (exit 1, file, line and construct named): turning FA3 off
      there needs C++ changes this script does not make;
    * ``BUILD_FA3``, a plain variable forced ``ON`` for CUDA >= 12.4, no option at all
      (2025-04-04 .. 2025-04-13): just before the block that builds ``flash_ops``, a given
      ``-DSGL_KERNEL_ENABLE_FA3`` sets ``BUILD_FA3``;
    * ``option(SGL_KERNEL_ENABLE_FA3 ... OFF)`` then ``set(SGL_KERNEL_ENABLE_FA3 ON)`` for CUDA
      >= 12.4 (2025-04-13 .. 2026-06-17), overriding the command line: each such ``set(... ON)``
      is wrapped in ``if (NOT FLEETCTL_SGL_KERNEL_FA3_EXPLICIT)``. Before the first statement
      naming the option a block records whether the cache already holds ``SGL_KERNEL_ENABLE_FA3``
      there, i.e. whether it was given on the command line (``option()`` has not run yet); after
      ``option()`` a defaulted value is kept as a plain variable and its cache entry dropped, so
      that a re-configure of the same build directory still tells "given" from "defaulted";
    * the CUDA version picking only ``option()``'s default (2026-06-17 on, both layouts): Not
      needed.

    Without a ``-D`` the tree's own default is unchanged. A switch this patch does not know, a
    ``set()`` of the switch to a computed value, or a forcing that would survive patching is
    refused: "Not needed" is never said while a forced-on FA3 remains.

``compile-threads-option``
    From 2025-04-12 to 2025-09-07 sgl-kernel passed a fixed ``--threads=16``/``32`` to every
    nvcc; with MAX_JOBS parallel jobs that is jobs x 32 compiler processes (the "128 threads of
    nvcc exhausted memory" story). The literal becomes ``--threads=${SGL_KERNEL_COMPILE_THREADS}``
    with a cache option of the same default (the name later sgl-kernel uses), so that the build
    recipe's ``-DSGL_KERNEL_COMPILE_THREADS=N`` takes effect in every revision. Not needed where
    the tree has no ``--threads`` or already reads ``SGL_KERNEL_COMPILE_THREADS``.

``fa3-soft-import``
    ``sgl_kernel/flash_attn.py`` did ``try: from sgl_kernel import flash_ops`` /
    ``except: raise ImportError("Can not import FA3 ...")`` at import time, so a build without FA3
    made ``import sgl_kernel.flash_attn`` (and everything importing it) fail. Every module-level
    import of ``flash_ops`` in the Python package (bare, or in a try whose handler raises) becomes
    ``try: <the import> / except ImportError: flash_ops = None; warnings.warn(...)``. Imports inside
    functions are lazy and left alone; a try that already falls back is Not needed.

Contract:

* Each patch prints exactly one line: ``Applied: <name>``, ``Already applied: <name>`` or
  ``Not needed: <name>`` (with --dry-run/--check, ``Would apply: <name>`` instead of ``Applied``).
* A second run changes no byte: every patch recognises its own result (and equivalent upstream
  fixes), and files are rewritten only when their content changes.
* An anchor that is not found, or a construct a patch does not know: a message naming the patch
  and the file (with the line and the construct, for a construct) goes to stderr, the exit
  status is 1 and no file is touched. All new contents are computed in memory first; then every
  changed file is written to a temporary file beside it (same mode) and moved over the original
  with os.replace.
* SGL_KERNEL_DIR in neither layout: exit status 2 with a message saying where it looked.
* ``--dry-run``: print the status lines and a unified diff of what would change; write nothing.
* ``--check``: write nothing; exit 1 if any patch would still apply, else 0 (for idempotence checks).
* Exit 0 on success.
"""

from __future__ import print_function

import argparse
import ast
import difflib
import os
import re
import stat
import sys
import tempfile

PROG = "patch_sgl_kernel"

POLICY_GUARDS = "cmake-policy-guards"
CCCL_INCLUDE = "cuda13-cccl-include"
FA3_OPTION = "fa3-respect-option"
COMPILE_THREADS = "compile-threads-option"
FA3_IMPORT = "fa3-soft-import"
PATCH_NAMES = (POLICY_GUARDS, CCCL_INCLUDE, FA3_OPTION, COMPILE_THREADS, FA3_IMPORT)
#: Opt-in (``--restrict-gencodes``): its status line comes after PATCH_NAMES' when asked for.
RESTRICT_GENCODES = "restrict-gencodes"

APPLIED = "Applied"
ALREADY = "Already applied"
NOT_NEEDED = "Not needed"
WOULD_APPLY = "Would apply"

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2

# (description, path of the sgl-kernel dir relative to SGL_KERNEL_DIR)
LAYOUTS = (
    ("sglang repo root, sgl-kernel/ layout (up to 2025)", "sgl-kernel"),
    ("sglang repo root, python/sglang/kernels/aot/ layout (2026 on)",
     os.path.join("python", "sglang", "kernels", "aot")),
)

CCCL_MARKER = "fleetctl: cuda13-cccl-include"
FA3_MARKER = "fleetctl: fa3-respect-option"
FA3_EXPLICIT_VAR = "FLEETCTL_SGL_KERNEL_FA3_EXPLICIT"
FA3_IMPORT_MARKER = "fleetctl: fa3-soft-import"
THREADS_MARKER = "fleetctl: compile-threads-option"


class AnchorMissing(Exception):
    """A patch cannot be made safely: its anchor is missing, or the tree holds a construct the
    patch does not know (then ``line`` is the 1-based line and ``construct`` the text found there).
    Nothing may be written."""

    def __init__(self, detail, path=None, patch=None, line=None, construct=None):
        Exception.__init__(self, detail)
        self.detail = detail
        self.path = path
        self.patch = patch
        self.line = line
        self.construct = construct

    def message(self):
        where = "%s:%d" % (self.path, self.line) if self.line else str(self.path)
        text = "patch %s, file %s: %s" % (self.patch, where, self.detail)
        if self.construct:
            text += ": %s" % self.construct
        if self.line:
            return "unknown or unsupported construct: " + text
        return "anchor not found: " + text


def refuse(detail, lines=None, index=None):
    """An :class:`AnchorMissing` for the construct on ``lines[index]`` (0-based)."""
    if lines is None or index is None:
        return AnchorMissing(detail)
    return AnchorMissing(detail, line=index + 1, construct=body(lines[index]).strip())


class LayoutError(Exception):
    """SGL_KERNEL_DIR is not an sgl-kernel tree in any known layout."""


# --------------------------------------------------------------------------------------------
# text helpers


def split_lines(text):
    """Split on '\\n' only, keeping line ends (str.splitlines also splits on \\f, \\x1c, ...)."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def newline_of(text):
    return "\r\n" if "\r\n" in text else "\n"


def body(line):
    """The line without its line end."""
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith("\n"):
        return line[:-1]
    return line


def indent_of(line):
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_unit(indent):
    return "\t" if "\t" in indent else "    "


def insert_lines(lines, index, new_lines, nl):
    """Insert new_lines before lines[index] (index == len(lines) appends)."""
    if index > 0 and not lines[index - 1].endswith("\n"):
        lines[index - 1] = lines[index - 1] + nl
    lines[index:index] = [l + nl for l in new_lines]


# --------------------------------------------------------------------------------------------
# CMake scanning

_CM_BLOCK_RE = re.compile(r"^[ \t]*(if|elseif|else|endif)[ \t]*\((.*)$", re.IGNORECASE)


def cmake_code(line):
    """The part of a CMake line before a comment ('#' outside a quoted argument)."""
    out = []
    in_quote = False
    escaped = False
    for ch in body(line):
        if in_quote:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_quote = False
            continue
        if ch == "#":
            break
        if ch == '"':
            in_quote = True
        out.append(ch)
    return "".join(out)


def cmake_if_frames(lines):
    """For each line, the if() frames enclosing it: a tuple of (condition, opening line index).

    The frames are those in force *at* the line (an if line is not inside its own frame)."""
    stack = []
    result = []
    for i, line in enumerate(lines):
        result.append(tuple(stack))
        m = _CM_BLOCK_RE.match(cmake_code(line))
        if not m:
            continue
        kw = m.group(1).lower()
        cond = m.group(2)
        if kw == "if":
            stack.append((cond, i))
        elif kw == "elseif" and stack:
            stack[-1] = (cond, stack[-1][1])
        elif kw == "else" and stack:
            stack[-1] = ("", stack[-1][1])
        elif kw == "endif" and stack:
            stack.pop()
    return result


def cmake_statement_end(lines, start):
    """Index of the line that closes the command opened on lines[start]; None if unbalanced."""
    depth = 0
    opened = False
    for i in range(start, len(lines)):
        code = cmake_code(lines[i])
        in_quote = False
        escaped = False
        for ch in code:
            if in_quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_quote = False
                continue
            if ch == '"':
                in_quote = True
            elif ch == "(":
                depth += 1
                opened = True
            elif ch == ")":
                depth -= 1
        if opened and depth <= 0:
            return i
    return None


# --------------------------------------------------------------------------------------------
# patch: cmake-policy-guards

_POLICY_RE = re.compile(
    r"^(?P<indent>[ \t]*)cmake_policy[ \t]*\([ \t]*SET[ \t]+(?P<num>CMP\d{4})[ \t]+(?:NEW|OLD)[ \t]*\)",
    re.IGNORECASE,
)


_POLICY_ANY_RE = re.compile(r"^[ \t]*cmake_policy[ \t]*\(", re.IGNORECASE)


def _policy_guarded(frames, num):
    pattern = re.compile(r"\bPOLICY\s+" + re.escape(num) + r"\b", re.IGNORECASE)
    for cond, _ in frames:
        if pattern.search(cond):
            return True
    return False


def patch_policy_guards(text):
    """Return (new_text, status) with every unguarded cmake_policy(SET ...) wrapped."""
    nl = newline_of(text)
    lines = split_lines(text)
    frames = cmake_if_frames(lines)
    found = 0
    out = []
    for i, line in enumerate(lines):
        m = _POLICY_RE.match(line)
        code = cmake_code(line)
        if not m:
            if _POLICY_ANY_RE.match(code) and (re.search(r"\bSET\b", code, re.IGNORECASE)
                                               or cmake_statement_end(lines, i) != i):
                raise refuse("a cmake_policy(SET ...) in a form this patch does not know (want "
                             "one line: cmake_policy(SET CMPnnnn NEW|OLD))", lines, i)
            out.append(line)
            continue
        if code[m.end():].strip():
            raise refuse("more than one command on a cmake_policy(SET ...) line", lines, i)
        found += 1
        num = m.group("num").upper()
        if _policy_guarded(frames[i], num):
            out.append(line)
            continue
        indent = m.group("indent")
        unit = indent_unit(indent)
        end = line[len(body(line)):] or nl
        out.append("%sif(POLICY %s)%s" % (indent, num, nl))
        out.append("%s%s%s%s" % (indent, unit, body(line)[len(indent):], nl))
        out.append("%sendif()%s" % (indent, end))
    new_text = "".join(out)
    if new_text != text:
        return new_text, APPLIED
    return text, (ALREADY if found else NOT_NEEDED)


# --------------------------------------------------------------------------------------------
# patch: cuda13-cccl-include

_INCLUDE_DIRS_RE = re.compile(r"^[ \t]*include_directories[ \t]*\(", re.IGNORECASE)
_SET_INCLUDES_RE = re.compile(r"^[ \t]*set[ \t]*\([ \t]*INCLUDES\b", re.IGNORECASE)
_CCCL_RE = re.compile(r"include[^\s/\\]*[/\\]cccl\b", re.IGNORECASE)

CCCL_BLOCK = (
    "# %s: CUDA 13 moved CUB/Thrust/libcu++ to <toolkit>/include/cccl;" % CCCL_MARKER,
    "# nvcc finds them there by itself, the host compiler needs the directory named.",
    "if (CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)",
    "    set(_fleetctl_cuda_include_dirs ${CUDAToolkit_INCLUDE_DIRS} ${CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES})",
    "    if (CUDA_TOOLKIT_ROOT_DIR)",
    '        list(APPEND _fleetctl_cuda_include_dirs "${CUDA_TOOLKIT_ROOT_DIR}/include")',
    "    endif()",
    "    foreach (_fleetctl_cuda_include_dir IN LISTS _fleetctl_cuda_include_dirs)",
    '        if (IS_DIRECTORY "${_fleetctl_cuda_include_dir}/cccl")',
    '            include_directories("${_fleetctl_cuda_include_dir}/cccl")',
    "        endif()",
    "    endforeach()",
    "endif()",
)


def patch_cccl_include(text):
    nl = newline_of(text)
    lines = split_lines(text)
    if any(CCCL_MARKER in line for line in lines):
        return text, ALREADY
    if any(_CCCL_RE.search(cmake_code(line)) for line in lines):
        return text, NOT_NEEDED  # the tree names the cccl directory itself
    frames = cmake_if_frames(lines)
    anchor = None
    for pattern in (_INCLUDE_DIRS_RE, _SET_INCLUDES_RE):
        for i, line in enumerate(lines):
            if not frames[i] and pattern.match(line):
                anchor = i
                break
        if anchor is not None:
            break
    if anchor is None:
        raise AnchorMissing(
            "no top-level include_directories(...) or set(INCLUDES ...) to add the cccl "
            "include directory after")
    end = cmake_statement_end(lines, anchor)
    if end is None:
        raise AnchorMissing("the include_directories( on line %d is never closed" % (anchor + 1))
    indent = indent_of(lines[anchor])
    block = [""] + [(indent + l) if l else l for l in CCCL_BLOCK]
    insert_lines(lines, end + 1, block, nl)
    return "".join(lines), APPLIED


# --------------------------------------------------------------------------------------------
# patch: fa3-respect-option
#
# Which variable switches FA3 is read from the tree itself: the flash_ops target (FA3's own
# extension module) is built inside an if() whose condition names that variable. Two switches
# have existed: SGL_KERNEL_ENABLE_FA3 (an option(), 2025-04-13 on) and BUILD_FA3 (a plain
# variable with no option at all, 2025-04-04 .. 2025-04-13). Before 2025-04-04 FA3's sources were
# compiled into common_ops and registered from C++ with no switch at all: that is refused.

FA3_OPTION_VAR = "SGL_KERNEL_ENABLE_FA3"
FA3_KNOWN_VARS = (FA3_OPTION_VAR, "BUILD_FA3")
_FA3_VAR_ALT = "|".join(FA3_KNOWN_VARS)

_FA3_SET_RE = re.compile(
    r"^(?P<indent>[ \t]*)(?i:set)[ \t]*\([ \t]*(?P<var>" + _FA3_VAR_ALT + r")(?=[ \t)])(?P<args>[^)]*)\)")
_FA3_SET_OPEN_RE = re.compile(
    r"^[ \t]*(?i:set)[ \t]*\([ \t]*(?P<var>" + _FA3_VAR_ALT + r")(?=[ \t)]|$)")
_FA3_LITERAL_RE = re.compile(r'^"?(ON|OFF|TRUE|FALSE|YES|NO|Y|N|1|0)"?$', re.IGNORECASE)
_FA3_DEFINE_RE = re.compile(
    r"^[ \t]*(?i:option|set)[ \t]*\([ \t]*SGL_KERNEL_ENABLE_FA3(?=[ \t)]|$)")
_FA3_OPTION_RE = re.compile(r"^[ \t]*(?i:option)[ \t]*\([ \t]*SGL_KERNEL_ENABLE_FA3(?=[ \t)]|$)")
_FA3_CAPTURE_RE = re.compile(
    r"^[ \t]*(?i:set)[ \t]*\([ \t]*" + FA3_EXPLICIT_VAR + r"[ \t]+ON[ \t]*\)")
_FA3_FORGET_RE = re.compile(
    r"^[ \t]*(?i:unset)[ \t]*\([ \t]*SGL_KERNEL_ENABLE_FA3[ \t]+CACHE[ \t]*\)")
_FA3_FORGET_VALUE = '"${SGL_KERNEL_ENABLE_FA3}"'
_FA3_OVERRIDE_VALUE = '"$CACHE{SGL_KERNEL_ENABLE_FA3}"'
_FA3_TARGET_RE = re.compile(
    r"^[ \t]*(?i:python_add_library|add_library|pybind11_add_module|nanobind_add_module)"
    r"[ \t]*\([ \t]*flash_ops(?=[ \t)]|$)")
_FA3_SOURCES_RE = re.compile(r"\$\{FA3_GEN_SRCS\}|flash-attention_SOURCE_DIR\}/hopper/flash_(?:api|fwd)")
_CM_TOKEN_RE = re.compile(r'"[^"]*"|[^\s()]+')


def _cond_tokens(cond):
    return _CM_TOKEN_RE.findall(cond.rstrip().rstrip(")"))


def _cond_names(cond, name):
    """True if ``name`` appears in the if() condition (as a word)."""
    return re.search(r"\b%s\b" % re.escape(name), cond) is not None


def _gating_vars(cond):
    """The known FA3 variables that must be true for the block under ``cond`` to run.

    Only a plain conjunction counts (``VAR`` or ``... AND VAR``): under OR, NOT or an else()
    branch, turning the variable off would not keep the block from running."""
    tokens = _cond_tokens(cond)
    if not tokens or any(t.upper() == "OR" for t in tokens):
        return set()
    found = set()
    for k, tok in enumerate(tokens):
        if tok in FA3_KNOWN_VARS and not (k and tokens[k - 1].upper() == "NOT"):
            found.add(tok)
    return found


def _top_level_index(frames, i):
    """Index of the top-level statement holding line i (its outermost if(), or the line)."""
    return frames[i][0][1] if frames[i] else i


class _Fa3Tree(object):
    """What the CMakeLists does with FA3: ``kind`` is ``absent``, ``option`` (the
    SGL_KERNEL_ENABLE_FA3 switch) or ``variable`` (another known switch, ``var``);
    ``consumer`` is the line of the first if() that builds FA3 under the switch."""

    def __init__(self, kind, var=None, consumer=None):
        self.kind = kind
        self.var = var
        self.consumer = consumer


def _fa3_sets(lines, frames):
    """Every set() of a known FA3 variable: (index, var, value, frames).

    Raises AnchorMissing for a form whose effect on an explicit -D... this patch cannot judge."""
    found = []
    for i, line in enumerate(lines):
        code = cmake_code(line)
        opened = _FA3_SET_OPEN_RE.match(code)
        if not opened:
            continue
        m = _FA3_SET_RE.match(code)
        if not m:
            raise refuse("a set() of %s spanning lines" % opened.group("var"), lines, i)
        args = m.group("args").split()
        var = m.group("var")
        if "CACHE" in args and "FORCE" in args:
            raise refuse("a set(%s ... CACHE ... FORCE): it overwrites the command line's value in "
                         "the cache, in a way this patch does not undo" % var, lines, i)
        if "CACHE" in args:
            continue  # a cache definition: a -D on the command line wins, like option()
        value = args[0] if len(args) == 1 else None
        conds = " ".join(c for c, _ in frames[i])
        ours = ((value == _FA3_FORGET_VALUE and var == FA3_OPTION_VAR and FA3_EXPLICIT_VAR in conds)
                or (value == _FA3_OVERRIDE_VALUE and var != FA3_OPTION_VAR))
        if ours:
            continue
        if value is None or not _FA3_LITERAL_RE.match(value):
            raise refuse("a set() of %s to a computed value, which would override "
                         "-DSGL_KERNEL_ENABLE_FA3 in a way this patch does not know" % var, lines, i)
        found.append((i, var, value.strip('"').upper(), frames[i]))
    return found


def _fa3_tree(lines, frames):
    """Classify the FA3 switch of a CMakeLists (see :class:`_Fa3Tree`); refuse what is unknown."""
    targets = [i for i, line in enumerate(lines) if _FA3_TARGET_RE.match(cmake_code(line))]
    gates = {}
    for i in targets:
        gate = set()
        for cond, at in frames[i]:
            for var in _gating_vars(cond):
                gate.add(var)
                gates.setdefault(var, at)
        if gate:
            continue
        if not frames[i]:
            raise refuse("FA3's module flash_ops is built unconditionally, with no switch that "
                         "-DSGL_KERNEL_ENABLE_FA3=OFF could turn off", lines, i)
        raise refuse("FA3's module flash_ops is built under an if() whose switch this patch does "
                     "not know (line %d)" % (frames[i][-1][1] + 1), lines, frames[i][-1][1])
    if not targets:
        for i, line in enumerate(lines):
            if not _FA3_SOURCES_RE.search(cmake_code(line)):
                continue
            gate = set()
            for cond, at in frames[i]:
                for var in _gating_vars(cond):
                    gate.add(var)
                    gates.setdefault(var, at)
            if not gate:
                raise refuse(
                    "FA3's sources are compiled into another module with no switch (FA3 is then "
                    "registered from C++ sources); -DSGL_KERNEL_ENABLE_FA3=OFF cannot be honoured "
                    "without changing them, which this script does not do (sgl-kernel has a "
                    "switch from 2025-04-04, commit b8b6008f4, on)", lines, i)
        if not gates:
            # no FA3 module: a bare switch consumed by an if() (or nothing at all)
            for i, line in enumerate(lines):
                m = _CM_BLOCK_RE.match(cmake_code(line))
                if m and m.group(1).lower() == "if":
                    for var in _gating_vars(m.group(2)):
                        gates.setdefault(var, i)
    if FA3_OPTION_VAR in gates:
        return _Fa3Tree("option", FA3_OPTION_VAR, gates[FA3_OPTION_VAR])
    if gates:
        var = sorted(gates, key=lambda v: gates[v])[0]
        return _Fa3Tree("variable", var, gates[var])
    return _Fa3Tree("absent")


def _option_forcings_left(lines, frames, sets):
    """Indices of literal set()s of SGL_KERNEL_ENABLE_FA3 that an explicit -D would not beat."""
    left = []
    for i, var, _value, fr in sets:
        if var != FA3_OPTION_VAR:
            continue
        conds = [cond for cond, _ in fr]
        if any(FA3_EXPLICIT_VAR in c or _cond_names(c, FA3_OPTION_VAR) for c in conds):
            continue
        left.append(i)
    return left


def _patch_fa3_via_option(text, lines, frames, sets, nl):
    ours = sum(1 for line in lines if _FA3_CAPTURE_RE.match(cmake_code(line)))
    to_wrap = _option_forcings_left(lines, frames, sets)
    if not to_wrap and not ours:
        return text, NOT_NEEDED
    has_capture = bool(ours)
    has_forget = any(_FA3_FORGET_RE.match(cmake_code(line)) for line in lines)
    option_at = None
    for i, line in enumerate(lines):
        if _FA3_OPTION_RE.match(cmake_code(line)):
            option_at = i
            break
    need_forget = option_at is not None and not has_forget
    if not to_wrap and has_capture and not need_forget:
        return text, ALREADY

    edits = []  # (index, is_replacement, new lines without line ends)
    for i in to_wrap:
        line = lines[i]
        indent = indent_of(line)
        edits.append((i, 1, [
            "%sif (NOT %s)" % (indent, FA3_EXPLICIT_VAR),
            "%s%s%s" % (indent, indent_unit(indent), body(line)[len(indent):]),
            "%sendif()" % indent,
        ]))
    if not has_capture:
        # It must run before option() (or the first forcing) defines the variable: before the
        # top-level statement holding the first option()/set() of SGL_KERNEL_ENABLE_FA3.
        capture_at = None
        for i, line in enumerate(lines):
            if _FA3_DEFINE_RE.match(cmake_code(line)):
                capture_at = _top_level_index(frames, i)
                break
        if capture_at is None:  # cannot happen: a forcing line is such a set()
            raise AnchorMissing("no option()/set() of SGL_KERNEL_ENABLE_FA3")
        indent = indent_of(lines[capture_at])
        unit = indent_unit(indent)
        edits.append((capture_at, 0, [indent + l if l else l for l in (
            "# %s: an explicit -DSGL_KERNEL_ENABLE_FA3=ON|OFF wins over the forced" % FA3_MARKER,
            "# default below; read it before option() puts the default into the cache.",
            "if (DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})",
            unit + "set(%s ON)" % FA3_EXPLICIT_VAR,
            "else()",
            unit + "set(%s OFF)" % FA3_EXPLICIT_VAR,
            "endif()",
        )]))
    if need_forget:
        end = cmake_statement_end(lines, option_at)
        if end is None:
            raise refuse("an option(SGL_KERNEL_ENABLE_FA3 that is never closed", lines, option_at)
        indent = indent_of(lines[option_at])
        unit = indent_unit(indent)
        edits.append((end + 1, 0, [indent + l for l in (
            "if (NOT %s)" % FA3_EXPLICIT_VAR,
            unit + "# %s: not given on the command line; keep option()'s default as a" % FA3_MARKER,
            unit + "# plain variable and drop the cache entry, so a re-configure still tells the two apart.",
            unit + "set(SGL_KERNEL_ENABLE_FA3 %s)" % _FA3_FORGET_VALUE,
            unit + "unset(SGL_KERNEL_ENABLE_FA3 CACHE)",
            "endif()",
        )]))
    _apply_line_edits(lines, edits, nl)
    return "".join(lines), APPLIED


def _override_at(lines, var):
    pattern = re.compile(r"^[ \t]*(?i:set)[ \t]*\([ \t]*%s[ \t]+%s[ \t]*\)"
                         % (re.escape(var), re.escape(_FA3_OVERRIDE_VALUE)))
    for i, line in enumerate(lines):
        if pattern.match(cmake_code(line)):
            return i
    return None


def _patch_fa3_via_variable(text, lines, frames, tree, nl):
    """FA3 switched by a plain variable (BUILD_FA3) that the tree forces, with no option():
    just before the block that builds FA3, an explicit -DSGL_KERNEL_ENABLE_FA3 decides it."""
    insert_at = _top_level_index(frames, tree.consumer)
    done = _override_at(lines, tree.var)
    if done is not None and done < insert_at:
        return text, ALREADY
    while insert_at > 0 and body(lines[insert_at - 1]).lstrip().startswith("#"):
        insert_at -= 1  # above the comment that introduces the FA3 block
    indent = indent_of(lines[insert_at])
    unit = indent_unit(indent)
    block = [indent + l for l in (
        "# %s: this revision switches FA3 with %s, forced on for newer CUDA, and" % (FA3_MARKER, tree.var),
        "# has no SGL_KERNEL_ENABLE_FA3 option; an explicit -DSGL_KERNEL_ENABLE_FA3=ON|OFF decides.",
        "if (DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})",
        unit + "set(%s %s)" % (tree.var, _FA3_OVERRIDE_VALUE),
        "endif()",
    )]
    insert_lines(lines, insert_at, block, nl)
    return "".join(lines), APPLIED


def _forced_fa3_left(text):
    """Lines (0-based) where FA3 stays forced whatever -DSGL_KERNEL_ENABLE_FA3 says; [] if none."""
    lines = split_lines(text)
    frames = cmake_if_frames(lines)
    tree = _fa3_tree(lines, frames)
    sets = _fa3_sets(lines, frames)
    if tree.kind == "option":
        return _option_forcings_left(lines, frames, sets)
    if tree.kind == "variable":
        start = _top_level_index(frames, tree.consumer)
        override = _override_at(lines, tree.var)
        if override is None or override > start:
            return [start]
        return [i for i, var, _v, _f in sets if var == tree.var and override < i < start]
    return []


def _apply_line_edits(lines, edits, nl):
    """Apply (index, is_replacement, new lines) edits bottom-up; at one index replace first."""
    for index, is_replacement, new_lines in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        if is_replacement:
            old = lines[index]
            end = old[len(body(old)):] or nl
            lines[index:index + 1] = [l + nl for l in new_lines[:-1]] + [new_lines[-1] + end]
        else:
            insert_lines(lines, index, new_lines, nl)


def patch_fa3_option(text):
    """Return (new_text, status): FA3 obeys an explicit -DSGL_KERNEL_ENABLE_FA3=ON|OFF.

    Raises AnchorMissing (with line and construct) for an FA3 construct this patch does not know,
    and whenever a forced FA3 would remain after patching: "Not needed" is never said then."""
    nl = newline_of(text)
    lines = split_lines(text)
    frames = cmake_if_frames(lines)
    tree = _fa3_tree(lines, frames)
    sets = _fa3_sets(lines, frames)
    if tree.kind == "variable":
        new_text, status = _patch_fa3_via_variable(text, lines, frames, tree, nl)
    elif tree.kind == "option" or _option_forcings_left(lines, frames, sets):
        new_text, status = _patch_fa3_via_option(text, lines, frames, sets, nl)
    else:
        new_text, status = text, NOT_NEEDED
    left = _forced_fa3_left(new_text)
    if left:
        new_lines = split_lines(new_text)
        raise refuse("FA3 would stay forced whatever -DSGL_KERNEL_ENABLE_FA3 says", new_lines, left[0])
    return new_text, status


# --------------------------------------------------------------------------------------------
# patch: compile-threads-option

THREADS_VAR = "SGL_KERNEL_COMPILE_THREADS"
_THREADS_ANY_RE = re.compile(r"(?<![\w-])--threads(?![\w-])(?P<sep>=?)(?P<value>[^\s\")]*)")
_THREADS_CACHE_RE = re.compile(
    r"^[ \t]*(?i:set)[ \t]*\([ \t]*" + THREADS_VAR + r"[ \t][^)]*\bCACHE\b")


def cmake_statement_start(lines, index):
    """Index of the line on which the command holding lines[index] starts."""
    start = index
    depth = 0
    for i in range(index + 1):
        code = cmake_code(lines[i])
        if depth <= 0 and code.strip():
            start = i
            depth = 0
        in_quote = escaped = False
        for ch in code:
            if in_quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_quote = False
            elif ch == '"':
                in_quote = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
    return start


def patch_compile_threads(text):
    """Return (new_text, status): nvcc's ``--threads`` follows -DSGL_KERNEL_COMPILE_THREADS=N.

    Raises AnchorMissing (line and construct) for a ``--threads`` this patch cannot judge."""
    nl = newline_of(text)
    lines = split_lines(text)
    frames = cmake_if_frames(lines)
    literal = []
    for i, line in enumerate(lines):
        for m in _THREADS_ANY_RE.finditer(cmake_code(line)):
            value = m.group("value")
            if m.group("sep") and value.isdigit():
                literal.append((i, value))
            elif not (m.group("sep") and value == "${%s}" % THREADS_VAR):
                raise refuse("nvcc --threads given in a form this patch does not know "
                             "(want --threads=N or --threads=${%s})" % THREADS_VAR, lines, i)
    if not literal:
        return text, (ALREADY if any(THREADS_MARKER in line for line in lines) else NOT_NEEDED)
    for i, _value in literal:
        code = cmake_code(lines[i])
        new_code = re.sub(r"--threads=\d+", "--threads=${%s}" % THREADS_VAR, code)
        lines[i] = new_code + lines[i][len(code):]
    if not any(_THREADS_CACHE_RE.match(cmake_code(line)) for line in lines):
        first, value = literal[0]
        at = _top_level_index(frames, cmake_statement_start(lines, first))
        indent = indent_of(lines[at])
        insert_lines(lines, at, [indent + l for l in (
            "# %s: nvcc ran with a fixed --threads=%s here; as a cache option (same" % (THREADS_MARKER, value),
            "# default) the build can choose it with -D%s=N (jobs x threads = nvcc processes)." % THREADS_VAR,
            'set(%s %s CACHE STRING "nvcc threads per CUDA compile job")' % (THREADS_VAR, value),
        )], nl)
    return "".join(lines), APPLIED


# --------------------------------------------------------------------------------------------
# patch: fa3-soft-import

_PY_IMPORT_RE = re.compile(
    r"^(?P<indent>[ \t]*)(?:"
    r"from[ \t]+(?:sgl_kernel|\.)[ \t]+import[ \t]+flash_ops(?:[ \t]+as[ \t]+(?P<alias1>\w+))?"
    r"|import[ \t]+sgl_kernel\.flash_ops(?:[ \t]+as[ \t]+(?P<alias2>\w+))?"
    r")[ \t]*(?:#.*)?$"
)
_PY_IMPORT_MENTION_RE = re.compile(r"^[ \t]*(?:from|import)\b.*\bflash_ops\b")
_PY_HEADER_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<kw>[A-Za-z_]+)\b")
_PY_EXCEPT_RE = re.compile(r"^(?P<indent>[ \t]*)except\b[^:]*:(?P<inline>.*)$")


def _py_code_line(line):
    s = body(line).strip()
    return bool(s) and not s.startswith("#")


def _py_indent_len(line):
    return len(indent_of(body(line)).expandtabs(8))


def _py_block_end(lines, start, header_indent):
    """First index after lines[start] whose code indent is <= header_indent (or len(lines))."""
    i = start + 1
    while i < len(lines):
        if _py_code_line(lines[i]) and _py_indent_len(lines[i]) <= header_indent:
            return i
        i += 1
    return i


def _py_enclosing_headers(lines, index):
    """The header lines (keyword, line index) that enclose lines[index], innermost first."""
    result = []
    level = _py_indent_len(lines[index])
    i = index - 1
    while i >= 0 and level > 0:
        if _py_code_line(lines[i]) and _py_indent_len(lines[i]) < level:
            m = _PY_HEADER_RE.match(body(lines[i]))
            kw = m.group("kw") if m else ""
            if kw == "async":
                kw = "def"
            result.append((kw, i))
            level = _py_indent_len(lines[i])
        i -= 1
    return result


def _py_flash_ops_imports(text, lines):
    """Indices of the lines that import flash_ops.

    With a parse of the file (ast) only real import statements count, never a docstring example;
    a file this Python cannot parse (newer syntax) falls back to matching lines."""
    try:
        tree = ast.parse(text)
    except Exception:
        return [i for i, line in enumerate(lines) if _PY_IMPORT_MENTION_RE.match(line)]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            hit = "flash_ops" in names or (node.module or "").split(".")[-1] == "flash_ops"
        elif isinstance(node, ast.Import):
            hit = any(a.name.split(".")[-1] == "flash_ops" for a in node.names)
        else:
            continue
        if hit:
            found.add(node.lineno - 1)
            end = getattr(node, "end_lineno", None)
            if end is not None and end != node.lineno:
                raise AnchorMissing("line %d imports flash_ops over several lines, a form this "
                                    "patch does not know" % node.lineno)
    return sorted(found)


def _soft_import_block(indent, unit, import_stmt, name, nl):
    b = indent + unit
    return [
        indent + "try:" + nl,
        b + import_stmt + nl,
        indent + "except ImportError:" + nl,
        b + "# %s: sgl-kernel built without FA3 (-DSGL_KERNEL_ENABLE_FA3=OFF, e.g. for SM120)" % FA3_IMPORT_MARKER + nl,
        b + "# has no flash_ops; leave it None instead of failing the whole import." + nl,
        b + "import warnings as _fleetctl_warnings" + nl,
        b + "%s = None" % name + nl,
        b + "_fleetctl_warnings.warn(" + nl,
        b + unit + '"sgl_kernel was built without FA3 (flash_ops); FA3 attention is unavailable",' + nl,
        b + unit + "RuntimeWarning," + nl,
        b + ")" + nl,
    ]


def patch_fa3_import(text):
    """Return (new_text, status) for one Python file; status None if it never imports flash_ops."""
    nl = newline_of(text)
    lines = split_lines(text)
    candidates = _py_flash_ops_imports(text, lines)
    mentions = 0
    ours = 0
    edits = []  # (start, end, replacement lines)
    for i in candidates:
        line = lines[i]
        mentions += 1
        m = _PY_IMPORT_RE.match(body(line))
        if not m:
            raise AnchorMissing("line %d imports flash_ops in a form this patch does not know: %s"
                                % (i + 1, body(line).strip()))
        name = m.group("alias1") or m.group("alias2") or "flash_ops"
        headers = _py_enclosing_headers(lines, i)
        if any(kw in ("def", "lambda") for kw, _ in headers):
            continue  # imported lazily, inside a function: no ImportError at import time
        import_stmt = body(line).strip()
        if headers and headers[0][0] == "try":
            t = headers[0][1]
            t_indent = _py_indent_len(lines[t])
            try_end = _py_block_end(lines, t, t_indent)
            others = [j for j in range(t + 1, try_end) if _py_code_line(lines[j]) and j != i]
            if others:
                raise AnchorMissing("the try: on line %d holds more than the flash_ops import"
                                    % (t + 1))
            # the handler clauses
            handlers = []
            j = try_end
            while j < len(lines) and _py_indent_len(lines[j]) == t_indent:
                mh = _PY_EXCEPT_RE.match(body(lines[j]))
                if not mh:
                    kw = _PY_HEADER_RE.match(body(lines[j]))
                    if kw and kw.group("kw") in ("else", "finally"):
                        raise AnchorMissing("the try: on line %d has an else/finally clause"
                                            % (t + 1))
                    break
                k = _py_block_end(lines, j, t_indent)
                handlers.append((j, k))
                j = k
            if not handlers:
                raise AnchorMissing("the try: on line %d has no except clause" % (t + 1))
            handler_text = "".join(lines[handlers[0][0]:handlers[-1][1]])
            if FA3_IMPORT_MARKER in handler_text:
                ours += 1
                continue
            if not re.search(r"\braise\b", handler_text):
                continue  # the tree already falls back by itself
            # keep trailing blank lines / comments of the last handler outside the rewrite
            end = handlers[-1][1]
            while end > handlers[-1][0] + 1 and not _py_code_line(lines[end - 1]):
                end -= 1
            indent = indent_of(body(lines[t]))
            unit = indent_of(body(line))[len(indent):] or indent_unit(indent)
            edits.append((t, end, _soft_import_block(indent, unit, import_stmt, name, nl)))
        else:
            indent = indent_of(body(line))
            edits.append((i, i + 1, _soft_import_block(indent, indent_unit(indent),
                                                          import_stmt, name, nl)))
    if not mentions:
        return text, None
    if not edits:
        return text, (ALREADY if ours else NOT_NEEDED)
    for start, end, repl in reversed(edits):
        if end == len(lines) and not lines[-1].endswith("\n"):
            repl[-1] = body(repl[-1])
        lines[start:end] = repl
    new_text = "".join(lines)
    _check_python(text, new_text)
    return new_text, APPLIED


def _check_python(old, new):
    """Refuse to write a Python file that this interpreter parsed before and cannot parse now."""
    try:
        compile(old, "<original>", "exec", 0, True)
    except Exception:  # newer syntax than this interpreter, or odd bytes: cannot judge
        return
    try:
        compile(new, "<patched>", "exec", 0, True)
    except SyntaxError as exc:
        raise AnchorMissing("the rewritten import does not parse (%s); not writing it" % exc)


# --------------------------------------------------------------------------------------------
# patch: restrict-gencodes (opt-in: --restrict-gencodes)

GENCODE_MARKER = "fleetctl: restrict-gencodes"
GENCODE_FUNC = "fleetctl_restrict_gencodes"
GENCODE_ARCHS_VAR = "FLEETCTL_SGL_ARCHS"
_GENCODE_ANY_RE = re.compile(r"(?<![\w-])(?:-gencode|--generate-code|-arch|--gpu-architecture|-code)(?![\w-])[^\s\")]*")
_GENCODE_OK_RE = re.compile(r"^-gencode=arch=compute_\d+[af]?,code=(?:sm|compute)_\d+[af]?$")
_SET_VAR_RE = re.compile(r"^[ \t]*(?:set|list[ \t]*\([ \t]*APPEND)[ \t]*\(?[ \t]*(?P<var>[A-Za-z_][A-Za-z0-9_]*)",
                         re.IGNORECASE)
_STRING_REGEX_RE = re.compile(r"^[ \t]*string[ \t]*\([ \t]*REGEX\b", re.IGNORECASE)
_TCO_RE = re.compile(r"^[ \t]*target_compile_options[ \t]*\(", re.IGNORECASE)
_MIN_REQ_RE = re.compile(r"^[ \t]*cmake_minimum_required[ \t]*\(", re.IGNORECASE)

#: The filter, defined once after cmake_minimum_required(): with -DFLEETCTL_SGL_ARCHS="90a;120a"
#: it keeps, of a flags list, the -gencode entries whose code runs on one of those SMs (NVIDIA's
#: CUDA compatibility rules: sm_XYa only on X.Y; sm_XYf on X.Y and later X.*; sm_XY on X.Y and
#: later X.*; PTX compute_XY JIT-compiles on X.Y and newer); without it nothing changes. A list
#: left with no code for those SMs is kept whole, with a warning (that library has no code for them).
GENCODE_FUNCTION = (
    "# %s: with -D%s=<SMs> (\"90a\", \"120a\") only the -gencode entries" % (GENCODE_MARKER, GENCODE_ARCHS_VAR),
    "# whose code runs on those SMs are compiled; without it, sgl-kernel's own list.",
    "function(%s var)" % GENCODE_FUNC,
    "  if(NOT %s)" % GENCODE_ARCHS_VAR,
    "    return()",
    "  endif()",
    "  set(kept)",
    "  set(dropped)",
    "  set(codes)",
    "  foreach(flag IN LISTS ${var})",
    "    if(flag MATCHES \"^-gencode=arch=compute_[0-9]+[af]?,code=(sm|compute)_([0-9]+)([af]?)$\")",
    "      set(kind \"${CMAKE_MATCH_1}\")",
    "      set(num \"${CMAKE_MATCH_2}\")",
    "      set(sfx \"${CMAKE_MATCH_3}\")",
    "      math(EXPR major \"${num} / 10\")",
    "      set(runs OFF)",
    "      foreach(want IN LISTS %s)" % GENCODE_ARCHS_VAR,
    "        string(REGEX REPLACE \"[^0-9]\" \"\" wnum \"${want}\")",
    "        math(EXPR wmajor \"${wnum} / 10\")",
    "        if(sfx STREQUAL \"a\")",
    "          if(num EQUAL wnum)",
    "            set(runs ON)",
    "          endif()",
    "        elseif(kind STREQUAL \"compute\" AND sfx STREQUAL \"\")",
    "          if(NOT num GREATER wnum)",
    "            set(runs ON)",
    "          endif()",
    "        elseif(major EQUAL wmajor AND NOT num GREATER wnum)",
    "          set(runs ON)",
    "        endif()",
    "      endforeach()",
    "      if(runs)",
    "        list(APPEND kept \"${flag}\")",
    "        list(APPEND codes \"${kind}_${num}${sfx}\")",
    "      else()",
    "        list(APPEND dropped \"${kind}_${num}${sfx}\")",
    "      endif()",
    "    elseif(flag MATCHES \"(^|[^A-Za-z0-9_-])(-gencode|--generate-code|-arch|--gpu-architecture)([^A-Za-z0-9_-]|$)\")",
    "      message(FATAL_ERROR \"%s: ${var} holds '${flag}', a form it does not know\")" % GENCODE_MARKER,
    "    else()",
    "      list(APPEND kept \"${flag}\")",
    "    endif()",
    "  endforeach()",
    "  # one SASS per SM: where sm_XYa is kept, plain sm_XY (the same SM's code without its",
    "  # arch-specific features) is not compiled a second time",
    "  set(final)",
    "  foreach(flag IN LISTS kept)",
    "    set(twin -1)",
    "    if(flag MATCHES \"^-gencode=arch=compute_[0-9]+,code=sm_([0-9]+)$\")",
    "      set(num \"${CMAKE_MATCH_1}\")",
    "      list(FIND codes \"sm_${num}a\" twin)",
    "    endif()",
    "    if(twin EQUAL -1)",
    "      list(APPEND final \"${flag}\")",
    "    else()",
    "      list(REMOVE_ITEM codes \"sm_${num}\")",
    "      list(APPEND dropped \"sm_${num}\")",
    "    endif()",
    "  endforeach()",
    "  set(kept \"${final}\")",
    "  if(NOT codes)",
    "    message(WARNING \"%s: ${var} has no code for ${%s}: kept whole\")" % (GENCODE_MARKER, GENCODE_ARCHS_VAR),
    "    return()",
    "  endif()",
    "  if(dropped)",
    "    message(STATUS \"%s: ${var}: kept ${codes}; dropped ${dropped}\")" % GENCODE_MARKER,
    "  else()",
    "    message(STATUS \"%s: ${var}: kept ${codes}\")" % GENCODE_MARKER,
    "  endif()",
    "  set(${var} \"${kept}\" PARENT_SCOPE)",
    "endfunction()",
)

SKIP_FUNC = "fleetctl_skip_unloaded"

#: A library that sgl_kernel's runtime loader (python/sgl_kernel/load_utils.py) loads on no SM of
#: FLEETCTL_SGL_ARCHS is not built: ``loads`` lists the SMs (major*10+minor, the loader's
#: ``compute_capability``) it is loaded on, or is empty for "every SM but ``except``". Its
#: install() is made OPTIONAL by the patch, so the wheel simply has no such folder.
SKIP_FUNCTION = (
    "# %s: a library sgl_kernel's loader loads on no SM of ${%s} is not built" % (GENCODE_MARKER, GENCODE_ARCHS_VAR),
    "# (loads: the SMs it is loaded on; empty: every SM but those in except).",
    "function(%s target loads except)" % SKIP_FUNC,
    "  if(NOT %s OR NOT TARGET ${target})" % GENCODE_ARCHS_VAR,
    "    return()",
    "  endif()",
    "  foreach(want IN LISTS %s)" % GENCODE_ARCHS_VAR,
    "    string(REGEX REPLACE \"[^0-9]\" \"\" wnum \"${want}\")",
    "    if(loads)",
    "      list(FIND loads \"${wnum}\" at)",
    "      if(NOT at EQUAL -1)",
    "        return()",
    "      endif()",
    "    else()",
    "      list(FIND except \"${wnum}\" at)",
    "      if(at EQUAL -1)",
    "        return()",
    "      endif()",
    "    endif()",
    "  endforeach()",
    "  set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)",
    "  message(STATUS \"%s: ${target} not built: sgl_kernel's loader loads it on no SM of ${%s}\")"
    % (GENCODE_MARKER, GENCODE_ARCHS_VAR),
    "endfunction()",
)
_INSTALL_OPS_RE = re.compile(
    r"^(?P<indent>[ \t]*)install[ \t]*\([ \t]*TARGETS[ \t]+(?P<target>[A-Za-z_][A-Za-z0-9_]*)[ \t]+LIBRARY"
    r"[ \t]+DESTINATION[ \t]+\"?sgl_kernel/(?P<folder>[A-Za-z0-9_]+)\"?(?P<optional>[ \t]+OPTIONAL)?[ \t]*\)",
    re.IGNORECASE)
_LOADER_EXACT_RE = re.compile(r"^[ \t]*(?:el)?if[ \t]+compute_capability[ \t]*==[ \t]*(\d+)[ \t]*:")
_LOADER_OTHER_RE = re.compile(r"^[ \t]*(?:elif[ \t]+compute_capability[ \t]+is[ \t]+not[ \t]+None|else)[ \t]*:")
_LOADER_DIR_RE = re.compile(r"^[ \t]*ops_subdir[ \t]*=[ \t]*[\"'](\w+)[\"']")


def loader_rule(kernel_dir):
    """``{folder: [SMs]}`` of sgl_kernel's loader, an empty list for its "every other SM" folder
    (``load_utils.py``: ``if compute_capability == 90: ops_subdir = "sm90"`` ... ``elif
    compute_capability is not None: ops_subdir = "sm100"``); ``{}`` when there is no such loader
    or its rule is not in that form (then every library is built)."""
    path = os.path.join(kernel_dir, "python", "sgl_kernel", "load_utils.py")
    if not os.path.isfile(path):
        return {}
    rule, branch = {}, None
    for line in split_lines(read_text(path)):
        text = body(line)
        m = _LOADER_EXACT_RE.match(text)
        if m:
            branch = int(m.group(1))
            continue
        if _LOADER_OTHER_RE.match(text):
            branch = "other"
            continue
        m = _LOADER_DIR_RE.match(text)
        if m and branch is not None:
            folder = m.group(1)
            if branch == "other":
                rule.setdefault(folder, [])
            elif rule.get(folder) != []:
                rule.setdefault(folder, []).append(branch)
            branch = None
    others = [f for f, sms in rule.items() if not sms]
    return rule if len(others) == 1 and len(rule) > 1 else {}


def patch_skip_unloaded(text, rule):
    """Return (new_text, status): after each ``install(TARGETS <lib> LIBRARY DESTINATION
    sgl_kernel/<folder>)`` of a folder the loader ``rule`` names, ``fleetctl_skip_unloaded()`` for
    that library, the install made OPTIONAL, and the function after cmake_minimum_required()."""
    if not rule:
        return text, NOT_NEEDED
    nl = newline_of(text)
    lines = split_lines(text)
    exact = sorted(sm for sms in rule.values() for sm in sms)
    edits, already = [], False
    for i, line in enumerate(lines):
        m = _INSTALL_OPS_RE.match(cmake_code(line))
        if not m or m.group("folder") not in rule:
            continue
        sms = rule[m.group("folder")]
        call = '%s%s(%s "%s" "%s")  # %s' % (m.group("indent"), SKIP_FUNC, m.group("target"),
                                           ";".join(map(str, sms)), "" if sms else ";".join(map(str, exact)),
                                           GENCODE_MARKER)
        nxt = body(lines[i + 1]).strip() if i + 1 < len(lines) else ""
        if m.group("optional") and nxt == call.strip():
            already = True
            continue
        edits.append((i, m, call))
    for i, m, call in reversed(edits):
        if not m.group("optional"):
            close = m.end() - 1  # cmake_code() is a prefix of the line: the same offsets
            lines[i] = lines[i][:close].rstrip() + " OPTIONAL" + lines[i][close:]
        insert_lines(lines, i + 1, [call], nl)
    if edits and not any(("function(%s" % SKIP_FUNC) in cmake_code(l) for l in lines):
        at = next((k for k, l in enumerate(lines) if _MIN_REQ_RE.match(cmake_code(l))), None)
        if at is None:
            raise AnchorMissing("no cmake_minimum_required() to put the library filter after")
        insert_lines(lines, cmake_statement_end(lines, at) + 1, list(SKIP_FUNCTION), nl)
    if edits:
        return "".join(lines), APPLIED
    return text, (ALREADY if already else NOT_NEEDED)


def gencode_vars(text):
    """The variables a CMake file sets or appends ``-gencode`` entries to.

    Raises AnchorMissing (line, construct) for an arch flag in a form the filter does not know, or
    one outside ``set()``/``list(APPEND)`` of a variable."""
    lines = split_lines(text)
    found = set()
    own = False
    for i, line in enumerate(lines):
        code = cmake_code(line)
        if ("function(%s" % GENCODE_FUNC) in code:
            own = True
        if own:  # the filter this patch added
            own = not re.match(r"^[ \t]*endfunction[ \t]*\(", code, re.IGNORECASE)
            continue
        if _GENCODE_ANY_RE.search(cmake_code(line)) and _STRING_REGEX_RE.match(
                cmake_code(lines[cmake_statement_start(lines, i)])):
            continue  # a pattern matching flags (utils.cmake's clear_cuda_arches), not a flag
        for m in _GENCODE_ANY_RE.finditer(cmake_code(line)):
            flag = m.group(0)
            if not _GENCODE_OK_RE.match(flag):
                raise refuse("an arch flag in a form the gencode filter does not know "
                             "(want -gencode=arch=compute_N,code=sm_N)", lines, i)
            start = cmake_statement_start(lines, i)
            sm = _SET_VAR_RE.match(cmake_code(lines[start]))
            if not sm:
                raise refuse("a -gencode outside set()/list(APPEND) of a flags variable", lines, i)
            found.add(sm.group("var"))
    return found


def patch_restrict_gencodes(text, variables, top):
    """Return (new_text, status): ``fleetctl_restrict_gencodes(VAR)`` before every
    ``target_compile_options()`` that uses one of ``variables``; in the top-level file
    (``top``) the filter function after ``cmake_minimum_required()``."""
    nl = newline_of(text)
    lines = split_lines(text)
    inserts = []
    already = False
    i = 0
    while i < len(lines):
        if _TCO_RE.match(cmake_code(lines[i])):
            end = cmake_statement_end(lines, i)
            if end is None:
                raise refuse("target_compile_options() is never closed", lines, i)
            used = []
            for j in range(i, end + 1):
                for var in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", cmake_code(lines[j])):
                    if var in variables and var not in used:
                        used.append(var)
            indent = indent_of(lines[i])
            for var in used:
                call = "%s%s(%s)  # %s" % (indent, GENCODE_FUNC, var, GENCODE_MARKER)
                before = [body(l).strip() for l in lines[max(0, i - len(used)):i]]
                if call.strip() in before:
                    already = True
                else:
                    inserts.append((i, call))
            i = end + 1
        else:
            i += 1
    defined = any(("function(%s" % GENCODE_FUNC) in cmake_code(l) for l in lines)
    if top and not defined and (inserts or already):
        at = next((k for k, l in enumerate(lines) if _MIN_REQ_RE.match(cmake_code(l))), None)
        if at is None:
            raise AnchorMissing("no cmake_minimum_required() to put the gencode filter after")
        end = cmake_statement_end(lines, at)
        inserts.append((end + 1, None))
    for index, call in sorted(inserts, key=lambda x: -x[0]):
        insert_lines(lines, index, list(GENCODE_FUNCTION) if call is None else [call], nl)
    if inserts:
        return "".join(lines), APPLIED
    return text, (ALREADY if already else NOT_NEEDED)


def plan_restrict_gencodes(kernel_dir, current=None):
    """(status, changes, errors) of ``restrict-gencodes`` over CMakeLists.txt and cmake/*.cmake;
    ``current``: path -> text for files earlier patches already changed in memory."""
    paths = [os.path.join(kernel_dir, "CMakeLists.txt")]
    cmake_dir = os.path.join(kernel_dir, "cmake")
    if os.path.isdir(cmake_dir):
        paths += sorted(os.path.join(cmake_dir, n) for n in os.listdir(cmake_dir) if n.endswith(".cmake"))
    texts = dict((p, (current or {}).get(p) or read_text(p)) for p in paths)
    variables, errors, changes, statuses = set(), [], {}, []
    for path in paths:
        try:
            variables |= gencode_vars(texts[path])
        except AnchorMissing as exc:
            exc.patch, exc.path = RESTRICT_GENCODES, path
            errors.append(exc)
    if errors:
        return None, changes, errors
    for path in paths:
        try:
            new, status = patch_restrict_gencodes(texts[path], variables, path == paths[0])
            if path == paths[0] and status != NOT_NEEDED:
                new, skip_status = patch_skip_unloaded(new, loader_rule(kernel_dir))
                status = APPLIED if APPLIED in (status, skip_status) else status
        except AnchorMissing as exc:
            exc.patch, exc.path = RESTRICT_GENCODES, path
            errors.append(exc)
            continue
        statuses.append(status)
        if new != texts[path]:
            changes[path] = (texts[path], new)
    status = APPLIED if APPLIED in statuses else (ALREADY if ALREADY in statuses else NOT_NEEDED)
    return status, changes, errors


# --------------------------------------------------------------------------------------------
# the tree


def _is_kernel_dir(path):
    return (os.path.isfile(os.path.join(path, "CMakeLists.txt"))
            and os.path.isdir(os.path.join(path, "python", "sgl_kernel")))


def locate(root):
    """Return the sgl-kernel directory for SGL_KERNEL_DIR (raises LayoutError)."""
    if not os.path.isdir(root):
        raise LayoutError("%s is not a directory" % root)
    if _is_kernel_dir(root):
        return os.path.abspath(root)
    found = [os.path.join(root, rel) for _, rel in LAYOUTS if _is_kernel_dir(os.path.join(root, rel))]
    if len(found) == 1:
        return os.path.abspath(found[0])
    if len(found) > 1:
        raise LayoutError(
            "%s holds an sgl-kernel tree in both layouts (%s); pass the one to patch"
            % (root, ", ".join(found)))
    looked = ["%s (the sgl-kernel dir itself)" % root]
    looked += ["%s (%s)" % (os.path.join(root, rel), desc) for desc, rel in LAYOUTS]
    raise LayoutError(
        "no sgl-kernel source tree found: expected CMakeLists.txt and python/sgl_kernel/ in one of: "
        + "; ".join(looked))


def python_files(package_dir):
    result = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                result.append(os.path.join(dirpath, fn))
    return result


def read_text(path):
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "surrogateescape")


def plan(kernel_dir, restrict_gencodes=False):
    """Compute every patch in memory (``restrict-gencodes`` too when asked).

    Returns (statuses, changes, errors): statuses is a list of (patch, status), changes maps
    path -> (old_text, new_text) for files whose text changes, errors is a list of AnchorMissing."""
    statuses = []
    changes = {}
    errors = []

    cmake_path = os.path.join(kernel_dir, "CMakeLists.txt")
    cmake_old = read_text(cmake_path)
    text = cmake_old
    for name, func in ((POLICY_GUARDS, patch_policy_guards),
                       (CCCL_INCLUDE, patch_cccl_include),
                       (FA3_OPTION, patch_fa3_option),
                       (COMPILE_THREADS, patch_compile_threads)):
        try:
            text, status = func(text)
        except AnchorMissing as exc:
            if exc.line and text != cmake_old:
                exc = _on_original(func, cmake_old, exc)
            exc.patch, exc.path = name, cmake_path
            errors.append(exc)
            continue
        statuses.append((name, status))
    if text != cmake_old:
        changes[cmake_path] = (cmake_old, text)

    package_dir = os.path.join(kernel_dir, "python", "sgl_kernel")
    file_statuses = []
    for path in python_files(package_dir):
        old = read_text(path)
        try:
            new, status = patch_fa3_import(old)
        except AnchorMissing as exc:
            exc.patch, exc.path = FA3_IMPORT, path
            errors.append(exc)
            continue
        if status is not None:
            file_statuses.append(status)
        if new != old:
            changes[path] = (old, new)
    if APPLIED in file_statuses:
        statuses.append((FA3_IMPORT, APPLIED))
    elif ALREADY in file_statuses:
        statuses.append((FA3_IMPORT, ALREADY))
    else:
        statuses.append((FA3_IMPORT, NOT_NEEDED))
    if restrict_gencodes:
        status, more, more_errors = plan_restrict_gencodes(kernel_dir, dict((p, c[1]) for p, c in changes.items()))
        errors += more_errors
        for path, (old, new) in more.items():
            changes[path] = (changes[path][0] if path in changes else old, new)
        if status is not None and not more_errors:
            statuses.append((RESTRICT_GENCODES, status))
    return statuses, changes, errors


def _on_original(func, original, exc):
    """The error with its line counted in the file as it is on disk (earlier patches in the chain
    may have inserted lines above it)."""
    try:
        func(original)
    except AnchorMissing as orig:
        if orig.construct == exc.construct:
            return orig
    for i, line in enumerate(split_lines(original)):
        if body(line).strip() == exc.construct:
            exc.line = i + 1
            return exc
    exc.line = None
    return exc


def write_all(changes):
    """Write every changed file: temp files first, then os.replace each; all or nothing."""
    staged = []
    try:
        for path in sorted(changes):
            real = os.path.realpath(path)
            mode = stat.S_IMODE(os.stat(real).st_mode)
            fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(real) + ".",
                                       suffix=".fleetctl-tmp", dir=os.path.dirname(real))
            staged.append((tmp, real))
            with os.fdopen(fd, "wb") as fh:
                fh.write(changes[path][1].encode("utf-8", "surrogateescape"))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
    except Exception:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    for tmp, real in staged:
        os.replace(tmp, real)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="patch_sgl_kernel.py",
        description="Idempotently patch an sgl-kernel source tree (see the module docstring).")
    parser.add_argument("sgl_kernel_dir", metavar="SGL_KERNEL_DIR",
                        help="the sgl-kernel directory, or an sglang repo root (either layout)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would change, write nothing")
    parser.add_argument("--restrict-gencodes", action="store_true",
                        help="also let -D%s=<SMs> restrict sgl-kernel's -gencode lists" % GENCODE_ARCHS_VAR)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any patch is not yet applied")
    args = parser.parse_args(argv)

    try:
        kernel_dir = locate(args.sgl_kernel_dir)
    except LayoutError as exc:
        print("%s: error: %s" % (PROG, exc), file=sys.stderr)
        return EXIT_USAGE

    statuses, changes, errors = plan(kernel_dir, args.restrict_gencodes)
    if errors:
        for exc in errors:
            print("%s: error: %s" % (PROG, exc.message()), file=sys.stderr)
        print("%s: nothing was changed" % PROG, file=sys.stderr)
        return EXIT_FAIL

    write = not (args.dry_run or args.check)
    if write and changes:
        try:
            write_all(changes)
        except (OSError, IOError) as exc:
            print("%s: error: writing the patched files failed: %s" % (PROG, exc), file=sys.stderr)
            return EXIT_FAIL

    pending = False
    for name, status in statuses:
        if status == APPLIED and not write:
            status = WOULD_APPLY
            pending = True
        print("%s: %s" % (status, name))
    if args.dry_run:
        for path in sorted(changes):
            old, new = changes[path]
            sys.stdout.writelines(difflib.unified_diff(
                split_lines(old), split_lines(new), fromfile=path, tofile=path))
    sys.stdout.flush()
    if args.check and pending:
        return EXIT_FAIL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
