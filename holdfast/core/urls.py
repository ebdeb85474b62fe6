"""The ``ws_url`` policy as pure functions, shared by the worker and the operator CLI.

``ws_url`` comes from a table other systems write, so it is hostile input. A URL is accepted
only when:

- its scheme is ``ws://`` or ``wss://`` and its host a valid name or IP address (decimal, hex
  and octal IPv4 forms are read as the resolver reads them: ``0xA9FEA9FE`` is 169.254.169.254);
- the worker's WebSocket client (websockets' ``parse_uri``) accepts it: no fragment, no user
  name without a password;
- no address it stands for (IPv4 addresses embedded in IPv6 ones are unwrapped) is an instance
  or task metadata address: never, whatever the settings;
- no such address is in a non-public range (loopback, ``0.0.0.0/8``, RFC 1918, ``100.64/10``,
  ``fc00::/7``, link-local, multicast, reserved, documentation) unless an allow-list CIDR that
  lies inside that range opens it (``127.0.0.0/8`` does, ``0.0.0.0/0`` does not);
- when an allow-list is set, the host matches one entry: an exact host name, a suffix
  (``.example.com`` or ``*.example.com``) or a CIDR. An allowed *name* gives no right to a
  non-public address: what it resolves to is judged like a literal address.

No DNS here: ``check_url`` judges the URL as written, and the worker checks every address the
host name resolves to with ``check_address`` before it connects. ``redact`` makes any URL safe
for a log line. The environment variable names are defined here, once.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from holdfast.core.addresses import (
    Forbidden,
    IPAddress,
    IPNetwork,
    forbidden_range,
    is_metadata,
    judged_addresses,
    parse_host_address,
)
from holdfast.core.exceptions import UnsafeUrl
from holdfast.core.model import MAX_URL_LEN
from holdfast.core.redact import redact, scrub

__all__ = [
    "ENV_ALLOWED_HOSTS",
    "ENV_LOG_URL_PATHS",
    "LOOPBACK_ALLOW_LIST",
    "RESUME_URL_MAX_LEN",
    "CheckedUrl",
    "UrlPolicy",
    "check_address",
    "check_url",
    "is_loopback_host",
    "log_paths_from_env",
    "parse_allow_list",
    "policy_from_env",
    "redact",
    "scrub",
]

ENV_ALLOWED_HOSTS: Final = "HOLDFAST_ALLOWED_HOSTS"
ENV_LOG_URL_PATHS: Final = "HOLDFAST_LOG_URL_PATHS"
# What the local fleet (demo upstream, chaos soak, bench, tests) allows: loopback only.
LOOPBACK_ALLOW_LIST: Final = "127.0.0.0/8,::1/128"
_SCHEMES: Final = ("ws", "wss")
# The URL a worker connects to: the stored one (at most ``MAX_URL_LEN``, the item's rule) with
# the resume parameter its protocol appends (``&from_seq=`` and up to 19 digits). Checked
# against the stored URL's own limit, a URL of nearly 4,096 characters (a long token) connected
# once and then never again once it had a checkpoint.
RESUME_URL_MAX_LEN: Final = MAX_URL_LEN + 64
_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off", "")
# Names that are loopback by definition (RFC 6761), judged as 127.0.0.1 without DNS.
_LOOPBACK_NAME: Final = ipaddress.ip_address("127.0.0.1")


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """Allow-list entries, parsed. No entries: any public host. ``log_paths``: see ``redact``."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()
    restricted: bool = field(default=False)
    log_paths: bool = False

    def name_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or any(
            host.endswith(s) and len(host) > len(s) for s in self.suffixes)

    def network_allows(self, address: IPAddress, inside: Forbidden | None = None) -> bool:
        """True when an allow-list CIDR covers ``address`` (and, given, lies inside ``inside``)."""
        return any(address.version == n.version and address in n and (
            inside is None or n.subnet_of(inside.network))  # type: ignore[arg-type]
            for n in self.networks)


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
        network = _network_or_none(raw.strip(), entry)
        if network is not None:
            if network.num_addresses == 1 and is_metadata(network.network_address):
                raise ValueError(f"allow-list entry {raw.strip()!r} is a metadata address: "
                                 "never allowed")
            networks.append(network)
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


