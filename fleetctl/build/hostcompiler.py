"""The host compiler nvcc accepts: pure rules, from facts to a choice (or the reason there is none).

nvcc compiles the host half of every ``.cu`` file with a host C++ compiler: ``-ccbin`` /
``NVCC_CCBIN`` when given, else ``gcc`` on the PATH (nvcc 13.0 runs ``gcc -x c++``; CMake passes
``-ccbin`` from ``CMAKE_CUDA_HOST_COMPILER``, whose default is the ``CUDAHOSTCXX`` environment
variable, CMake docs). The toolkit's ``crt/host_config.h`` refuses a compiler newer than its
release supports::

    #if __GNUC__ > 15
    #error -- unsupported GNU version! gcc versions later than 15 are not supported! ...

(CUDA 13.0, ``/usr/local/cuda/targets/x86_64-linux/include/crt/host_config.h``); clang is checked
the same way (``__clang_major__ >= 21`` refused in 13.0). Facts read that bound from the host's
own header (``cuda.host_compiler_max``, ``toolkits[].host_compiler_max``); when it cannot be read,
:data:`MAX_HOST_COMPILER` (NVIDIA's "CUDA Installation Guide for Linux", host compiler support
table, and the ``host_config.h`` of each release) gives it.

Facts (``playbooks/scripts/facts.py``, ``host_compilers``)::

    {"default": COMPILER | null,    # what nvcc runs without -ccbin: gcc on the build's PATH
     "default_cxx": COMPILER | null,  # g++ there (a refused one is replaced too)
     "candidates": [COMPILER...],   # g++-N, clang++-N, clang++, gcc-toolset/devtoolset g++
     "search_path": [dir...]}
    COMPILER = {"path", "realpath", "name", "kind": "gnu" | "clang" | null, "major", "minor",
                "version": "12.2", "banner": first line of --version, "error"}

``kind``/``major``/``minor`` come from the compiler's own predefined macros (``-dM -E``:
``__GNUC__``, ``__clang_major__``), exactly what ``host_config.h`` tests.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Newest host compiler major each CUDA release accepts, ``(major, minor) of CUDA -> {"gnu": N,
#: "clang": N}``: the release's ``crt/host_config.h`` check (``__GNUC__ > N`` refused;
#: ``__clang_major__ >= N + 1`` refused) and NVIDIA's "CUDA Installation Guide for Linux" host
#: compiler table. A release not listed takes the entry of the newest listed release before it
#: with the same major (a minor release keeps its predecessor's bound until its header says more).
#: clang bounds are listed only where a release's header was read.
MAX_HOST_COMPILER: dict[tuple[int, int], dict[str, int]] = {
    (10, 1): {"gnu": 8}, (10, 2): {"gnu": 8},
    (11, 0): {"gnu": 9}, (11, 1): {"gnu": 10}, (11, 2): {"gnu": 10}, (11, 3): {"gnu": 10, "clang": 11},
    (11, 4): {"gnu": 11}, (11, 5): {"gnu": 11}, (11, 6): {"gnu": 11, "clang": 13},
    (11, 7): {"gnu": 11, "clang": 13}, (11, 8): {"gnu": 11, "clang": 13},
    (12, 0): {"gnu": 12}, (12, 1): {"gnu": 12}, (12, 2): {"gnu": 12}, (12, 3): {"gnu": 12},
    (12, 4): {"gnu": 13}, (12, 5): {"gnu": 13}, (12, 6): {"gnu": 13}, (12, 8): {"gnu": 14}, (12, 9): {"gnu": 14},
    (13, 0): {"gnu": 15, "clang": 20},
}

#: The ``host_config.h`` lines that hold the bounds (facts apply the same patterns on the host).
GNU_BOUND = re.compile(r"#\s*if\s+__GNUC__\s*>\s*(\d+)")
CLANG_BOUND = re.compile(r"\(__clang_major__\s*>=\s*(\d+)\)")

#: nvcc's refusal in a build's output (``host_config.h``'s ``#error``).
REJECTED = re.compile(r"unsupported (GNU|clang|HOS clang|Grace clang) version!\s*([^.!]*(?:\.\d+)?[^!]*)!?", re.I)

#: Build environment variables and defines that choose the host compiler: the task or the
#: inventory said which; fleetctl then checks it but never overrides it.
CHOOSERS_ENV = ("CUDAHOSTCXX", "NVCC_CCBIN")
CHOOSERS_DEFINE = ("CMAKE_CUDA_HOST_COMPILER",)


def _ver(text: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(text or "")))


def parse_host_config(text: str) -> dict[str, int]:
    """``{"gnu": 15, "clang": 20}``: the newest majors a ``crt/host_config.h`` accepts (the plain
    clang check, not Grace's or HOS's; ``gnu`` absent when the header has no ``__GNUC__ >`` check)."""
    out: dict[str, int] = {}
    m = GNU_BOUND.search(text)
    if m:
        out["gnu"] = int(m.group(1))
    plain = text.find("defined(__clang__) && !defined(__ibmxl_vrm__)")
    m = CLANG_BOUND.search(text, plain if plain >= 0 else 0)
    if m:
        out["clang"] = int(m.group(1)) - 1
    return out


def table_bound(cuda_version: str | None) -> tuple[dict[str, int], str] | None:
    """``(bounds, source)`` from :data:`MAX_HOST_COMPILER` for a CUDA ``"13.0"``, or None."""
    v = _ver(cuda_version)[:2]
    if len(v) < 2:
        return None
    known = [k for k in MAX_HOST_COMPILER if k[0] == v[0] and k <= v]
    if not known:
        return None
    key = max(known)
    return MAX_HOST_COMPILER[key], f"NVIDIA's host compiler table for CUDA {key[0]}.{key[1]}"


def nvcc_bounds(cuda: Mapping[str, Any]) -> tuple[dict[str, int], str] | None:
    """``(bounds, source)`` for the toolkit facts chose: its own ``host_config.h`` when facts read
    it (``cuda["host_compiler_max"] = {"gnu", "clang", "source"}``), else :func:`table_bound`."""
    read = cuda.get("host_compiler_max") or {}
    bounds = {k: int(read[k]) for k in ("gnu", "clang") if isinstance(read.get(k), int)}
    if bounds:
        return bounds, str(read.get("source") or "the toolkit's crt/host_config.h")
    return table_bound(cuda.get("version"))


def label(comp: Mapping[str, Any]) -> str:
    """``"gcc 16.1 (/usr/bin/gcc)"``."""
    kind = {"gnu": "gcc", "clang": "clang"}.get(str(comp.get("kind")), comp.get("name") or "compiler")
    return f"{kind} {comp.get('version') or '?'} ({comp.get('path')})"


def rejection(comp: Mapping[str, Any], bounds: Mapping[str, int]) -> str | None:
    """Why nvcc would refuse ``comp`` (``"gcc 16.1 is newer than 15"``), or None when it accepts
    it or nothing is known (an unknown kind or an unlisted bound is not refused: the build's own
    output is the backstop)."""
    kind, major, minor = comp.get("kind"), comp.get("major"), comp.get("minor") or 0
    if kind not in ("gnu", "clang") or not isinstance(major, int) or kind not in bounds:
        return None
    if major > bounds[kind]:
        return f"{'gcc' if kind == 'gnu' else 'clang'} {major}.{minor} is newer than {bounds[kind]}"
    if kind == "clang" and (major, minor) < (3, 3):
        return f"clang {major}.{minor} is older than 3.3"
    return None


@dataclass
class HostCompilerChoice:
    """What :func:`choose` decided.

    Attributes:
        compiler: the compiler nvcc will run (a facts COMPILER dict), or None when unknown.
        chosen: True when fleetctl picks it over nvcc's default (the build then sets
            :meth:`env` and :meth:`defines`).
        problem: one line naming both versions and the fix, when no accepted compiler exists.
        note: one line for the decision and the build record.
        bounds: ``{"gnu": 15, "clang": 20}`` and ``source``.
    """

    compiler: Mapping[str, Any] | None = None
    chosen: bool = False
    problem: str | None = None
    note: str | None = None
    bounds: dict[str, int] = field(default_factory=dict)
    source: str | None = None

    def env(self) -> dict[str, str]:
        """``CUDAHOSTCXX`` (CMake) and ``NVCC_CCBIN`` (nvcc itself, for builds that run nvcc
        without ``-ccbin``, e.g. setuptools' torch extensions) when fleetctl chose the compiler."""
        if not (self.chosen and self.compiler):
            return {}
        return {"CUDAHOSTCXX": self.compiler["path"], "NVCC_CCBIN": self.compiler["path"]}

    def defines(self) -> dict[str, str]:
        """``CMAKE_CUDA_HOST_COMPILER`` (maps to ``-ccbin``, CMake docs) when chosen."""
        return {"CMAKE_CUDA_HOST_COMPILER": self.compiler["path"]} if self.chosen and self.compiler else {}

    def record(self) -> dict[str, Any] | None:
        """What the build record keeps: path, kind, version, whether fleetctl chose it, the bound."""
        if not self.compiler:
            return None
        c = self.compiler
        return {"path": c.get("path"), "kind": c.get("kind"), "version": c.get("version"), "chosen": self.chosen,
                "nvcc_accepts": {**self.bounds, "source": self.source}, "note": self.note}


def _named(env: Mapping[str, Any], defines: Mapping[str, Any]) -> str | None:
    for name in CHOOSERS_ENV:
        if env.get(name):
            return str(env[name])
    for name in CHOOSERS_DEFINE:
        if defines.get(name):
            return str(defines[name])
    return None


def _find(comps: list[Mapping[str, Any]], path: str) -> Mapping[str, Any] | None:
    for c in comps:
        if path in (c.get("path"), c.get("realpath"), c.get("name")) or posixpath.basename(str(c.get("path"))) == path:
            return c
    return None


def choose(facts: Mapping[str, Any], env: Mapping[str, Any] | None = None,
           defines: Mapping[str, Any] | None = None) -> HostCompilerChoice:
    """The host compiler the build must use, from facts (see the module docstring).

    * nvcc's default (``gcc`` on the build PATH) when the toolkit accepts it, or when nothing is
      known about it or the bound;
    * else the newest accepted candidate of the same kind (then any kind) the host has, chosen;
    * else a ``problem`` naming the default's version, what this nvcc accepts (and where that
      bound comes from) and the fix.

    A compiler the task's ``env`` (``CUDAHOSTCXX``, ``NVCC_CCBIN``) or ``cmake_defines``
    (``CMAKE_CUDA_HOST_COMPILER``) names is never overridden: it is only checked.
    """
    info = facts.get("host_compilers") or {}
    cuda = facts.get("cuda") or {}
    default = info.get("default")
    cxx = info.get("default_cxx")
    cands = [c for c in info.get("candidates") or [] if isinstance(c, Mapping)]
    found = nvcc_bounds(cuda) if cuda.get("nvcc") else None
    if not found:
        return HostCompilerChoice(compiler=default)
    bounds, source = found
    nvcc = f"nvcc {cuda.get('version')} at {cuda.get('nvcc')}"
    accepts = " and ".join(f"{'gcc' if k == 'gnu' else 'clang'} <= {v}" for k, v in sorted(bounds.items()))
    base = HostCompilerChoice(bounds=dict(bounds), source=source)
    named = _named(env or {}, defines or {})
    if named:
        comp = _find([*cands, *([default] if default else [])], named)
        why = rejection(comp, bounds) if comp else None
        base.compiler = comp or {"path": named}
        if why:
            base.problem = (f"the host compiler the task names ({named}: {why}) is refused by {nvcc}, which "
                            f"accepts {accepts} ({source}): name a supported compiler, or drop it and let fleetctl "
                            "pick one")
        return base
    if cxx and (not default or not rejection(default, bounds)) and rejection(cxx, bounds):
        default = cxx  # gcc passes but the default g++ (what -ccbin-less C++ builds run) does not
    if not default or not rejection(default, bounds):
        base.compiler = default
        return base
    why = rejection(default, bounds)
    if cxx and cxx is not default and all(c.get("realpath") != cxx.get("realpath") or not c.get("realpath") for c in cands):
        cands = [*cands, cxx]
    ok = [c for c in cands if c.get("kind") in bounds and not rejection(c, bounds) and c.get("path") != default.get("path")]
    ok.sort(key=lambda c: (c.get("kind") == default.get("kind"), c.get("major") or 0, c.get("minor") or 0), reverse=True)
    if ok:
        pick = ok[0]
        base.compiler, base.chosen = pick, True
        base.note = (f"host compiler: nvcc's default {label(default)} is refused by {nvcc} ({why}; it accepts "
                     f"{accepts}, {source}): using {label(pick)} (CUDAHOSTCXX, NVCC_CCBIN, CMAKE_CUDA_HOST_COMPILER)")
        return base
    others = ", ".join(label(c) for c in cands if c.get("path") != default.get("path")) or "none"
    want = bounds.get(str(default.get("kind")), bounds.get("gnu"))
    base.compiler = default
    base.problem = (f"{nvcc} refuses the host compiler {label(default)} ({why}; it accepts {accepts}, {source}) and "
                    f"no accepted one is installed (others found: {others}): install g++-{want} or older "
                    f"(e.g. apt-get install g++-{want}, dnf install gcc-toolset-{want}) or a newer CUDA toolkit "
                    f"(host var cuda_home); fleetctl then uses it")
    return base


def key_material(facts: Mapping[str, Any]) -> dict[str, str]:
    """The class-key part of the host compiler: ``{"host_compiler": "gnu 12"}`` (kind and major
    of the compiler nvcc will run, ``facts["host_compilers"]["used"]``, set by the build task),
    or ``{}`` when unknown (older facts): hosts whose nvcc compiles host code with another
    compiler major do not share a wheel."""
    used = (facts.get("host_compilers") or {}).get("used") or {}
    if used.get("kind") and isinstance(used.get("major"), int):
        return {"host_compiler": f"{used['kind']} {used['major']}"}
    return {}


def with_choice(facts: Mapping[str, Any], choice: HostCompilerChoice) -> Mapping[str, Any]:
    """``facts`` with ``host_compilers.used`` (the compiler of ``choice``) and ``.choice`` (its
    env, defines and record), for :func:`key_material` and the build steps."""
    info = dict(facts.get("host_compilers") or {})
    info["used"] = dict(choice.compiler) if choice.compiler else None
    info["choice"] = {"env": choice.env(), "defines": choice.defines(), "record": choice.record()}
    return {**facts, "host_compilers": info}


def chosen_env(facts: Mapping[str, Any]) -> dict[str, str]:
    """The build environment entries :func:`with_choice` recorded (``{}`` when none)."""
    return dict(((facts.get("host_compilers") or {}).get("choice") or {}).get("env") or {})


def chosen_defines(facts: Mapping[str, Any]) -> dict[str, str]:
    """The CMake defines :func:`with_choice` recorded (``{}`` when none)."""
    return dict(((facts.get("host_compilers") or {}).get("choice") or {}).get("defines") or {})


def chosen_record(facts: Mapping[str, Any]) -> dict[str, Any] | None:
    return ((facts.get("host_compilers") or {}).get("choice") or {}).get("record")


def rejected_in_output(text: str, facts: Mapping[str, Any]) -> str | None:
    """The backstop: nvcc's own ``unsupported GNU version!`` (or clang) line in a failed build's
    output, named with the compiler and the fix; None when absent."""
    m = REJECTED.search(text)
    if not m:
        return None
    cuda = facts.get("cuda") or {}
    used = (facts.get("host_compilers") or {}).get("used") or {}
    who = f" {label(used)}" if used.get("path") else ""
    said = re.split(r"\s+\.\s|\.?\s+The nvcc flag", m.group(2).strip())[0].strip()
    return (f"nvcc {cuda.get('version') or ''} refused the host compiler{who}: \"unsupported {m.group(1)} version! "
            f"{said}\" (crt/host_config.h): install a supported g++ (fleetctl then uses it), set "
            "CUDAHOSTCXX in the task's env, or use a newer CUDA toolkit (host var cuda_home)").replace("nvcc  ", "nvcc ")
