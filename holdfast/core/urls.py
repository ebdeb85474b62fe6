"""The ``ws_url`` policy as pure functions, shared by the worker and the operator CLI.

``ws_url`` comes from a table other systems write, so it is hostile input:

- only ``ws://`` and ``wss://``;
- never a link-local or instance-metadata address (169.254.0.0/16, fe80::/10, fd00:ec2::/64,
  also when written as an IPv4-mapped IPv6 address) unless a CIDR of the allow-list covers it;
- when an allow-list is set, the host must match one entry: an exact host name, a suffix
  (``.example.com`` or ``*.example.com``) or a CIDR (``10.0.0.0/8``, ``::1/128``).

No DNS here: ``check_url`` judges the URL as written, and the worker checks every address the
host name resolves to with ``check_address`` before it connects (a name may point at the
metadata service). ``redact`` makes any URL safe for a log line.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, parse_qsl, quote, urlsplit, urlunsplit

from holdfast.core.exceptions import UnsafeUrl

__all__ = [
    "FORBIDDEN_NETWORKS",
    "CheckedUrl",
    "UrlPolicy",
    "check_address",
    "check_url",
    "parse_allow_list",
    "redact",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Link-local and cloud instance-metadata ranges: credentials live behind these addresses.
FORBIDDEN_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::/64"),
)
_SCHEMES = ("ws", "wss")
_MAX_URL = 4096


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """Allow-list entries, parsed. Empty ``names``, ``suffixes`` and ``networks``: any host."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()
    restricted: bool = field(default=False)

    def name_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or any(
            host.endswith(s) and len(host) > len(s) for s in self.suffixes)

    def network_allows(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


@dataclass(frozen=True, slots=True)
class CheckedUrl:
    """A URL the policy accepted as written; ``address`` is set when the host is an IP."""

    url: str
    scheme: str
    host: str
    port: int
    address: IPAddress | None
    name_allowed: bool


def parse_allow_list(text: str | Iterable[str] | None) -> UrlPolicy:
    """Parse ``HOLDFAST_ALLOWED_HOSTS`` (comma list); ``ValueError`` names a bad entry."""
    if text is None:
        return UrlPolicy()
    entries = text.split(",") if isinstance(text, str) else list(text)
    names: set[str] = set()
    suffixes: list[str] = []
    networks: list[IPNetwork] = []
    for raw in entries:
        entry = raw.strip().lower()
        if not entry:
            continue
        if "/" in entry or _is_ip(entry):
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                raise ValueError(f"allow-list entry {raw.strip()!r} is not a valid CIDR") from None
            continue
        if entry.startswith("*."):
            entry = entry[1:]
        if not _valid_name(entry.lstrip(".")):
            raise ValueError(f"allow-list entry {raw.strip()!r} is not a host name, suffix or CIDR")
        if entry.startswith("."):
            suffixes.append(entry.rstrip("."))
        else:
            names.add(entry.rstrip("."))
    restricted = bool(names or suffixes or networks)
    return UrlPolicy(frozenset(names), tuple(suffixes), tuple(networks), restricted)


def check_url(url: str, policy: UrlPolicy | None = None) -> CheckedUrl:
    """Accept ``url`` as written or raise ``UnsafeUrl`` (its message never holds secrets)."""
    policy = policy or UrlPolicy()
    if not isinstance(url, str) or not url or len(url) > _MAX_URL:
        raise UnsafeUrl("ws_url is empty or too long")
    if any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise UnsafeUrl(f"ws_url contains whitespace or control characters: {redact(url)}")
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError:
        raise UnsafeUrl(f"ws_url is not a valid URL: {redact(url)}") from None
    if parts.scheme.lower() not in _SCHEMES:
        raise UnsafeUrl(f"ws_url scheme must be ws or wss, not {parts.scheme[:10]!r}: "
                        f"{redact(url)}")
    if not host:
        raise UnsafeUrl(f"ws_url has no host: {redact(url)}")
    scheme = parts.scheme.lower()
    address = _ip_or_none(host)
    if address is None and not _valid_name(host):
        raise UnsafeUrl(f"ws_url host is not a valid host name: {redact(url)}")
    name_ok = address is None and policy.name_allowed(host)
    if address is not None:
        check_address(address, policy, url=url)
    elif policy.restricted and not name_ok and not policy.networks:
        raise UnsafeUrl(f"ws_url host is not in the allow-list: {redact(url)}")
    return CheckedUrl(url, scheme, host, port or (443 if scheme == "wss" else 80), address,
                      name_ok)


def check_address(address: IPAddress | str, policy: UrlPolicy | None = None, *,
                  url: str = "", name_allowed: bool = False) -> None:
    """Refuse an address the URL (or its resolved host name) must not reach: ``UnsafeUrl``."""
    policy = policy or UrlPolicy()
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:169.254.169.254 is the metadata service too
    shown = redact(url) if url else str(ip)
    if any(ip.version == n.version and ip in n for n in FORBIDDEN_NETWORKS) and not (
            policy.network_allows(ip)):
        raise UnsafeUrl(f"ws_url reaches a link-local or instance-metadata address ({ip}): "
                        f"{shown}")
    if policy.restricted and not name_allowed and not policy.network_allows(ip):
        raise UnsafeUrl(f"ws_url address {ip} is not in the allow-list: {shown}")


def redact(url: str) -> str:
    """``url`` without credentials, query values or fragment: safe for a log line. Never raises."""
    try:
        text = str(url)[:_MAX_URL]
        parts = urlsplit(text)
        netloc = parts.netloc.rpartition("@")[2]
        if "@" in parts.netloc:
            netloc = f"***@{netloc}"
        query = "&".join(f"{quote(k, safe='')}=***" for k, _ in parse_qsl(
            parts.query, keep_blank_values=True))
        if parts.query and not query:
            query = "***"
        return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, ""))
    except Exception:  # a log helper must not fail on garbage
        return "<unparseable url>"


def _is_ip(text: str) -> bool:
    return _ip_or_none(text) is not None


def _ip_or_none(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _valid_name(host: str) -> bool:
    labels = host.rstrip(".").split(".")
    return 0 < len(host) <= 253 and all(
        0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum()
        and label.isascii() and not label.startswith("-") for label in labels)