def _network_or_none(raw: str, entry: str) -> IPNetwork | None:
    """An IP or CIDR entry as a network; None for a name; ``ValueError`` if malformed."""
    bad = ValueError(f"allow-list entry {raw!r} is not a valid CIDR")
    if "/" in entry:
        address, _, prefix = entry.partition("/")
        try:
            ip = parse_host_address(address)
            if ip is None:
                raise bad
            return ipaddress.ip_network(f"{ip}/{prefix}", strict=False)
        except ValueError:
            raise bad from None
    try:
        ip = parse_host_address(entry)
    except ValueError:
        raise bad from None
    return None if ip is None else ipaddress.ip_network(ip)


def policy_from_env(env: Mapping[str, str]) -> UrlPolicy:
    """The policy ``HOLDFAST_ALLOWED_HOSTS`` and ``HOLDFAST_LOG_URL_PATHS`` describe.

    ``ValueError`` names the variable that is wrong.
    """
    try:
        policy = parse_allow_list((env.get(ENV_ALLOWED_HOSTS) or "").strip() or None)
    except ValueError as exc:
        raise ValueError(f"{ENV_ALLOWED_HOSTS}: {exc}") from None
    return dataclasses.replace(policy, log_paths=log_paths_from_env(env))


def log_paths_from_env(env: Mapping[str, str]) -> bool:
    """``HOLDFAST_LOG_URL_PATHS``: show URL paths in logs and output (default: a hash)."""
    paths = (env.get(ENV_LOG_URL_PATHS) or "").strip().lower()
    if paths not in _TRUE + _FALSE:
        raise ValueError(f"{ENV_LOG_URL_PATHS}={paths[:20]!r} must be true or false")
    return paths in _TRUE


