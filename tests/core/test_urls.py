"""The ws_url policy: schemes, non-public and metadata addresses, allow-lists, settings."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdfast.core.exceptions import UnsafeUrl
from holdfast.core.model import MAX_URL_LEN
from holdfast.core.urls import (
    LOOPBACK_ALLOW_LIST,
    RESUME_URL_MAX_LEN,
    check_address,
    check_url,
    is_loopback_host,
    parse_allow_list,
    policy_from_env,
    redact,
)


@pytest.mark.parametrize("url", [
    "ws://example.com/s/1", "wss://example.com:8443/feed?token=x", "WSS://Example.COM/x",
    "ws://8.8.8.8:9000/", "ws://[2606:4700:4700::1111]/", "ws://134744072/x",
])
def test_accepts_public_ws_urls(url: str) -> None:
    """Ordinary ws/wss URLs to public hosts pass with no allow-list."""
    checked = check_url(url)
    assert checked.scheme in ("ws", "wss")


@pytest.mark.parametrize(("url", "why"), [
    ("http://example.com/", "scheme"), ("https://example.com/", "scheme"),
    ("file:///etc/passwd", "scheme"), ("javascript:alert(1)", "scheme"),
    ("ws:///nohost", "no host"), ("ws://exa mple.com/", "whitespace"),
    ("", "empty"), ("ws://" + "a" * 5000, "characters long"), ("ws://host:99999/", "not a valid"),
    ("ws://host:0/", "port 0"), ("ws://bad_host!/", "host name"),
    ("ws://1.2.3.256/", "not a valid IPv4"), ("ws://example.123/", "not a valid IPv4"),
])
def test_refuses_malformed_urls(url: str, why: str) -> None:
    """Other schemes and malformed URLs raise UnsafeUrl saying why."""
    with pytest.raises(UnsafeUrl, match=why):
        check_url(url)


def test_the_longest_stored_url_is_accepted_with_its_resume_parameter() -> None:
    """A stored URL of the most characters allowed is connected to again after a checkpoint
    (the resume parameter appended); one character more is refused, saying how long it is."""
    stored = "ws://feed.example.com/?token=" + "t" * (MAX_URL_LEN - 29)
    assert len(stored) == MAX_URL_LEN
    check_url(stored)
    resumed = f"{stored}&from_seq={2**63 - 1}"  # what the query protocol appends
    assert check_url(resumed, max_len=RESUME_URL_MAX_LEN).url == resumed
    with pytest.raises(UnsafeUrl, match=f"{MAX_URL_LEN + 1} characters long, the most is "):
        check_url(stored + "t")


@pytest.mark.parametrize(("url", "why"), [
    ("wss://example.com/s/f1#frag-secret", "fragment"),
    ("ws://user-secret@example.com/s/1", "without password"),
    ("ws://%ff-secret:pw-secret@example.com/s/1", "not valid UTF-8"),
    # A byte read with surrogateescape: not blamed on the user info (there is none).
    ("ws://example.com/s/\udcff-secret", "characters that are not valid Unicode"),
])
def test_refuses_what_the_websocket_client_refuses(url: str, why: str) -> None:
    """A URL websockets' parse_uri refuses (the worker could never connect) is refused here,
    the reason said without the URL's secrets; an empty fragment, which it accepts, passes."""
    with pytest.raises(UnsafeUrl, match=f"not a valid WebSocket URI.*{why}") as err:
        check_url(url)
    assert "secret" not in str(err.value) and "example.com" in str(err.value)
    assert check_url("wss://example.com/s/f1#").host == "example.com"


