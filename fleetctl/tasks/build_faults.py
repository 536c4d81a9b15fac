"""Failed builds named by their cause, from the build's own output (the backstops of preflights).

* nvcc refused the host compiler (``crt/host_config.h``'s ``unsupported GNU version!``):
  :func:`fleetctl.build.hostcompiler.rejected_in_output`; the root fix is the preflight's choice of a
  compiler nvcc accepts (:mod:`~fleetctl.tasks.build_toolchain`), this names what slipped past it.
* a write failed (``Disk quota exceeded``, ``No space left on device``, ``Read-only file system``,
  ``Input/output error``): :func:`fleetctl.connection.storagefaults.name_write_error`, with the path the tool
  named (else the build's TMPDIR) and the likely cause.

A compiler killed for memory is :func:`~fleetctl.tasks.build_keys.is_killed` (it is retried).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..connection.base import CommandResult
from ..build.hostcompiler import rejected_in_output
from ..connection.storagefaults import name_write_error

#: Characters of each stream scanned (the end of the output, where the failure is).
SCAN_CHARS = 400_000


def named_failure(res: CommandResult, facts: Mapping[str, Any], where: str | None = None) -> str | None:
    """One line naming why the build ``res`` failed, when its output shows a known cause; else None.

    Args:
        res: the failed build command.
        facts: the facts the build ran with (the toolkit, ``host_compilers.used``).
        where: the folder named when a write error's line names no path (the build's TMPDIR).
    """
    text = res.stderr_text[-SCAN_CHARS:] + "\n" + res.stdout_text[-SCAN_CHARS:]
    return rejected_in_output(text, facts) or name_write_error(text, where)
