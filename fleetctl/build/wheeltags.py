"""Which wheels a host's Python accepts: its platform, its C library, and a wheel's platform tags.

Pure functions of facts (``facts["python"]["platform"]``, read on the host by the interpreter
probe of ``playbooks/scripts/facts.py``) and wheel file names, no I/O. The rules are the ones pip
applies through ``packaging.tags`` (PEP 425 tags, PEP 600 ``manylinux_2_X``, PEP 656
``musllinux_1_X``, and the legacy ``manylinux1``/``2010``/``2014`` aliases of PEP 513/571/599):

- the platform is the interpreter's ``sysconfig.get_platform()`` (``"linux-aarch64"``), which
  honours CPython's ``_PYTHON_HOST_PLATFORM`` as pip does; a 32-bit interpreter on a 64-bit
  kernel is ``linux_i686`` / ``linux_armv7l`` (packaging's ``_linux_platforms``);
- a glibc host accepts ``manylinux_2_Y_ARCH`` for every ``Y`` up to its glibc minor (from 2.17,
  2.5 on x86), a musl host ``musllinux_1_Y_ARCH`` up to its musl minor, and both ``linux_ARCH``.

``linux_ARCH`` says nothing about the C library, yet a wheel built on glibc 2.39 does not load on
glibc 2.31 or on musl: the build class therefore holds the libc too (:func:`platform_inputs`), and
:func:`refusal` checks the builder's recorded libc as well as the tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import FleetError


class PlatformMismatch(FleetError):
    """A wheel was about to go to a host whose platform its tag (or its build's libc) does not fit;
    the message is :func:`refusal`'s one line."""

#: manylinux's legacy names and the glibc they stand for (PEP 513, 571, 599), by arch.
_LEGACY = {
    (2, 17): ("manylinux2014", ("x86_64", "i686", "aarch64", "armv7l", "ppc64", "ppc64le", "s390x")),
    (2, 12): ("manylinux2010", ("x86_64", "i686")),
    (2, 5): ("manylinux1", ("x86_64", "i686")),
}

_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)"
                    r"-(?P<plat>[^-]+)\.whl$")


def _norm(text: str) -> str:
    return re.sub(r"[-.]", "_", str(text)).lower()


def host_platform(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The platform the venv's interpreter installs wheels for, from ``facts["python"]["platform"]``:
    ``{"tag": "linux_aarch64" | None, "arch": "aarch64" | None, "machine": "x86_64" | None,
    "libc": "glibc" | "musl" | None, "libc_version": "2.39" | None}``; ``None`` where the host
    did not say (an older facts script, an interpreter that did not run)."""
    plat = ((facts.get("python") or {}).get("platform") or {})
    sysconf = plat.get("sysconfig")
    tag = _norm(sysconf) if sysconf else None
    if tag and plat.get("bits") == 32:
        tag = {"linux_x86_64": "linux_i686", "linux_aarch64": "linux_armv7l"}.get(tag, tag)
    arch = tag.split("_", 1)[1] if tag and tag.startswith("linux_") else None
    return {"tag": tag, "arch": arch, "machine": plat.get("machine"), "libc": plat.get("libc"),
            "libc_version": plat.get("libc_version")}


def platform_label(facts: Mapping[str, Any]) -> str:
    """One word group for humans: ``"linux_aarch64 glibc 2.39"``, ``"linux_x86_64 musl 1.2"``,
    ``"platform unknown"``."""
    p = host_platform(facts)
    if not p["tag"]:
        return "platform unknown"
    libc = " ".join(x for x in (p["libc"], p["libc_version"]) if x)
    return f"{p['tag']} {libc}".strip()


def platform_inputs(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The build-class inputs of the host's platform (added to
    :func:`fleetctl.tasks.build_keys.build_inputs`): the platform tag and the C library with its
    version. Hosts that differ in any of them never share a wheel."""
    p = host_platform(facts)
    return {"platform": p["tag"], "libc": " ".join(x for x in (p["libc"], p["libc_version"]) if x) or None}


def _minor(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def supported_platforms(facts: Mapping[str, Any]) -> list[str] | None:
    """The platform tags pip on the host accepts, most specific first (``linux_ARCH`` last), or
    ``None`` when the host did not report its platform (nothing can be checked)."""
    p = host_platform(facts)
    if not p["tag"]:
        return None
    if not p["arch"]:
        return [p["tag"]]
    arch, out = p["arch"], []
    ver = _minor(p["libc_version"])
    if p["libc"] == "glibc" and ver and ver[0] == 2:
        low = 5 if arch in ("x86_64", "i686") else 17
        for minor in range(ver[1], low - 1, -1):
            out.append(f"manylinux_2_{minor}_{arch}")
            legacy = _LEGACY.get((2, minor))
            if legacy and arch in legacy[1]:
                out.append(f"{legacy[0]}_{arch}")
    elif p["libc"] == "musl" and ver and ver[0] == 1:
        out.extend(f"musllinux_1_{minor}_{arch}" for minor in range(ver[1], -1, -1))
    out.append(p["tag"])
    return out


def wheel_platforms(name: str) -> list[str] | None:
    """The platform tags of a wheel file name (PEP 427: ``NAME-VER[-BUILD]-PY-ABI-PLAT.whl``, a
    compressed tag set ``manylinux_2_17_x86_64.manylinux2014_x86_64`` split on dots), or ``None``
    when the name is not a wheel's."""
    m = _WHEEL.match(name.rsplit("/", 1)[-1])
    return m.group("plat").split(".") if m else None


def refusal(host: str, wheel: str, facts: Mapping[str, Any], built: Mapping[str, Any] | None = None) -> str | None:
    """Why ``wheel`` must not go to ``host`` (one line), or ``None`` when it fits.

    Args:
        host: the inventory name (for the message).
        wheel: the wheel's file name or path.
        facts: the host's facts (its platform, see :func:`host_platform`).
        built: the wheel's build inputs (``platform``, ``libc``) when they are recorded (a stamp or
            the cache's record): a ``linux_ARCH`` wheel built on another libc, or on a newer glibc
            than the host's, is refused too, which the tag alone cannot say.
    """
    name = wheel.rsplit("/", 1)[-1]
    tags = wheel_platforms(name)
    accepted = supported_platforms(facts)
    if tags is None or accepted is None:
        return None
    label = platform_label(facts)
    if "any" not in tags and not set(tags) & set(accepted):
        return (f"{host}: refusing {name}: its platform tag {'.'.join(tags)} does not fit the host's platform "
                f"{label}")
    have = host_platform(facts)
    libc = str((built or {}).get("libc") or "")
    if libc and have["libc"]:
        fam, _, ver = libc.partition(" ")
        mine, need = _minor(have["libc_version"]), _minor(ver)
        if fam != have["libc"] or (need and mine and need > mine):
            return (f"{host}: refusing {name}: its platform tag {'.'.join(tags)} was built against {libc}, which "
                    f"does not fit the host's platform {label}")
    return None