# Every example of the issue, and one of each kind of non-public range.
PRIVATE = [
    ("ws://10.0.0.2/", "private"), ("ws://172.16.5.4/", "private"),
    ("ws://192.168.1.1/", "private"), ("ws://127.0.0.1:8081/", "loopback"),
    ("ws://127.8.9.10/", "loopback"), ("ws://[::1]/", "loopback"),
    ("ws://[::ffff:127.0.0.1]/", "loopback"), ("ws://100.64.0.1/", "shared"),
    ("ws://0.0.0.0/", "unspecified"), ("ws://[::]/", "unspecified"),
    ("ws://[fc00::1]/", "unique local"), ("ws://[fd12:3456::1]/", "unique local"),
    ("ws://169.254.10.1/", "link-local"), ("ws://[fe80::1]/", "link-local"),
    ("ws://[fe80::1%25eth0]/", "link-local"), ("ws://224.0.0.1/", "multicast"),
    ("ws://[ff02::1]/", "multicast"), ("ws://240.0.0.1/", "reserved"),
    ("ws://255.255.255.255/", "reserved"), ("ws://198.18.0.1/", "reserved"),
    ("ws://192.0.2.1/", "documentation"), ("ws://198.51.100.1/", "documentation"),
    ("ws://203.0.113.9/", "documentation"), ("ws://[2001:db8::1]/", "documentation"),
    ("ws://[4000::1]/", "reserved"), ("ws://localhost:8080/", "loopback"),
    ("ws://a.b.localhost/", "loopback"),
]


@pytest.mark.parametrize(("url", "kind"), PRIVATE)
def test_non_public_addresses_are_refused_by_default(url: str, kind: str) -> None:
    """Loopback, RFC 1918, CGNAT, ULA, link-local, multicast, reserved, documentation: refused."""
    with pytest.raises(UnsafeUrl, match=f"ws_url refused: .*{kind}.*HOLDFAST_ALLOWED_HOSTS"):
        check_url(url)


@pytest.mark.parametrize("url", [
    "ws://169.254.169.254/latest/meta-data/", "ws://169.254.170.2/v2/credentials",
    "ws://[fd00:ec2::254]/", "ws://[::ffff:169.254.169.254]/", "ws://2852039166/",
    "ws://0xA9FEA9FE/", "ws://0xa9.0xfe.0xa9.0xfe/", "ws://0251.0376.0251.0376/",
    "ws://169.254.43518/", "ws://169.16689662/", "ws://169.254.169.254./",
    "ws://[::a9fe:a9fe]/", "ws://[::ffff:0:a9fe:a9fe]/", "ws://[64:ff9b::a9fe:a9fe]/",
    "ws://[2002:a9fe:a9fe::1]/", "ws://[2001:0:a9fe:a9fe::1]/",
    "ws://[2001:0:4136:e378:8000:63bf:5601:5601]/",  # Teredo client 169.254.169.254
])
@pytest.mark.parametrize("allow", [None, "0.0.0.0/0,::/0", "169.254.0.0/16,::/0",
                                   "169.254.169.254/31", "fd00:ec2::/32,::ffff:0:0/96"])
def test_metadata_addresses_are_never_allowed(url: str, allow: str | None) -> None:
    """The metadata services in any spelling or embedding are refused whatever the allow-list."""
    with pytest.raises(UnsafeUrl, match="metadata"):
        check_url(url, parse_allow_list(allow))


@pytest.mark.parametrize(("url", "shown"), [
    ("ws://[::ffff:10.1.2.3]/", "10.1.2.3"), ("ws://[64:ff9b::a01:203]/", "10.1.2.3"),
    ("ws://[2002:a01:203::1]/", "10.1.2.3"), ("ws://[::a01:203]/", "10.1.2.3"),
    ("ws://167838211/", "10.1.2.3"), ("ws://0xA010203/", "10.1.2.3"),
    ("ws://012.1.2.3/", "10.1.2.3"), ("ws://10.66051/", "10.1.2.3"),
])
def test_embedded_and_numeric_forms_are_unwrapped(url: str, shown: str) -> None:
    """IPv6 embeddings and decimal, hex and octal IPv4 forms are judged as the IPv4 address."""
    with pytest.raises(UnsafeUrl, match=f"{shown}.* private"):
        check_url(url)
    assert check_url(url, parse_allow_list("10.0.0.0/8,::/0")).address is not None


