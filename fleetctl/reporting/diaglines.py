"""Which output lines are a tool's diagnostics, told by the tool's diagnostic syntax, not by words.

A build prints thousands of lines that contain "error" or "warning" without being one: a source
file named ``error.cpp`` or ``warning_utils.cu``, a define ``-Werror=...``, a test called
``test_fatal``. A diagnostic is a line in the shape its tool prints one:

- GCC and Clang: ``FILE:LINE[:COL]: error: ...`` / ``fatal error:`` / ``warning:``, and
  ``cc1plus: fatal error:``, ``g++: error:``, ``collect2: error:`` (GCC manual, "Diagnostic
  Message Formatting Options"; Clang prints the same shape);
- nvcc and its EDG front end: ``FILE(LINE): error: ...`` / ``warning #N-D:``, ``nvcc fatal   :``,
  ``nvcc warning :``, ``ptxas fatal :``, ``cicc ... died due to signal`` (NVIDIA CUDA Compiler Driver
  NVCC guide);
- the linker: ``undefined reference to``, ``ld: ...``;
- CMake: ``CMake Error at FILE:LINE`` / ``CMake Error:`` / ``CMake Warning`` (cmake(1) message());
- ninja ``FAILED: ``, make ``make: *** [...] Error N``;
- Python and pip: ``Traceback (most recent call last):``, ``NameError: ...``,
  ``FILE:LINE: UserWarning: ...``, pip's ``ERROR: `` / ``WARNING: `` and setuptools' ``error: ``;
- the kernel's OOM kill as a shell reports it: ``Killed``; a shell's ``sh: 1: nvcc: not found``;
  a tool's ``PROG: FILE: No such file or directory`` (the C library's strerror text).

Lines are matched after their leading and trailing white space is removed.
"""

from __future__ import annotations

import re

_LOC = r"^\S(?:.*?\S)?(?:\(\d+\)|:\d+(?::\d+)?):\s+"  # FILE(13): / FILE:3: / FILE:3:5:
_TOOL = r"^[\w.+/-]+:\s+"  # cc1plus: / g++: / collect2: / /usr/bin/ld:

#: Lines that are an error (the first of them is what a failed build's summary shows).
ERROR = re.compile("|".join((
    rf"{_LOC}(?:fatal |catastrophic )?error\b",
    rf"{_TOOL}(?:fatal )?error:",
    r"^nvcc (?:fatal|error)\s*:", r"^ptxas (?:fatal|error)\s*:", r"\bcicc\b.*\bdied\b|\bdied due to signal \d+",
    r"^CMake Error\b", r"\bundefined reference to\b", r"^(?:\S*/)?ld(?:\.\w+)?: (?!warning)",
    r"^FAILED: ", r"\*\*\* \[.*\] Error \d+", r"^g?make(?:\[\d+\])?: \*\*\*",
    r"^Traceback \(most recent call last\):", r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): ",
    r"^ERROR: ", r"^error: ", r"^Killed$", r"^#error\b",
    # a shell's or a tool's own failure: "sh: 1: nvcc: not found", "bash: line 1: x: command not
    # found", "cat: /x: No such file or directory", "cp: cannot stat 'x': Permission denied"
    r"^[\w./-]+: (?:line \d+: |\d+: )?\S[^:]*: (?:command )?not found$",
    r"^[\w./-]+: .*: (?:No such file or directory|Permission denied)$",
)))

#: Lines that are a warning.
WARNING = re.compile("|".join((
    rf"{_LOC}(?:\w*Warning:|warning\b)",
    rf"{_TOOL}warning:",
    r"^nvcc warning\s*:", r"^ptxas warning\s*:", r"^CMake (?:Deprecation )?Warning\b",
    r"^WARNING: ", r"^warning: ", r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*Warning: ",
)))


def is_error(line: str) -> bool:
    """Whether ``line`` is an error diagnostic in its tool's syntax (see the module docstring)."""
    return bool(ERROR.search(line.strip()))


def is_diagnostic(line: str) -> bool:
    """Whether ``line`` is an error or a warning diagnostic in its tool's syntax."""
    text = line.strip()
    return bool(ERROR.search(text) or WARNING.search(text))
