"""The template context of one host: what ``{{ ... }}`` in a playbook can name.

Ansible's precedence, lowest first: inventory vars < play vars < extra vars (``-e``) < registered
results, plus fleetctl's standard names (``facts``, ``host``, ``workdir``, ``run_id``, ``run_dir``,
``playbook_dir``, ``venv``, ``python``). Secret values found on the way (``{value, secret: true}``
markers, secret-looking names and keys, at any depth) join the run's redactor before anything is rendered or run, and so
do the values templates render from them (play vars built from a secret, and the ``{{ ... }}`` of
the task about to run that read one: :mod:`fleetctl.playbook.secret_values`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..playbook.secret_values import derived_secret_names, leaf_strings, secret_renderings
from ..playbook.variables import render_vars
from ..util.redact import Redactor, is_marked, secret_paths, unwrap
from .session import HostSession


def host_context(session: HostSession, playbook: Any, extra_vars: Mapping[str, Any],
                 redactor: Redactor, task: Any = None) -> dict[str, Any]:
    """The context for ``session``'s host in ``playbook``, with ``extra_vars`` (``-e``). With
    ``task``, what its name, arguments and ``env`` render from secrets joins ``redactor`` too.

    Raises:
        RenderError: a play var's template fails for this host.
    """
    host_vars, host_secrets = unwrap(session.host.vars)
    extra, extra_secrets = unwrap(dict(extra_vars))
    redactor.add(host_secrets | extra_secrets)
    base = {
        **host_vars,
        "facts": session.facts,
        "host": session.host.name,
        "workdir": session.workdir,
        "run_id": session.run_id,
        "run_dir": session.run_dir,
        "playbook_dir": str(playbook.playbook_dir),
        "venv": session.venv,
        "python": session.python,
    }
    # -e extra vars win over play vars (Ansible's precedence) and play-var templates see them,
    # except ``workdir``: ``-e workdir=~/w`` is the host setting, already resolved into
    # session.workdir (absolute, per user in a shared one); the raw value sent a play's
    # ``{{ workdir }}/wheels`` elsewhere (operator trial: taken against /)
    resolved = {"workdir": session.workdir} if session.workdir else {}
    raw_play_vars = {k: v for k, v in unwrap(playbook.vars)[0].items() if k not in extra}
    play_vars = render_vars(raw_play_vars, {**base, **extra, **resolved})
    _, play_secrets = unwrap({k: ({"value": play_vars[k], "secret": True} if is_marked(v) else play_vars[k])
                              for k, v in playbook.vars.items() if k in play_vars})
    redactor.add(play_secrets)
    context = {**base, **play_vars, **extra, **resolved, **session.registered}
    # a name secret in any layer stays secret (a plain play var over a marked inventory var errs toward hiding)
    # ... and so does a key at any depth (``registry.password``: the secret's path, not just its name)
    secret = derived_secret_names(raw_play_vars, set().union(*map(secret_paths, (
        session.host.vars, playbook.vars, extra_vars, session.registered))))
    derived = {k: v for k, v in raw_play_vars.items() if k in secret}
    redactor.add({s for k in derived for s in leaf_strings(play_vars[k])})
    redactor.add(secret_renderings(derived, context, secret))
    if task is not None:
        redactor.add(secret_renderings([task.name, task.raw_args, dict(task.env)], context, secret))
    return context
