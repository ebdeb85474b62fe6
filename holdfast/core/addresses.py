"""Which IP addresses an outbound connection may reach, as pure functions (no DNS, no I/O).

- ``parse_host_address`` reads a URL host the way the C resolver does: besides ``a.b.c.d`` and
  IPv6 literals it accepts ``2852039166``, ``0xA9FEA9FE``, ``0251.0376.0251.0376`` and the
  ``a.b.c`` / ``a.b`` forms. A host whose last label is a number but is no valid IPv4 address
  (``1.2.3.256``) is refused, as WHATWG URL parsers do.
- ``judged_addresses`` unwraps IPv4 addresses embedded in IPv6 ones (mapped ``::ffff:0:0/96``,
  compatible ``::/96``, SIIT ``::ffff:0:0:0/96``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``,
  Teredo ``2001::/32``): every one of them is judged.
- ``forbidden_range`` names the non-public range an address is in (loopback, RFC 1918, ...).
- ``is_metadata`` says whether it is an instance or task metadata (credentials) address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

__all__ = [
    "METADATA_ADDRESSES",
    "Forbidden",
    "IPAddress",
    "IPNetwork",
    "ends_in_number",
    "forbidden_range",
    "is_metadata",
    "judged_addresses",
    "parse_host_address",
    "parse_loose_ipv4",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Credentials live behind these: EC2 instance metadata (IMDS), ECS task metadata and
# credentials, the EKS Pod Identity agent. No setting ever opens them.
METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23"))


@dataclass(frozen=True, slots=True)
class Forbidden:
    """The non-public range an address is in, and what it is."""

    network: IPNetwork
    label: str


# Most specific first: the first match names the range (and is what an allow-list CIDR must
# lie inside to open it). IPv6 outside 2000::/3 is reserved by the IETF, except NAT64 (whose
# embedded IPv4 address is judged instead).
_FORBIDDEN: Final = tuple(Forbidden(ipaddress.ip_network(n), label) for n, label in (
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private (RFC 1918) address"),
    ("172.16.0.0/12", "a private (RFC 1918) address"),
    ("192.168.0.0/16", "a private (RFC 1918) address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT, RFC 6598) address"),
    ("169.254.0.0/16", "a link-local address"),
    ("192.0.0.0/24", "a reserved (IETF protocol assignments) address"),
    ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("192.88.99.0/24", "a reserved (6to4 relay anycast) address"),
    ("198.18.0.0/15", "a reserved (benchmarking) address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved (240.0.0.0/4, broadcast) address"),
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("64:ff9b:1::/48", "a reserved (local-use NAT64) address"),
    ("::/8", "a reserved IPv6 address"),
    ("100::/64", "a reserved (discard-only) address"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("2001::/23", "a reserved (IETF protocol assignments) address"),
    ("fc00::/7", "a unique local address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a reserved (site-local) address"),
    ("ff00::/8", "a multicast address"),
))
_GLOBAL_UNICAST_V6: Final = ipaddress.ip_network("2000::/3")
_MAPPED: Final = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED: Final = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE: Final = ipaddress.ip_network("::/96")
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_OCT: Final = frozenset("01234567")
_DEC: Final = frozenset("0123456789")


def parse_loose_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``text`` as ``inet_aton`` reads it (1 to 4 parts, each decimal, 0x-hex or 0-octal)."""
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing dot: "127.0.0.1." is still 127.0.0.1 to a resolver
    if not 1 <= len(parts) <= 4:
        return None
    values = [_number(p) for p in parts]
    if any(v is None for v in values):
        return None
    *head, last = [v for v in values if v is not None]
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    return ipaddress.IPv4Address(number * 256 ** (4 - len(head)) + last)


def _number(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits, base, allowed = part[2:], 16, _HEX
        if digits == "":
            return 0  # "0x" alone is zero to inet_aton
    elif len(part) > 1 and part[0] == "0":
        digits, base, allowed = part[1:], 8, _OCT
    else:
        digits, base, allowed = part, 10, _DEC
    if not digits or not set(digits) <= allowed:
        return None
    return int(digits, base)


def ends_in_number(host: str) -> bool:
    """True when the last label of ``host`` is numeric: the host can only be an IPv4 address."""
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    last = labels[-1]
    if last and set(last) <= _DEC:
        return True
    return last[:2] in ("0x", "0X") and set(last[2:]) <= _HEX


def parse_host_address(host: str) -> IPAddress | None:
    """The address a URL host denotes, None for a host name; ``ValueError`` if it is neither."""
    text = host.strip("[]").split("%", 1)[0]  # a zone id (fe80::1%eth0) does not matter here
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if ":" in text:
        raise ValueError("not a valid IPv6 address")
    if not ends_in_number(text):
        return None
    address = parse_loose_ipv4(text)
    if address is None:
        raise ValueError("ends in a number but is not a valid IPv4 address")
    return address


def judged_addresses(ip: IPAddress) -> tuple[IPAddress, ...]:
    """Every address ``ip`` stands for; the first is the one it reaches (for allow-lists).

    Mapped, compatible, SIIT and NAT64 addresses *are* their IPv4 address; 6to4 and Teredo
    addresses are judged together with the IPv4 addresses they embed.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return (ip,)
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _TRANSLATED or ip in _NAT64:
        return (low32,)
    if ip in _COMPATIBLE and int(ip) > 1:  # not :: or ::1
        return (low32,)
    if ip.sixtofour is not None:
        return (ip, ip.sixtofour)
    if ip.teredo is not None:
        return (ip, *ip.teredo)
    return (ip,)


def forbidden_range(ip: IPAddress) -> Forbidden | None:
    """The non-public range ``ip`` is in (most specific), or None for a public address."""
    for entry in _FORBIDDEN:
        if ip.version == entry.network.version and ip in entry.network:
            return entry
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        first = int(ip) >> 125 << 125
        return Forbidden(ipaddress.IPv6Network((first, 3)), "a reserved IPv6 address")
    return None


def is_metadata(ip: IPAddress) -> bool:
    """True for an instance or task metadata (credentials) address."""
    return ip in METADATA_ADDRESSES
