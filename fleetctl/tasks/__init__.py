"""Actions: one module per action, each declaring an :class:`~fleetctl.tasks.base.Action` (its
arguments model, phase, default deadline and pure planner). :data:`ACTIONS` is the registry the
playbook parser validates against and the engine runs from; a new action is one module and one
line here.
"""

from __future__ import annotations

from . import (build_wheel, command, copy, debug, fail, pip_install, script, shell, venv_stage, venv_switch,
               venv_upgrade, verify)
from .base import Action

#: action name -> its declaration.
ACTIONS: dict[str, Action] = {m.ACTION.name: m.ACTION for m in (
    copy, script, command, shell, build_wheel, pip_install, verify, fail, debug, venv_stage, venv_upgrade,
    venv_switch,
)}

__all__ = ["ACTIONS", "Action"]
