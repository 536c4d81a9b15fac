"""Ansible's ``--list`` JSON: the one way every JSON-producing source enters the inventory.

Dynamic inventory scripts print it (``script --list``), ``ansible-inventory --list`` prints it,
and so will fleetctl's own sources (``slurm:``). The format
(https://docs.ansible.com/ansible/latest/dev_guide/developing_inventory.html#inventory-script-conventions)::

    {
      "gpu":  {"hosts": ["gpu01", "gpu02"], "vars": {"venv": "/opt/venv"}, "children": ["h200"]},
      "h200": ["gpu03"],
      "_meta": {"hostvars": {"gpu01": {"ansible_host": "10.0.0.1"}}}
    }

read as Ansible's ``script`` plugin reads it: groups in the order written; for each, its hosts
join it, then its vars are set, then its children are added (created when first named); a group
given as a list is that list of hosts; a mapping with none of ``hosts``/``vars``/``children`` is a
group holding one host of the same name, with those vars. Then each host listed in a group gets
its ``_meta.hostvars`` (or, when ``_meta.hostvars`` is absent, what ``script --host HOST``
prints). Hosts named only in ``_meta`` are not added.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from fleetctl.errors import InputError, InventoryError

from ..data import InventoryBuilder
from ..vars import VarSource, describe

__all__ = ["ingest_list_json", "run_script", "script_timeout_s", "SCRIPT_TIMEOUT_S", "SCRIPT_TIMEOUT_ENV"]

SCRIPT_TIMEOUT_S = 60.0
"""How long an inventory script (``--list`` or one ``--host``) may run by default, seconds.
Ansible's script plugin waits as long as it takes; fleetctl promises bad input is one clear line,
and a hung CMDB must not hang a deploy (new-user trial: ``#!/bin/sh`` ``sleep 1000`` as ``-i``)."""

SCRIPT_TIMEOUT_ENV = "FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S"
"""The controller's environment variable that sets :data:`SCRIPT_TIMEOUT_S` (seconds, > 0)."""


def script_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """The inventory script timeout, seconds: ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S``, else 60.

    Raises:
        InputError: the variable is not a positive finite number of seconds (exit 2, naming it).
    """
    raw = (os.environ if environ is None else environ).get(SCRIPT_TIMEOUT_ENV, "").strip()
    if not raw:
        return SCRIPT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{SCRIPT_TIMEOUT_ENV}: want a positive number of seconds, got {raw!r}")
    return value


def ingest_list_json(builder: InventoryBuilder, data: Any, *, file: str, base_dir: str | None = None,
                     host_vars: Callable[[str], Mapping[str, Any]] | None = None, check_names: bool = True) -> None:
    """Add ``--list`` JSON to ``builder``.

    Args:
        data: the decoded JSON document.
        file: how messages name the source (a script's path, ``slurm:gpu``).
        base_dir: the folder relative paths in vars resolve against (None: the current folder).
        host_vars: called with a host name when the document has no ``_meta.hostvars`` (a
            script's ``--host HOST``); None means such hosts have no host vars.
        check_names: check var names for typos (off for ``ansible-inventory`` output, whose
            plugins may compose any name).

    Raises:
        InventoryError: the document is not ``--list`` JSON (naming the key at fault).
    """
    def error(message: str, key: str | None = None) -> InventoryError:
        return InventoryError(message, file=file, key=key)

    def src(name: str, value: Any, group: str | None, key: str) -> VarSource:
        return VarSource(name, value, group, file, None, key, base_dir)

    if not isinstance(data, Mapping):
        raise error(f"inventory JSON must be an object of groups, not {describe(data)}")
    hostvars: Any = None
    listed: dict[str, None] = {}
    for group, gdata in data.items():
        if group == "_meta":
            if not isinstance(gdata, Mapping):
                raise error(f"_meta must be an object, not {describe(gdata)}", "_meta")
            hostvars = gdata.get("hostvars")
            if not isinstance(hostvars, Mapping):
                raise error(f"_meta.hostvars must be an object of hosts, not {describe(hostvars)}", "_meta.hostvars")
            continue
        if not isinstance(group, str) or not group.strip():
            raise error(f"a group name must be a non-empty string, not {describe(group)}")
        builder.add_group(group, file=file)
        if not isinstance(gdata, Mapping):
            gdata = {"hosts": gdata}
        elif not any(k in gdata for k in ("hosts", "vars", "children")):
            gdata = {"hosts": [group], "vars": gdata}
        hosts = gdata.get("hosts", [])
        if hosts is None or not isinstance(hosts, list):
            raise error(f"hosts of group {group!r} must be a list of names, not {describe(hosts)}", f"{group}.hosts")
        for name in hosts:
            if not isinstance(name, str) or not name.strip():
                raise error(f"a host name must be a non-empty string, not {describe(name)}", f"{group}.hosts")
            if any(c.isspace() or c in ",[]" for c in name):
                raise error(f"host name {name!r} contains whitespace, ',' or brackets; no host pattern could "
                            "select it", f"{group}.hosts")
            listed[name] = None
            builder.add_host(name, group, file=file)
        gvars = gdata.get("vars", {})
        if not isinstance(gvars, Mapping):
            raise error(f"vars of group {group!r} must be an object, not {describe(gvars)}", f"{group}.vars")
        for var, value in gvars.items():
            builder.set_var(builder.groups[group], src(var, value, group, f"{group}.vars.{var}"),
                            check_name=check_names)
        children = gdata.get("children", [])
        if not isinstance(children, list):
            raise error(f"children of group {group!r} must be a list of names, not {describe(children)}",
                        f"{group}.children")
        for child in children:
            if not isinstance(child, str) or not child.strip():
                raise error(f"a group name must be a non-empty string, not {describe(child)}", f"{group}.children")
            builder.add_group(child, file=file)
            builder.add_child(group, child, file=file, key=f"{group}.children")
    for name in listed:
        if hostvars is not None:
            got = hostvars.get(name, {})
        else:
            got = host_vars(name) if host_vars is not None else {}
        if not isinstance(got, Mapping):
            raise error(f"host vars of {name!r} must be an object, not {describe(got)}", f"_meta.hostvars.{name}")
        for var, value in got.items():
            builder.set_var(builder.hosts[name], src(var, value, None, f"_meta.hostvars.{name}.{var}"),
                            check_name=check_names)


def run_script(path: str, *args: str, timeout_s: float | None = None) -> Any:
    """Run an inventory script with ``args`` (``--list`` or ``--host NAME``) and decode its JSON.

    The script runs as given (its own shebang), in the current folder, with the environment
    inherited, in a session of its own; its stderr is shown only when it fails. Empty output from
    ``--host`` means no vars. ``timeout_s``: seconds it may run (None: :func:`script_timeout_s`);
    past it, the script and every process it started (its process group) are killed, so a child
    holding its output open (``sleep`` under ``sh``) neither hangs fleetctl nor is left behind.

    Raises:
        InventoryError: the script cannot be run, exits non-zero, runs past ``timeout_s`` seconds,
            or prints something that is not UTF-8 JSON (naming the script and the cause).
        InputError: ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S`` is not a positive number.
    """
    limit_s = script_timeout_s() if timeout_s is None else timeout_s
    argv = [os.path.abspath(path), *args]
    what = " ".join(args)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError as exc:
        raise InventoryError(f"inventory script cannot be run: {exc.strerror or exc}", file=path) from None
    with proc:
        try:
            stdout, stderr_bytes = proc.communicate(timeout=limit_s)
        except BaseException as exc:  # past the limit, or Ctrl-C (its own session gets no SIGINT)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            raise InventoryError(f"inventory script ran past {limit_s:g} s with {what} and was stopped "
                                 f"(set {SCRIPT_TIMEOUT_ENV} for a longer limit)", file=path) from None
    res = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr_bytes)
    stderr = res.stderr.decode("utf-8", "replace").strip().splitlines()
    last = f": {stderr[-1].strip()}" if stderr else ""
    if res.returncode != 0:
        raise InventoryError(f"inventory script exited with status {res.returncode} for {what}{last}", file=path)
    try:
        text = res.stdout.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(f"inventory script printed bytes that are not UTF-8 for {what}", file=path) from None
    if args[:1] == ("--host",) and not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InventoryError(f"inventory script output for {what} is not JSON: {exc}", file=path) from None