def check_url(url: str, policy: UrlPolicy | None = None, *,
              max_len: int = MAX_URL_LEN) -> CheckedUrl:
    """Accept ``url`` as written or raise ``UnsafeUrl`` (its message never holds secrets).
    ``max_len``: a stored URL's limit; ``RESUME_URL_MAX_LEN`` for one a worker resumes with."""
    policy = policy or UrlPolicy()
    if not isinstance(url, str):  # hostile table data: said as what it is, not "empty"
        raise UnsafeUrl(f"ws_url refused: it is not text but {type(url).__name__}")
    if not url:
        raise UnsafeUrl("ws_url refused: it is empty")
    if len(url) > max_len:
        raise UnsafeUrl(f"ws_url refused: it is {len(url)} characters long, the most is "
                        f"{max_len}")

    def refuse(why: str) -> UnsafeUrl:
        return UnsafeUrl(f"ws_url refused: {why}: {redact(url, paths=policy.log_paths)}")

    if any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise refuse("it contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError:
        raise refuse("not a valid URL") from None
    if parts.scheme.lower() not in _SCHEMES:
        raise refuse(f"the scheme must be ws or wss, not {parts.scheme[:10]!r}")
    if not host:
        raise refuse("it has no host")
    if port == 0:
        raise refuse("port 0 is not a valid port")
    scheme = parts.scheme.lower()
    try:
        address = parse_host_address(host)
    except ValueError as exc:
        raise refuse(f"the host is not a valid host name or address ({exc})") from None
    if address is None and not _valid_name(host):
        raise refuse("the host is not a valid host name")
    if address is None and "[" in parts.netloc.rpartition("@")[2]:
        raise refuse("the host in brackets is not an IPv6 address")
    _check_websocket_uri(url, refuse)
    name_ok = address is None and policy.name_allowed(host)
    if address is not None:
        check_address(address, policy, url=url)
    elif _loopback_name(host):
        check_address(_LOOPBACK_NAME, policy, url=url)
    elif policy.restricted and not name_ok and not policy.networks:
        raise refuse("the host is not in the allow-list")
    return CheckedUrl(url, scheme, host, port or (443 if scheme == "wss" else 80), address,
                      name_ok)


def _check_websocket_uri(url: str, refuse: Callable[[str], UnsafeUrl]) -> None:
    """Refuse what the worker's websockets client refuses (a fragment, a user without a
    password, user info that is not UTF-8): ``holdfast start`` then refuses it too, instead of
    storing a stream that can only fail."""
    # Imported here: the Lambda asset carries holdfast.core without websockets, and no Lambda
    # checks a URL.
    from websockets.exceptions import InvalidURI
    from websockets.uri import parse_uri

    try:
        parse_uri(url)
    except InvalidURI as exc:  # its str() holds the URL: only the reason is shown
        raise refuse(f"not a valid WebSocket URI ({exc.msg})") from None
    except UnicodeEncodeError:  # a lone surrogate (bytes read with surrogateescape)
        raise refuse("not a valid WebSocket URI (it holds characters that are not valid "
                     "Unicode)") from None
    except ValueError:  # user info percent-decoded strictly: UnicodeDecodeError
        raise refuse("not a valid WebSocket URI (its user info is not valid UTF-8)") from None


def check_address(address: IPAddress | str, policy: UrlPolicy | None = None, *,
                  url: str = "", name_allowed: bool = False) -> None:
    """Refuse an address the URL (or its resolved host name) must not reach: ``UnsafeUrl``."""
    policy = policy or UrlPolicy()
    if isinstance(address, str):
        try:
            ip = parse_host_address(address)
        except ValueError:
            ip = None
        if ip is None:
            raise UnsafeUrl(f"ws_url refused: {address[:60]!r} is not an IP address")
    else:
        ip = address
    shown = f": {redact(url, paths=policy.log_paths)}" if url else ""
    judged = judged_addresses(ip)
    for candidate in judged:
        if is_metadata(candidate):
            raise UnsafeUrl(f"ws_url refused: {candidate}{_inside(candidate, ip)} is an "
                            f"instance or task metadata address, never allowed{shown}")
    for candidate in reversed(judged):  # embedded addresses first: the clearer reason
        inside = _inside(candidate, ip)
        forbidden = forbidden_range(candidate)
        if forbidden is not None and not policy.network_allows(candidate, forbidden):
            raise UnsafeUrl(
                f"ws_url refused: {candidate}{inside} is {forbidden.label} "
                f"({forbidden.network}), allowed only by a CIDR inside that range in "
                f"{ENV_ALLOWED_HOSTS}{shown}")
    if policy.restricted and not name_allowed and not policy.network_allows(judged[0]):
        raise UnsafeUrl(f"ws_url refused: address {judged[0]} is not in the allow-list{shown}")


def _inside(candidate: IPAddress, ip: IPAddress) -> str:
    return "" if candidate == ip else f" (embedded in {ip})"


def is_loopback_host(host: str) -> bool:
    """Whether a URL host is this machine: a loopback name (``localhost``, ``*.localhost``) or
    a loopback address in any form ``check_url`` reads (``127.1``, ``[::1]``)."""
    try:
        address = parse_host_address(host)
    except ValueError:
        return False
    if address is None:
        return _loopback_name(host)
    # The address it reaches, as ``check_url`` judges it (``judged_addresses``): an
    # IPv4-mapped ``[::ffff:127.0.0.1]`` is 127.0.0.1, which ``is_loopback`` of the IPv6
    # form denied before Python 3.13.
    return judged_addresses(address)[0].is_loopback


def _loopback_name(host: str) -> bool:
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost")


def _valid_name(host: str) -> bool:
    name = host.rstrip(".")  # the root's dot is no part of a name's 253 characters
    labels = name.split(".")
    return 0 < len(name) <= 253 and all(
        0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum()
        and label.isascii() and not label.startswith("-") for label in labels)
