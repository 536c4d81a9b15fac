"""Host addresses as Ansible reads them in host keys and patterns: ``name``, ``name:PORT``,
``[IPv6]:PORT``, IPv4 and IPv6 addresses, each possibly holding ``[a:b]`` ranges.

The rules are those ansible-core's ``parse_address(address, allow_ranges=True)`` applies: a port is
``:DIGITS`` after a name or IPv4 address, or after a bracketed address (the only way to give an
IPv6 address a port); what remains must be an IPv4 address (components 0..255 or numeric ranges),
an IPv6 address (hex components or hex ranges), or a host name (dot-separated labels of letters,
digits, ``_`` and ``-``, not ending in ``_`` or ``-``, with ``[a:z]``/``[0:9]`` ranges).
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["split_port", "is_single_address"]

_ALNUM_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_NUM_RANGE = r"\[[0-9]+:[0-9]+(?::[0-9]+)?\]"
_HEX_RANGE = re.compile(r"\[[0-9a-f]+:[0-9a-f]+(?::[0-9]+)?\]", re.I)
_LABEL = rf"(?:\w|{_ALNUM_RANGE})(?:[\w-]|{_ALNUM_RANGE})*(?<![_-])"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.I | re.UNICODE)
_IPV4_PART = rf"(?:[01]?[0-9]{{1,2}}|2[0-4][0-9]|25[0-5]|{_NUM_RANGE})"
_IPV4 = re.compile(rf"(?:{_IPV4_PART}\.){{3}}{_IPV4_PART}")
_BRACKETED_PORT = re.compile(r"\[(.+)\]:([0-9]+)")
_NAME_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)")


def _is_ipv6(text: str) -> bool:
    if "%" in text or "/" in text or ":" not in text:
        return False
    try:
        ipaddress.IPv6Address(_HEX_RANGE.sub("0", text))
    except ValueError:
        return False
    return True


def split_port(text: str) -> tuple[str, int | None] | None:
    """``(host, port)`` when ``text`` reads as one host address, else None.

    ``split_port("gpu01:2222") == ("gpu01", 2222)``, ``split_port("[fe80::1]:22") == ("fe80::1", 22)``,
    ``split_port("fe80::1") == ("fe80::1", None)``, ``split_port("a:b") is None``.
    """
    host, port = text, None
    for regex in (_BRACKETED_PORT, _NAME_PORT):
        m = regex.fullmatch(host)
        if m:
            host, port = m.group(1), int(m.group(2))
    if _IPV4.fullmatch(host) or _is_ipv6(host) or _HOSTNAME.fullmatch(host):
        return host, port
    return None


def is_single_address(text: str) -> bool:
    """True when Ansible reads ``text`` as one host (with an optional port), not a list of terms."""
    return split_port(text) is not None
