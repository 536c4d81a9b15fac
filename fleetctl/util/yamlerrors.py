"""The words of a YAML file's problems: one line, through the caller's error class, no YAML internals.

:func:`syntax_error` turns a PyYAML error (syntax, a character YAML does not allow, a tab used
for indentation, an unknown tag) into ``FILE:LINE: YAML syntax error: PROBLEM (column N)``;
:func:`vault_error` is the refusal of an Ansible Vault value (``!vault``). Raised by
:mod:`fleetctl.util.yamlload`; both return the error for the caller to raise.
"""

from __future__ import annotations

from typing import Any

import yaml

from fleetctl.errors import InputError

__all__ = ["syntax_error", "vault_error"]


def vault_error(error_cls: type[InputError], **where_: Any) -> InputError:
    """The error for an Ansible Vault value; ``vault`` is set on it, so that a caller able to hand
    the file to Ansible (the inventory, through ``ansible-inventory``) can tell it apart."""
    err = error_cls(
        "Ansible Vault values (!vault) are not supported; decrypt the value or keep it out of this file", **where_
    )
    err.vault = True  # type: ignore[attr-defined]
    return err


def syntax_error(exc: yaml.YAMLError, text: str, file: str, error_cls: type[InputError]) -> InputError:
    """One line for a PyYAML error: where it is and what is wrong, no YAML internals."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        char = exc.character
        shown = repr(chr(char)) if isinstance(char, int) else repr(char)
        return error_cls(
            f"YAML syntax error: character {shown} is not allowed in YAML", file=file, line=line
        )
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if problem.startswith("expected <block end>"):
        problem = "indentation does not line up with the lines above " + (
            "(a key at a level that was not opened, or a list item among keys)"
        )
    elif "'<stream end>'" in problem or "unexpected end of stream" in problem:
        if context and "quoted scalar" in context and context_mark is not None:
            problem = "unexpected end of file: the quoted string that starts here is not closed"
            mark = context_mark
        elif context and "flow" in context:
            problem = "unexpected end of file: a '[' or '{' is not closed"
        else:
            problem = f"unexpected end of file ({context or problem})"
    elif "'\\t'" in problem or "tab character" in problem:
        problem = "tab character; YAML allows only spaces for indentation and separation"
    elif problem.startswith("could not determine a constructor for the tag"):
        problem = "unknown YAML tag " + problem.rsplit(" ", 1)[-1]
    elif context and problem.startswith("but "):
        problem = f"{context}, {problem}"
    elif context and problem != context and context.startswith(("while parsing", "while scanning")):
        problem = f"{problem} ({context})"
    problem = " ".join(problem.split())
    if mark is None:
        return error_cls(f"YAML syntax error: {problem}", file=file)
    last_line = max(1, len(text.splitlines()))
    if mark.line + 1 > last_line:  # the end of the file: no column to show
        return error_cls(f"YAML syntax error: {problem}", file=file, line=last_line)
    return error_cls(f"YAML syntax error: {problem} (column {mark.column + 1})", file=file, line=mark.line + 1)
