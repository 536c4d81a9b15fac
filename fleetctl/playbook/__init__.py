"""Load and validate playbooks: a pure model, checked before any host is touched.

A playbook file is YAML holding one play: a mapping (or a one-element list of it, Ansible style)::

    name: Build and install FP4 kernels
    hosts: gpu-nodes            # default pattern; --hosts overrides it
    vars:
      src_dir: "{{ workdir }}/fp4"
    tasks:
      - name: upload sources
        copy: {src: ../kernel_src, dest: "{{ src_dir }}"}
      - name: build
        build_wheel: {src: "{{ src_dir }}", out_dir: "{{ src_dir }}/dist"}
        register: build
        notify: report
    handlers:
      - name: report
        debug: {msg: "{{ build }}"}

A task has exactly one action key (:data:`fleetctl.tasks.ACTIONS`) with its arguments, an
optional ``name``, and controls: ``when``, ``register``, ``timeout``, ``retries``, ``delay``,
``ignore_errors``, ``tags``, ``notify``, ``env``, ``become``. ``include_tasks: FILE`` (or
``import_tasks``) inlines a list of tasks from another file at load time. Every key, keyword and
action argument: ``docs/reference/playbook.md`` (generated, :mod:`fleetctl.docgen.playbook_ref`).

Every problem is a :class:`~fleetctl.errors.PlaybookError` whose one line names the file, the line,
the task (``tasks[3] (build)``) and the key. The only I/O is reading the playbook file and the
files it includes.

The package, bottom up (each module imports only those above it): :mod:`.messages` (locations and
one-line messages), :mod:`.yamldoc` (one YAML file with lines, size limits), :mod:`.templating` (the
Jinja environment, rendering, ``when``), :mod:`.variables` (which names a template needs, play vars in
dependency order), :mod:`.secret_values` (what templates render from secrets), :mod:`.model` (:class:`Task`, :class:`Playbook`, :func:`check_undefined`),
:mod:`.task_parser` (task lists, includes) and :mod:`.parser` (:func:`load_playbook`).
"""

from .model import CONTROL_KEYS, DEFAULT_DELAY_S, INCLUDE_KEYS, PLAY_KEYS, Playbook, Task, check_undefined
from .parser import load_playbook
from .templating import (
    BUILTIN_NAMES, RenderError, check_expression, check_template, evaluate_when, render, render_string,
)
from .variables import RESERVED_NAMES, STANDARD_NAMES, expression_variables, render_vars, template_variables

__all__ = [
    "BUILTIN_NAMES",
    "CONTROL_KEYS",
    "DEFAULT_DELAY_S",
    "INCLUDE_KEYS",
    "PLAY_KEYS",
    "RESERVED_NAMES",
    "STANDARD_NAMES",
    "Playbook",
    "RenderError",
    "Task",
    "check_expression",
    "check_template",
    "check_undefined",
    "evaluate_when",
    "expression_variables",
    "load_playbook",
    "render",
    "render_string",
    "render_vars",
    "template_variables",
]