def test_only_a_cidr_inside_a_range_opens_it() -> None:
    """10.0.0.0/8 opens 10/8 and loopback CIDRs open loopback; 0.0.0.0/0 opens nothing."""
    check_url("ws://10.0.0.2/", parse_allow_list("10.0.0.0/8"))
    check_url("ws://10.9.0.2/", parse_allow_list("10.9.0.0/16"))
    check_url("ws://10.9.0.2/", parse_allow_list("10.9.0.2"))
    check_url("ws://169.254.10.1/", parse_allow_list("169.254.0.0/16"))
    local = parse_allow_list(LOOPBACK_ALLOW_LIST)
    for url in ("ws://127.0.0.1:8765/s/a", "ws://[::1]:9000/", "ws://[::ffff:127.0.0.1]/",
                "ws://localhost:1/", "ws://2130706433/"):
        check_url(url, local)
    for allow in ("0.0.0.0/0", "0.0.0.0/1", "8.0.0.0/7", "::/0", "192.168.0.0/15"):
        with pytest.raises(UnsafeUrl, match="refused"):
            check_url("ws://10.0.0.2/", parse_allow_list(f"{allow},::/0"))
        with pytest.raises(UnsafeUrl, match="refused"):
            check_url("ws://[::1]/", parse_allow_list(allow))
    with pytest.raises(UnsafeUrl, match="private"):
        check_url("ws://192.168.1.1/", local)
    # Public plus loopback: 0.0.0.0/0 and ::/0 stand for "any public address".
    both = parse_allow_list(f"{LOOPBACK_ALLOW_LIST},0.0.0.0/0,::/0")
    check_url("ws://8.8.8.8/", both)
    check_url("ws://127.0.0.1/", both)
    with pytest.raises(UnsafeUrl, match="not in the allow-list"):
        check_url("ws://8.8.8.8/", local)


def test_allowed_name_resolving_into_a_forbidden_range_is_refused() -> None:
    """An allowed name gives no right to a private address, unless that range is allowed too."""
    policy = parse_allow_list("feed.example.com")
    checked = check_url("ws://feed.example.com/x?token=secret", policy)
    assert checked.name_allowed
    check_address("93.184.216.34", policy, url=checked.url, name_allowed=True)
    for address in ("10.0.0.7", "127.0.0.1", "::1", "::ffff:10.0.0.7", "169.254.169.254"):
        with pytest.raises(UnsafeUrl, match="refused") as err:
            check_address(address, policy, url=checked.url, name_allowed=True)
        assert "secret" not in str(err.value)
    opened = parse_allow_list("feed.example.com,10.0.0.0/8")
    check_address("10.0.0.7", opened, url=checked.url, name_allowed=True)
    with pytest.raises(UnsafeUrl, match="metadata"):
        check_address("169.254.169.254", parse_allow_list("feed.example.com,169.254.0.0/16"),
                      url=checked.url, name_allowed=True)


def test_allow_list_names_suffixes_and_cidrs() -> None:
    """Exact names, .suffix / *.suffix entries and CIDRs restrict hosts when set."""
    policy = parse_allow_list(" feed.example.com, .corp.net ,*.svc.local, 10.0.0.0/8 ")
    assert check_url("ws://feed.example.com/x", policy).name_allowed
    assert check_url("wss://a.b.corp.net/x", policy).name_allowed
    assert check_url("ws://x.svc.local/x", policy).name_allowed
    check_url("ws://10.2.3.4/x", policy)
    with pytest.raises(UnsafeUrl, match="allow-list"):
        check_url("ws://11.0.0.1/x", policy)
    # With a CIDR listed, an unlisted name is judged by the addresses it resolves to.
    evil = check_url("ws://evil.com/x", policy)
    with pytest.raises(UnsafeUrl, match="allow-list"):
        check_address("8.8.8.8", policy, url=evil.url, name_allowed=evil.name_allowed)
    names_only = parse_allow_list("feed.example.com,.corp.net")
    for url in ("ws://corp.net/x", "ws://evil.com/x", "ws://feed.example.com.evil.com/"):
        with pytest.raises(UnsafeUrl, match="allow-list"):
            check_url(url, names_only)


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "bad host!", "a..b", "-x.com", "1.2.3.256",
                                   "169.254.169.254", "0xA9FEA9FE", "[fd00:ec2::254]"])
def test_bad_allow_list_entries_are_named(entry: str) -> None:
    """A malformed or metadata allow-list entry is a ValueError naming it."""
    with pytest.raises(ValueError, match="allow-list entry"):
        parse_allow_list(f"ok.com,{entry}")


