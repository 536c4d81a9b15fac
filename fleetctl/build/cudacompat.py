"""CUDA compatibility rules as pure functions: which driver a toolkit needs, which GPUs a wheel's
SASS and PTX run on, what an arch list compiles to, and which of a host's toolkits builds it.

Sources:

* driver minimums: NVIDIA CUDA Toolkit release notes, "CUDA Toolkit and Minimum Required Driver
  Version for CUDA Minor Version Compatibility" (any 11.x toolkit's binaries load on >= 450.80.02,
  12.x on >= 525.60.13, 13.x on >= 580.65.06; Linux x86_64);
* SASS and PTX: CUDA C++ Programming Guide, "Binary Compatibility" (``sm_XY`` cubins run on
  compute capability X.Z for Z >= Y, same major) and "PTX Compatibility" (``compute_XY`` PTX is JIT
  compiled for any capability >= X.Y); arch-specific targets (``sm_90a``, ``compute_90a``) run only
  on exactly X.Y; family-specific targets (``sm_100f``, CUDA 12.9+) run within the family, minor
  >= Y.

Spellings: torch arch tokens ``"9.0a"``, ``"8.0+PTX"`` (``TORCH_CUDA_ARCH_LIST`` entries);
SASS ``"sm_90a"``; PTX ``"compute_80"``; compute capabilities ``"9.0"`` (as nvidia-smi prints them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Lowest Linux driver that loads binaries of any toolkit of this CUDA major release (release
#: notes, minor version compatibility).
MIN_DRIVER_FOR_CUDA_MAJOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

_TOKEN = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_BIN = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


def _ver(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or ""))


# -- driver ----------------------------------------------------------------------------------------


def driver_problem(driver: str | None, cuda_version: str | None, what: str) -> str | None:
    """Why ``driver`` cannot run what a CUDA ``cuda_version`` toolkit (or torch build) produced, or
    ``None`` when it can or either version is unknown.

    Args:
        driver: ``facts["driver_version"]`` (``"535.104.05"``).
        cuda_version: ``"13.0"``.
        what: what was built with that CUDA, for the message (``"nvcc 13.0 at /usr/local/cuda"``).
    """
    d, c = _ver(driver), _ver(cuda_version)
    if not d or not c or c[0] not in MIN_DRIVER_FOR_CUDA_MAJOR:
        return None
    need = MIN_DRIVER_FOR_CUDA_MAJOR[c[0]]
    if d >= _ver(need):
        return None
    return (f"driver {driver} is older than {what} needs (CUDA {c[0]}.x needs driver >= {need}): "
            f"install driver >= {need.split('.')[0]} or build with an older toolkit (host var cuda_home)")


# -- arch tokens -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchToken:
    """One ``TORCH_CUDA_ARCH_LIST`` entry: ``major``, ``minor``, ``suffix`` (``""``, ``"a"``, ``"f"``)
    and ``ptx`` (``+PTX``: the virtual arch's PTX is embedded too)."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @property
    def arch(self) -> str:
        """``"9.0a"`` (without ``+PTX``)."""
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def text(self) -> str:
        return self.arch + ("+PTX" if self.ptx else "")

    @property
    def sass(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def virtual(self) -> str:
        return f"compute_{self.major}{self.minor}{self.suffix}"


def parse_tokens(text: str) -> list[ArchToken]:
    """``"8.0+PTX;9.0a"`` (``;``, ``,`` or spaces between) -> tokens, in order, duplicates dropped.

    Raises:
        ValueError: naming an entry that is not ``MAJOR.MINOR[a|f][+PTX]``, or a suffix that SM lacks:
            ``a`` (architecture-specific features) exists from SM 9.0 on, ``f`` (family-specific) from
            SM 10.0 on (NVIDIA, CUDA C++ Programming Guide, "Feature Availability"; nvcc's
            ``--list-gpu-arch``).
    """
    out: list[ArchToken] = []
    for item in re.split(r"[;,\s]+", text.strip()):
        if not item:
            continue
        m = _TOKEN.match(item)
        if not m:
            raise ValueError(f"not an arch (want MAJOR.MINOR[a|f][+PTX] such as '9.0a' or '8.0+PTX'): {item!r}")
        tok = ArchToken(int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4)))
        if tok.suffix == "a" and tok.major < 9:
            raise ValueError(f"not an arch nvcc has: {item!r}: the 'a' (architecture-specific) suffix exists for "
                             f"9.0 and newer only (sm_90a, sm_100a, ...); use {tok.major}.{tok.minor}")
        if tok.suffix == "f" and tok.major < 10:
            raise ValueError(f"not an arch nvcc has: {item!r}: the 'f' (family-specific) suffix exists for "
                             f"10.0 and newer only (sm_100f, sm_120f, ...); use {tok.major}.{tok.minor}")
        if tok not in out:
            out.append(tok)
    return out


