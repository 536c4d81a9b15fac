"""Task actions and their arguments: the contract between playbooks and task executors.

Each action a playbook task can name (``copy``, ``command``, ``build_wheel``...) has a pydantic v2
model of its arguments here. Unknown argument keys are rejected (with a did-you-mean from
:func:`fleetctl.playbook.load_playbook`), and values are coerced only where it is unambiguous (a
number in an argv list becomes a string; a YAML boolean in ``cmake_defines`` becomes ``ON``/``OFF``).

:data:`ACTIONS` maps each action name to its model and its default timeout in seconds. Executors
live in ``fleetctl/tasks/<action>.py``; they receive a validated model from
:meth:`fleetctl.playbook.Task.resolve_args` (templates rendered for one host).

Strings holding Jinja templates (``"{{ workdir }}/src"``) are kept as written in these models; the
format checks below (octal modes, arch lists, versions) skip them, and run again on the rendered
value at run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ACTIONS",
    "COMMAND_ACTIONS",
    "DEFAULT_VERIFY_SCRIPT",
    "ActionArgs",
    "ActionSpec",
    "BuildWheelArgs",
    "CommandArgs",
    "CopyArgs",
    "DebugArgs",
    "FailArgs",
    "PipInstallArgs",
    "ScriptArgs",
    "ShellArgs",
    "VerifyArgs",
    "is_template",
]

#: The verification script used when ``verify.script`` is not given, relative to the fleetctl
#: project root (the folder holding ``playbooks/``).
DEFAULT_VERIFY_SCRIPT = "playbooks/scripts/verify_package.py"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CMAKE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*$")
_ARCH = re.compile(r"^\d+\.\d+[af]?(\+PTX)?$")
_VERSION = re.compile(r"^\d+(\.\d+){0,3}$")


def is_template(value: object) -> bool:
    """True when ``value`` is a string holding Jinja syntax (``{{``, ``{%`` or ``{#``)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


def _scalar_to_str(value: object, what: str) -> object:
    """Turn a YAML number into its string; leave strings alone; reject bools and None.

    Anything else is returned unchanged so that pydantic reports the type error.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a string, got boolean {value!r} (quote it)")
    if value is None:
        raise ValueError(f"{what} must be a string, got null")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a string, got {value!r}")
        return repr(value)
    return value


def _argv_list(value: object, what: str) -> object:
    if is_template(value):
        return value  # rendered at run time
    if isinstance(value, str):
        raise ValueError(f"{what} must be a list of strings, not a string")
    if isinstance(value, (list, tuple)):
        return [_scalar_to_str(item, f"{what} items") for item in value]
    return value


def _env_mapping(value: object) -> object:
    """Validate an environment mapping: NAME -> string (numbers become strings)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return value  # pydantic reports "should be a valid dictionary"
    out: dict[object, object] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not (_ENV_NAME.match(key) or is_template(key)):
            raise ValueError(f"invalid environment variable name {key!r}")
        out[key] = _scalar_to_str(val, f"environment variable {key}")
    return out


def _non_empty(value: str, what: str) -> str:
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{what} must not be empty")
    return value


class ActionArgs(BaseModel):
    """Base of every action's argument model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CopyArgs(ActionArgs):
    """``copy``: upload a local file or folder to the host (SFTP).

    Attributes:
        src: local path, file or folder; relative paths are relative to the playbook file's folder.
        dest: remote path. A folder ``src`` is copied as a folder to ``dest``.
        mode: permission bits for the uploaded file(s): an int (YAML ``0644`` is octal) or an octal
            string (``"0755"``); ``None`` keeps the default mode.
    """

    src: str
    dest: str
    mode: int | None = None

    @field_validator("src", "dest")
    @classmethod
    def _paths(cls, v: str, info) -> str:
        return _non_empty(v, info.field_name)

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, v: object) -> object:
        if is_template(v):
            return v
        if isinstance(v, bool):
            raise ValueError("mode must be an octal number such as '0644'")
        if isinstance(v, str):
            text = v.strip()
            text = text[2:] if text.lower().startswith("0o") else text
            if not re.fullmatch(r"[0-7]{1,4}", text):
                raise ValueError(f"mode must be an octal number such as '0644', got {v!r}")
            v = int(text, 8)
        if isinstance(v, int) and not 0 <= v <= 0o7777:
            raise ValueError(f"mode must be between 0 and 07777, got {v!r}")
        return v


class ScriptArgs(ActionArgs):
    """``script``: upload a local script and run it on the host.

    Attributes:
        src: local script path, relative to the playbook file's folder.
        args: arguments passed after the script path (numbers become strings).
        interpreter: program that runs the script; ``None`` means the host's venv Python
            (``{{ python }}``).
        env: extra environment variables for the script (over the task's ``env``).
    """

    src: str
    args: list[str] = Field(default_factory=list)
    interpreter: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("src")
    @classmethod
    def _src(cls, v: str) -> str:
        return _non_empty(v, "src")

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, v: object) -> object:
        return _argv_list(v, "args")

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: object) -> object:
        return _env_mapping(v)


class CommandArgs(ActionArgs):
    """``command``: run one argv on the host, without a shell.

    Attributes:
        argv: the program and its arguments, a non-empty list (numbers become strings). A plain
            string is an error: use a list, or the ``shell`` action.
        cwd: remote working folder; ``None`` means the login folder.
        creates: remote path; when it exists the task is skipped.
    """

    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    creates: str | None = None

    @field_validator("argv", mode="before")
    @classmethod
    def _argv(cls, v: object) -> object:
        if isinstance(v, str) and not is_template(v):
            raise ValueError(
                "argv must be a list of strings, not a string (write [prog, arg, ...], "
                "or use the shell action)"
            )
        return _argv_list(v, "argv")


class ShellArgs(ActionArgs):
    """``shell``: run a command line through a shell on the host.

    Attributes:
        cmd: the command line.
        executable: the shell, run as ``executable -c cmd``.
        cwd: remote working folder; ``None`` means the login folder.
    """

    cmd: str
    executable: str = "/bin/sh"
    cwd: str | None = None

    @field_validator("cmd", "executable")
    @classmethod
    def _nonempty(cls, v: str, info) -> str:
        return _non_empty(v, info.field_name)


class BuildWheelArgs(ActionArgs):
    """``build_wheel``: build a wheel from a remote source tree for the host's own SM.

    Attributes:
        src: remote source folder (holds ``pyproject.toml``).
        out_dir: remote folder the wheel is written to.
        no_build_isolation: build in the venv itself (torch, scikit-build-core, nanobind there).
        cmake_defines: extra ``-D`` defines, NAME -> value; YAML booleans become ``ON``/``OFF``.
        env: environment overrides for the build (over the computed CUDA/venv environment).
        max_jobs: parallel compile jobs; ``None`` derives it from the host's cores and memory.
        archs: arch list override in ``TORCH_CUDA_ARCH_LIST`` form (``"9.0a;12.0a"``); ``None``
            means the host's own GPUs.
        required_build_packages: import names that must be importable in the venv before building.
        min_cmake: lowest CMake version accepted (a string: ``"3.18"``).
        min_free_disk_mib: free disk space (MiB) required in ``out_dir``'s file system.
        check_sass: after the build, require the host's SM in the built extension's SASS.
        tool: ``"uv"``, ``"pip"``, or ``"auto"`` (uv when the host has it).
        build: ``"once"`` builds one wheel per arch class (hosts that would build the same
            wheel) on one member and pushes it to the others; ``"each"`` builds on every host.
    """

    src: str
    out_dir: str
    no_build_isolation: bool = True
    cmake_defines: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    max_jobs: int | None = Field(default=None, ge=1)
    archs: str | None = None
    required_build_packages: list[str] = Field(default_factory=lambda: ["scikit_build_core", "nanobind"])
    min_cmake: str = "3.18"
    min_free_disk_mib: int = Field(default=2048, ge=0)
    check_sass: bool = True
    tool: Literal["auto", "uv", "pip"] = "auto"
    build: Literal["once", "each"] = "once"

    @field_validator("src", "out_dir")
    @classmethod
    def _paths(cls, v: str, info) -> str:
        return _non_empty(v, info.field_name)

    @field_validator("cmake_defines", mode="before")
    @classmethod
    def _defines(cls, v: object) -> object:
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            return v
        out: dict[object, object] = {}
        for key, val in v.items():
            if not isinstance(key, str) or not (_CMAKE_NAME.match(key) or is_template(key)):
                raise ValueError(f"invalid CMake variable name {key!r}")
            if isinstance(val, bool):
                val = "ON" if val else "OFF"
            out[key] = _scalar_to_str(val, f"cmake_defines.{key}")
        return out

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: object) -> object:
        return _env_mapping(v)

    @field_validator("archs", mode="before")
    @classmethod
    def _archs(cls, v: object) -> object:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"archs must be a string such as '9.0a;12.0a' (quote it), got {v!r}")
        if isinstance(v, str) and not is_template(v):
            parts = [p for p in re.split(r"[;\s]+", v.strip()) if p]
            if not parts or not all(_ARCH.match(p) for p in parts):
                raise ValueError(f"archs must look like '9.0a;12.0a', got {v!r}")
        return v

    @field_validator("min_cmake", mode="before")
    @classmethod
    def _min_cmake(cls, v: object) -> object:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"min_cmake must be a quoted version string such as '3.18', got {v!r}")
        if isinstance(v, str) and not is_template(v) and not _VERSION.match(v.strip()):
            raise ValueError(f"min_cmake must be a version such as '3.18', got {v!r}")
        return v

    @field_validator("required_build_packages", mode="before")
    @classmethod
    def _packages(cls, v: object) -> object:
        if isinstance(v, str) and not is_template(v):
            raise ValueError("required_build_packages must be a list of import names")
        return v


class PipInstallArgs(ActionArgs):
    """``pip_install``: install a wheel into the host's venv.

    Attributes:
        wheel: remote wheel path, or a glob (``"{{ out_dir }}/fp4_kernels-*.whl"``) that must match
            exactly one file.
        force_reinstall: reinstall even when the same version is installed.
        no_deps: do not install dependencies.
        keep_previous: keep the previously installed wheel so that a failed verify can roll back.
        tool: ``"uv"``, ``"pip"``, or ``"auto"`` (uv when the host has it).
    """

    wheel: str
    force_reinstall: bool = True
    no_deps: bool = True
    keep_previous: bool = True
    tool: Literal["auto", "uv", "pip"] = "auto"

    @field_validator("wheel")
    @classmethod
    def _wheel(cls, v: str) -> str:
        return _non_empty(v, "wheel")


class VerifyArgs(ActionArgs):
    """``verify``: import an installed package on the host and check it.

    Attributes:
        package: import name (``fp4_kernels``); torch is imported first.
        symbols: attribute names the package must have.
        script: local verification script; ``None`` means :data:`DEFAULT_VERIFY_SCRIPT`.
        smoke: run the numeric smoke test on the GPU against the reference.
        fa3_fallback: when set, require that the FA3 fallback is (True) or is not (False) active.
    """

    package: str
    symbols: list[str] = Field(default_factory=list)
    script: str | None = None
    smoke: bool = True
    fa3_fallback: bool | None = None

    @field_validator("package")
    @classmethod
    def _package(cls, v: str) -> str:
        if not is_template(v) and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", v):
            raise ValueError(f"package must be an import name such as 'fp4_kernels', got {v!r}")
        return v

    @field_validator("symbols", mode="before")
    @classmethod
    def _symbols(cls, v: object) -> object:
        if isinstance(v, str) and not is_template(v):
            raise ValueError("symbols must be a list of names")
        return v


class FailArgs(ActionArgs):
    """``fail``: fail the host with a message (usually under a ``when``)."""

    msg: str = "Failed as requested"


class DebugArgs(ActionArgs):
    """``debug``: emit a message (any value, rendered) as an event; changes nothing."""

    msg: Any = ""


class ActionSpec(NamedTuple):
    """One entry of :data:`ACTIONS`: the argument model and the default timeout in seconds."""

    model: type[ActionArgs]
    timeout_s: float


#: action name -> (argument model, default timeout in seconds). Every task gets a finite timeout.
ACTIONS: dict[str, ActionSpec] = {
    "copy": ActionSpec(CopyArgs, 300.0),
    "script": ActionSpec(ScriptArgs, 600.0),
    "command": ActionSpec(CommandArgs, 600.0),
    "shell": ActionSpec(ShellArgs, 600.0),
    "build_wheel": ActionSpec(BuildWheelArgs, 7200.0),
    "pip_install": ActionSpec(PipInstallArgs, 900.0),
    "verify": ActionSpec(VerifyArgs, 600.0),
    "fail": ActionSpec(FailArgs, 60.0),
    "debug": ActionSpec(DebugArgs, 60.0),
}

#: Actions that run commands on the host, and so accept the task control ``env``.
COMMAND_ACTIONS: frozenset[str] = frozenset(
    {"script", "command", "shell", "build_wheel", "pip_install", "verify"}
)