def test_policy_from_env_names_the_variable() -> None:
    """The allow-list and the log-paths switch come from the environment; errors name them."""
    policy = policy_from_env({"HOLDFAST_ALLOWED_HOSTS": LOOPBACK_ALLOW_LIST,
                              "HOLDFAST_LOG_URL_PATHS": "true"})
    assert policy.restricted and policy.log_paths
    assert not policy_from_env({}).restricted and not policy_from_env({}).log_paths
    with pytest.raises(ValueError, match="HOLDFAST_ALLOWED_HOSTS"):
        policy_from_env({"HOLDFAST_ALLOWED_HOSTS": "10.0.0.0/99"})
    with pytest.raises(ValueError, match="HOLDFAST_LOG_URL_PATHS"):
        policy_from_env({"HOLDFAST_LOG_URL_PATHS": "maybe"})


def test_refusals_never_hold_secrets() -> None:
    """The refusal message shows host and path hash, never user info, path, query or fragment."""
    url = "ws://user:pw-secret@10.0.0.2/token/path-secret;sid=matrix-secret?q=query-secret#frag"
    with pytest.raises(UnsafeUrl) as err:
        check_url(url)
    assert "10.0.0.2" in str(err.value) and "secret" not in str(err.value)
    assert redact(url) in str(err.value)


@given(st.text(max_size=300))
def test_check_raises_only_unsafe(text: str) -> None:
    """Arbitrary input: check_url accepts or raises UnsafeUrl, nothing else."""
    with contextlib.suppress(UnsafeUrl):
        check_url(text)


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("LocalHost.", True), ("a.b.localhost", True), ("127.0.0.1", True),
    ("127.1", True), ("2130706433", True), ("[::1]", True), ("[::ffff:127.0.0.1]", True),
    ("[::ffff:10.0.0.1]", False), ("notlocalhost", False), ("localhost.example.com", False),
    ("8.8.8.8", False),
    ("10.0.0.1", False), ("[::2]", False), ("", False), ("1.2.3.256", False),
])
def test_is_loopback_host_knows_this_machine_in_any_spelling(host: str, loopback: bool) -> None:
    """Loopback names and loopback addresses in any form check_url reads are this machine;
    anything else (a public or private address, another name, garbage) is not."""
    assert is_loopback_host(host) is loopback


def test_a_refused_embedded_address_names_the_address_it_is_embedded_in() -> None:
    """The refusal of an embedded address says which address it is embedded in; a plain one
    says nothing of the kind."""
    with pytest.raises(UnsafeUrl, match=r"10\.1\.2\.3 \(embedded in ::ffff:a01:203\) is "):
        check_url("ws://[::ffff:10.1.2.3]/")
    with pytest.raises(UnsafeUrl, match=r"ws_url refused: 10\.0\.0\.2 is ") as err:
        check_url("ws://10.0.0.2/")
    assert "embedded" not in str(err.value) and "None" not in str(err.value)


@pytest.mark.parametrize("url", [b"ws://example.com/", 123, None])
def test_a_url_that_is_not_text_is_refused(url: object) -> None:
    """A ws_url that is not a string (hostile table data) is refused saying so, never a
    TypeError, and not as "empty"."""
    with pytest.raises(UnsafeUrl, match=f"refused: it is not text but {type(url).__name__}"):
        check_url(url)  # type: ignore[arg-type]


def test_empty_allow_list_entries_are_skipped() -> None:
    """A trailing comma or an empty entry between two is no entry, not an error."""
    policy = parse_allow_list("feed.example.com, ,,10.0.0.0/8,")
    assert policy.names == frozenset({"feed.example.com"}) and len(policy.networks) == 1


def test_check_address_without_a_policy_allows_any_public_address() -> None:
    """check_address with no policy: a public address passes, a private one is refused with
    the URL shown redacted (and no URL part without one)."""
    check_address("8.8.8.8")
    check_address("2606:4700:4700::1111", url="ws://feed.example.com/x")
    with pytest.raises(UnsafeUrl, match=r"private.*: ws://10\.0\.0\.7/") as err:
        check_address("10.0.0.7", url="ws://10.0.0.7/x?token=secret")
    assert "secret" not in str(err.value)
    with pytest.raises(UnsafeUrl, match=r"HOLDFAST_ALLOWED_HOSTS$"):
        check_address("10.0.0.7")