def torch_arch_of(name: str) -> str | None:
    """The torch arch token a SASS name means (``"sm_90a"`` -> ``"9.0a"``, ``"sm_120"`` -> ``"12.0"``),
    or ``None`` for anything else: the spelling a user coming from nvcc types for ``archs``."""
    b = _split_bin(name.strip())
    return f"{b[1]}.{b[2]}{b[3]}" if b and b[0] == "sm" else None


def target_arch_list(facts: Mapping[str, Any], archs: str | None = None) -> str:
    """The ``TORCH_CUDA_ARCH_LIST`` a build on ``facts``' host is for (pure): ``archs`` (a
    ``build_wheel`` task's override, ``-e archs='12.0a;9.0a'``) in the order a build uses
    (numeric, duplicates dropped: ``"9.0a;12.0a"``), else the facts' ``build.torch_cuda_arch_list``.
    :func:`fleetctl.tasks.build_keys.target_plan` builds exactly this, and a task title names it with
    the template function of the same name (``Build the wheel for {{ target_arch_list(facts,
    archs | default(none)) }}``), so the title is the arch list built.

    Raises:
        ValueError: ``archs`` holds an entry that is not an arch (see :func:`parse_tokens`).
    """
    if archs:
        tokens = sorted(parse_tokens(str(archs)), key=lambda t: (t.major, t.minor, t.suffix, t.ptx))
        return ";".join(t.text for t in tokens)
    return str((facts.get("build") or {}).get("torch_cuda_arch_list") or "")


def predicted_binaries(tokens: Iterable[ArchToken]) -> tuple[list[str], list[str]]:
    """``(sass, ptx)`` an arch list must put into the wheel: SASS for every token, PTX for the
    ``+PTX`` ones."""
    toks = list(tokens)
    return [t.sass for t in toks], [t.virtual for t in toks if t.ptx]


# -- coverage --------------------------------------------------------------------------------------


def _split_bin(name: str) -> tuple[str, int, int, str] | None:
    m = _BIN.match(name)
    return (m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)) if m else None


def runs_on(binary: str, compute_cap: str) -> bool:
    """Whether SASS ``sm_XY[a|f]`` or PTX ``compute_XY[a|f]`` runs on a GPU of ``compute_cap``."""
    b, cap = _split_bin(binary), _ver(compute_cap)
    if b is None or len(cap) < 2:
        return False
    kind, major, minor, suffix = b
    if suffix == "a":
        return (major, minor) == cap[:2]
    if suffix == "f" or kind == "sm":
        return major == cap[0] and minor <= cap[1]
    return (major, minor) <= cap[:2]  # plain PTX: JIT compiled for any newer GPU


def uncovered_gpus(gpus: Iterable[Mapping[str, Any]], sass: Iterable[str], ptx: Iterable[str]) -> list[str]:
    """The GPUs (``"GPU 0 (NVIDIA H200, 9.0)"``) that neither a SASS nor a PTX entry runs on."""
    binaries = [*sass, *ptx]
    out = []
    for pos, g in enumerate(gpus):
        cap = g.get("compute_cap")
        if cap and not any(runs_on(b, str(cap)) for b in binaries):
            out.append(f"GPU {g.get('index', pos)} ({g.get('name') or 'unnamed'}, {cap})")
    return out


def how_covered(compute_cap: str, sass: Iterable[str], ptx: Iterable[str]) -> str | None:
    """``"SASS sm_90a"`` or ``"PTX compute_80 (JIT)"`` for the first binary that runs on the GPU."""
    for b in sass:
        if runs_on(b, compute_cap):
            return f"SASS {b}"
    for b in ptx:
        if runs_on(b, compute_cap):
            return f"PTX {b} (JIT)"
    return None


# -- toolkits --------------------------------------------------------------------------------------


def toolkit_lacks(toolkit: Mapping[str, Any], tokens: Iterable[ArchToken]) -> list[str]:
    """The virtual archs (``"compute_120a"``) of ``tokens`` that this toolkit's nvcc cannot compile
    (see :func:`fleetctl.build.archs.unsupported_archs`)."""
    from .archs import unsupported_archs

    return unsupported_archs([t.arch for t in tokens], toolkit.get("archs"), toolkit.get("version"))


