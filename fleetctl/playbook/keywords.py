"""What each play key and task keyword means, in one place: the playbook reference
(``docs/reference/playbook.md``, :mod:`fleetctl.docgen.playbook_ref`) is generated from these
tables, and a test keeps them equal to the keys the parser accepts (:data:`.model.PLAY_KEYS`,
:data:`.model.CONTROL_KEYS`, :data:`.model.INCLUDE_KEYS`).

Each value is ``(shape, meaning)``: the YAML shape the parser accepts and one or two sentences of
what it does (Markdown). Where a key is Ansible's, it means what it means to Ansible unless the
meaning says otherwise.
"""

from __future__ import annotations

__all__ = ["PLAY_KEY_DOCS", "TASK_KEY_DOCS"]

#: play key -> (shape, meaning).
PLAY_KEY_DOCS: dict[str, tuple[str, str]] = {
    "name": ("string", "The play's name in the terminal and the run record; the file's stem when absent."),
    "hosts": ("pattern string, or a list of patterns (joined with `:`)",
              "The hosts the play is for when the command line gives no `--hosts`; `--hosts` wins."),
    "vars": ("mapping of name -> value (templates allowed)",
             "Play variables, rendered per host in dependency order; a name fleetctl sets for every host "
             "(`facts`, `host`, `run_id`, `run_dir`, `playbook_dir`) cannot be redefined."),
    "tasks": ("list of tasks", "The tasks, in order; `include_tasks`/`import_tasks` entries are inlined."),
    "handlers": ("list of tasks, each with a unique `name`",
                 "Tasks run once at the end of the host's pass when a task that `notify`s them changed "
                 "something."),
    "serial": ("int >= 1 or a percentage string (`\"25%\"`)",
               "Hosts per rolling batch. Absent: every host in one batch. `--serial` on the command line "
               "(which also takes a list, `1,10%,100%`) wins."),
    "max_fail_percentage": ("number 0-100",
                            "Stop the play (no further batches) when more than this percentage of a batch "
                            "failed."),
    "any_errors_fatal": ("true | false (default false)", "One failed host stops the play for every host."),
    "gather_facts": ("true | false (default true)",
                     "Gather facts before the first task; `false` leaves `facts` empty for the templates."),
}

#: task keyword -> (shape, meaning).
TASK_KEY_DOCS: dict[str, tuple[str, str]] = {
    "name": ("string (templates allowed)",
             "What the terminal, `--plan` and the run record call the task; the action's name when absent."),
    "when": ("expression string, boolean, or a list of them (all must hold)",
             "Bare Jinja expressions (no `{{ }}`) over the host's variables, facts and registered results; "
             "the task is skipped on a host where one is false."),
    "register": ("variable name",
                 "Store the result for later tasks: `status`, `rc`, `msg`, `stdout`, `stderr`, `data`, and "
                 "`changed`, `failed`, `skipped` (Ansible's names). A task skipped by its `when` stores "
                 "Ansible's skipped result (`skipped: true`, `skip_reason`; no `rc`, `stdout`, `stderr`, so "
                 "`| default(...)` applies). `--plan` and `--dry-run` run no command, so what a command "
                 "registers is not known to them: a `when` that reads it makes the task `would run if its "
                 "condition holds, unknown until applied: depends on NAME`, and a template shows "
                 "`(unknown until applied: NAME.FIELD)`; `data` (what the planner decided) is known."),
    "timeout": ("number of seconds > 0",
                "The task's deadline, replacing the action's default (each action below lists it); "
                "`--phase-timeout PHASE=S` limits a whole phase."),
    "retries": ("int >= 0 (default 0)", "Attempts after a failure before the task counts as failed."),
    "delay": ("number of seconds >= 0 (default 5)", "Wait between two attempts of `retries`."),
    "ignore_errors": ("true | false (default false)",
                      "A failure is recorded and shown but does not fail the host; its later tasks run."),
    "tags": ("tag, comma-separated string, or a list of tags",
             "Select the task with `--tags`/`--skip-tags` (Ansible's rules: `always` runs unless skipped as "
             "`always`, `never` only when named; `all`, `tagged`, `untagged`). Unselected tasks are still "
             "planned, never applied, so what their planner decides (`data`: a build's wheel) is known; "
             "what a command of theirs would return (`rc`, `stdout`...) is absent, as in Ansible."),
    "notify": ("handler name or a list of them", "Handlers to run when this task reports `changed`."),
    "env": ("mapping of NAME -> string (templates allowed)",
            "Extra environment variables for every command the task runs (actions that run commands only)."),
    "become": ("true | false (default false)",
               "Run the task's commands as root under `sudo -n` (never prompts: a sudo that wants a password "
               "fails at once, naming it); a host that sets `ansible_become_user` or `ansible_become_method` "
               "to anything but root/sudo is refused for such a play (exit 2)."),
    "include_tasks": ("file path (static, no templates)",
                      "Inline the list of tasks in that file (relative to the including file) at load time; "
                      "only `name`, `when` and `tags` may stand beside it and apply to every included task."),
    "import_tasks": ("file path (static, no templates)", "The same as `include_tasks` (both are static)."),
}
