"""The build plan's notes as a play that builds tells them (:func:`told_notes`): ``-e archs``
replaces the note of the archs facts chose (:func:`fleetctl.build.archs.build_plan`'s
``arch_choice``), and a note of a phase the play lacks is not told (``phase_notes``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .archs import parse_arch_list


def told_notes(plan: Mapping[str, Any], archs_given: str | None, phases: Collection[str] | None = None) -> list[str]:
    """The build plan's notes as a play that builds tells them. With ``-e archs`` given (its value,
    ``archs_given``) the build is for those archs, not the ones facts chose, so the note of that
    choice (:func:`build_plan`'s ``arch_choice``: no GPU -> ``fallback_archs``, GPUs of different
    SMs -> all of them) says what is built and why instead (fresh operator's trial: ``-e
    archs=9.0a`` on a host with no GPU noted "building for fallback_archs 9.0a;12.0a", then built
    only sm_90a).

    ``phases``: the phases of the play's tasks (``build``, ``install``, ``verify``...); a note
    listed under a phase in ``plan["phase_notes"]`` (:func:`fleetctl.facts.gather.complete_facts`:
    "verify refuses this host: torch is CPU-only") is told only when the play has that phase. A
    custom playbook that builds and never verifies is not warned of what verify would refuse;
    ``fleetctl facts`` keeps every note. ``None``: every note."""
    notes = [str(n) for n in plan.get("notes") or []]
    if phases is not None:
        absent = {str(n) for phase, listed in (plan.get("phase_notes") or {}).items() if phase not in phases
                  for n in listed}
        notes = [n for n in notes if n not in absent]
    choice = plan.get("arch_choice")
    if not archs_given or not choice:
        return notes
    try:
        built = ";".join(parse_arch_list(str(archs_given)))
    except ValueError:  # the task refuses it with its own line
        built = str(archs_given)
    said = f"{choice['why']}: building for {built} (-e archs={archs_given}), not {choice['instead']}"
    return [said if n == choice["note"] else n for n in notes]
