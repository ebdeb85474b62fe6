"""Address reading and classification: the resolver's IPv4 forms, IPv6 embeddings, ranges."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from holdfast.core.addresses import (
    forbidden_range,
    is_metadata,
    judged_addresses,
    parse_host_address,
    parse_loose_ipv4,
)

ip = ipaddress.ip_address


@given(st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=40))
@example("0x7f.1")
@example("0251.0376.0251.0376")
@example("2852039166")
def test_reads_every_ipv4_form_the_resolver_reads(text: str) -> None:
    """Whatever inet_aton (the C resolver) reads as an IPv4 address, we read as the same one."""
    try:
        expected = socket.inet_ntoa(socket.inet_aton(text))
    except OSError:
        return
    assert str(parse_loose_ipv4(text)) == expected
    assert str(parse_host_address(text)) == expected


@pytest.mark.parametrize(("host", "address"), [
    ("2852039166", "169.254.169.254"), ("0xA9FEA9FE", "169.254.169.254"),
    ("0251.0376.0251.0376", "169.254.169.254"), ("169.254.43518", "169.254.169.254"),
    ("127.1", "127.0.0.1"), ("127.0.0.1.", "127.0.0.1"), ("[::1]", "::1"),
    ("fe80::1%eth0", "fe80::1"), ("example.com", None), ("a-1.example", None),
])
def test_parse_host_address(host: str, address: str | None) -> None:
    """Host names give None; every spelling of an address gives that address."""
    parsed = parse_host_address(host)
    assert (None if parsed is None else str(parsed)) == address


@pytest.mark.parametrize("host", ["1.2.3.256", "example.123", "4294967296", "0x1g.1", "09", "::g"])
def test_numbers_that_are_no_address_are_errors(host: str) -> None:
    """A host ending in a number must be a valid IPv4 address (as WHATWG URL parsers require)."""
    with pytest.raises(ValueError):
        parse_host_address(host)


@pytest.mark.parametrize(("address", "judged"), [
    ("::ffff:169.254.169.254", ["169.254.169.254"]),  # mapped
    ("::ffff:0:a9fe:a9fe", ["169.254.169.254"]),  # SIIT
    ("::a9fe:a9fe", ["169.254.169.254"]),  # compatible
    ("64:ff9b::a9fe:a9fe", ["169.254.169.254"]),  # NAT64
    ("2002:a9fe:a9fe::1", ["2002:a9fe:a9fe::1", "169.254.169.254"]),  # 6to4
    ("2001:0:a9fe:a9fe:0:0:f7f7:f7f7", ["2001:0:a9fe:a9fe::f7f7:f7f7", "169.254.169.254",
                                         "8.8.8.8"]),  # Teredo: server, client
    ("::1", ["::1"]), ("::", ["::"]), ("8.8.8.8", ["8.8.8.8"]),
    ("2606:4700::1", ["2606:4700::1"]),
])
def test_ipv6_embeddings_are_unwrapped(address: str, judged: list[str]) -> None:
    """Each IPv4 address embedded in an IPv6 one is judged; :: and ::1 stay themselves."""
    assert [str(a) for a in judged_addresses(ip(address))] == judged


def test_ranges_are_named_most_specific_first() -> None:
    """The first matching range names the address; public addresses match none."""
    assert str(forbidden_range(ip("::1")).network) == "::1/128"  # type: ignore[union-attr]
    assert "loopback" in forbidden_range(ip("127.9.9.9")).label  # type: ignore[union-attr]
    assert "reserved" in forbidden_range(ip("4000::1")).label  # type: ignore[union-attr]
    for public in ("8.8.8.8", "1.1.1.1", "2606:4700::1111", "2002:808:808::1", "100.63.255.255",
                   "100.128.0.0", "172.32.0.1", "11.0.0.1"):
        assert forbidden_range(ip(public)) is None, public
    assert is_metadata(ip("169.254.170.2")) and is_metadata(ip("fd00:ec2::254"))
    assert not is_metadata(ip("169.254.169.253"))
