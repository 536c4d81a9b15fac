"""Playbooks: loading and validating them (:mod:`.parser`) and their Jinja2 templating (:mod:`.templating`)."""

from .parser import CONTROL_KEYS, INCLUDE_KEYS, PLAY_KEYS, Playbook, Task, load_playbook

__all__ = ["CONTROL_KEYS", "INCLUDE_KEYS", "PLAY_KEYS", "Playbook", "Task", "load_playbook"]