def test_a_host_name_of_at_most_253_characters_is_valid() -> None:
    """A host name of 253 characters (labels of 63 at most) is accepted, written with its root
    dot too (the dot is no part of the name's length); 254 is refused."""
    name = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(name) == 253
    assert check_url(f"ws://{name}/").host == name
    assert check_url(f"ws://{name}./").host == f"{name}."
    with pytest.raises(UnsafeUrl, match="not a valid host name"):
        check_url(f"ws://{name}b/")


@pytest.mark.parametrize("allow", ["feed.example.com", ".example.com", "*.example.com"])
def test_an_allow_list_of_names_or_suffixes_alone_restricts_hosts(allow: str) -> None:
    """An allow-list of only exact names, or only suffixes, refuses every other host."""
    policy = parse_allow_list(allow)
    assert policy.restricted
    assert check_url("ws://feed.example.com/x", policy).name_allowed
    with pytest.raises(UnsafeUrl, match="not in the allow-list"):
        check_url("ws://evil.com/x", policy)
    with pytest.raises(UnsafeUrl, match="not in the allow-list"):
        check_address("8.8.8.8", policy, url="ws://evil.com/x")


@pytest.mark.parametrize(("url", "port"), [
    ("ws://example.com/", 80), ("wss://example.com/", 443), ("WSS://example.com/", 443),
    ("wss://example.com:8443/", 8443), ("ws://[2606:4700:4700::1111]:9000/", 9000)])
def test_the_port_is_the_urls_or_its_schemes_default(url: str, port: int) -> None:
    """The checked port is the one written, else 80 for ws and 443 for wss."""
    assert check_url(url).port == port


@pytest.mark.parametrize("url", ["ws://example.com/a\x7fb", "ws://example.com/a\x00b",
                                 "ws://example.com/a\x1fb"])
def test_control_characters_anywhere_are_refused(url: str) -> None:
    """DEL and the C0 control characters are refused, wherever they are in the URL."""
    with pytest.raises(UnsafeUrl, match="whitespace or control characters"):
        check_url(url)
    assert check_url("ws://example.com/a!b").url == "ws://example.com/a!b"


def test_a_host_name_in_brackets_is_refused() -> None:
    """Brackets hold an IPv6 address only: a name in them (an IPvFuture form urlsplit lets
    through) is refused."""
    for url in ("ws://[v1.example.com]/", "ws://user:pw@[v1.example.com]:80/"):
        with pytest.raises(UnsafeUrl, match="in brackets is not an IPv6 address"):
            check_url(url)


@pytest.mark.parametrize("host", ["a", "x.y.example.com", "a-b_c.example.com",
                                  "x" * 63 + ".com"])
def test_short_and_long_labels_are_valid(host: str) -> None:
    """Labels of 1 to 63 characters (letters, digits, '-' and '_') make a valid host name."""
    assert check_url(f"ws://{host}/").host == host
    with pytest.raises(UnsafeUrl, match="not a valid host name"):
        check_url("ws://" + "x" * 64 + ".com/")


@pytest.mark.parametrize("host", [
    "exämple.com", "\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com", "١٢٣.com"])
def test_a_host_name_that_is_not_ascii_is_refused(host: str) -> None:
    """Non-ASCII letters or digits (IDN forms, fullwidth look-alikes) are not a valid host name:
    the allow-list compares names as written."""
    with pytest.raises(UnsafeUrl, match="not a valid host name"):
        check_url(f"ws://{host}/")


def test_a_cidr_entry_with_host_bits_set_is_its_network() -> None:
    """An allow-list CIDR written with host bits (10.1.2.3/8) stands for its network."""
    policy = parse_allow_list("10.1.2.3/8")
    check_url("ws://10.200.0.1/", policy)


def test_an_allowed_ipv4_address_does_not_open_a_6to4_address_embedding_it() -> None:
    """The allow-list is matched against the address a URL reaches: a 6to4 address whose
    embedded IPv4 address is allowed is itself not in the allow-list."""
    policy = parse_allow_list("8.8.8.8")
    check_url("ws://8.8.8.8/", policy)
    with pytest.raises(UnsafeUrl, match="not in the allow-list"):
        check_url("ws://[2002:808:808::1]/", policy)