def with_toolkit_for(facts: Mapping[str, Any], tokens: Sequence[ArchToken],
                     pinned: bool = False) -> tuple[Mapping[str, Any], str | None]:
    """``(facts, note)``: the facts with ``cuda`` switched to the newest toolkit the host has that
    compiles every token, when the one found first does not (``/usr/local/cuda`` -> 12.4 while
    ``/usr/local/cuda-13.0`` exists), with a note saying so; the facts unchanged when the first one
    is fine, nothing better exists, or ``pinned`` (the ``cuda_home`` host var chose the toolkit).
    """
    cuda = facts.get("cuda") or {}
    if pinned or not cuda.get("nvcc") or not toolkit_lacks(cuda, tokens):
        return facts, None
    able = [tk for tk in cuda.get("toolkits") or [] if tk.get("nvcc") and not toolkit_lacks(tk, tokens)]
    if not able:
        return facts, None
    best = max(able, key=lambda tk: _ver(tk.get("version")))
    home = best["home"]
    chosen = {**cuda, **{k: best.get(k) for k in ("home", "nvcc", "nvcc_realpath", "version", "archs", "source",
                                             "host_compiler_max")},
              "cccl_include": f"{home.rstrip('/')}/include/cccl" if _ver(best.get("version"))[:1] >= (13,) else None}
    note = (f"nvcc {cuda.get('version')} at {cuda.get('nvcc')} cannot build {';'.join(t.text for t in tokens)}: "
            f"using nvcc {best.get('version')} at {best['nvcc']} ({best.get('source')}) instead")
    return {**facts, "cuda": chosen}, note


# -- the toolkit against torch ----------------------------------------------------------------------

_CU_SUFFIX = re.compile(r"\+cu(\d+)(\d)$")


def torch_cuda_of(python: Mapping[str, Any]) -> str | None:
    """The CUDA release the venv's torch was built for (facts ``python``): ``torch.version.cuda``
    (``torch_cuda``, read from its ``version.py``), else, when facts did not read that, the
    ``+cuXYZ`` local version of its wheel (``2.9.0+cu130`` -> ``"13.0"``); None for a CPU-only
    or unknown torch."""
    if python.get("torch_cuda"):
        return str(python["torch_cuda"])
    m = _CU_SUFFIX.search(str(python.get("torch") or "")) if "torch_cuda" not in python else None
    return f"{m.group(1)}.{m.group(2)}" if m else None


def toolkit_torch_mismatch(facts: Mapping[str, Any]) -> str | None:
    """The one line refusing a build whose nvcc (facts ``cuda``: the toolkit the build would use)
    is of another CUDA major release than the venv's torch, or None.

    Rule: torch's own ``torch.utils.cpp_extension`` (``_check_cuda_version``) raises "The detected
    CUDA version (X) mismatches the version that was used to compile PyTorch (Y)" when the majors
    differ (a minor difference is only a warning there), and a wheel compiled against another CUDA
    major than the torch it is imported beside needs another runtime than the one torch loaded.
    None when torch is CPU-only, unknown or about to be upgraded (``torch_pending``), or nvcc's
    release is unknown. The fix names the host's toolkits of torch's major (facts ``cuda.toolkits``)."""
    cuda, py = facts.get("cuda") or {}, facts.get("python") or {}
    if not isinstance(py, Mapping) or py.get("torch_pending") or not cuda.get("nvcc"):
        return None
    want, have = torch_cuda_of(py), cuda.get("version")
    if not want or not have or _ver(want)[:1] == _ver(have)[:1]:
        return None
    major = _ver(want)[0]
    fits = [tk["home"] for tk in cuda.get("toolkits") or [] if tk.get("home") and _ver(tk.get("version"))[:1] == (major,)]
    by = {"CUDA_HOME env": " (the login environment's CUDA_HOME/CUDA_PATH chose it)",
          "cuda_home var": " (the host var cuda_home chose it)"}.get(str(cuda.get("source")), "")
    return (f"nvcc {have} at {cuda['nvcc']}{by} is CUDA {_ver(have)[0]}, but the venv's torch {py.get('torch')} is "
            f"built for CUDA {want}: torch.utils.cpp_extension refuses a CUDA major mismatch and the build would fail "
            f"or load two CUDA runtimes; set the host var cuda_home to a CUDA {major} toolkit"
            + (f" (this host has {', '.join(fits)})" if fits else "") + " or install the torch build for CUDA "
            f"{_ver(have)[0]} into the venv")
