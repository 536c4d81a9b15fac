"""Task and host statuses (Ansible's vocabulary, as an enum rather than strings)."""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """Outcome of a task on a host. ``failed`` and ``unreachable`` make the run exit 1."""

    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"

    @property
    def is_failure(self) -> bool:
        return self in (Status.FAILED, Status.UNREACHABLE)
