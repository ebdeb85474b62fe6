"""The ws_url policy: schemes, link-local and metadata addresses, allow-lists, redaction."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdfast.core.exceptions import UnsafeUrl
from holdfast.core.urls import check_address, check_url, parse_allow_list, redact


@pytest.mark.parametrize("url", [
    "ws://example.com/s/1", "wss://example.com:8443/feed?token=x", "ws://127.0.0.1:8765/s/a",
    "ws://[::1]:9000/", "WSS://Example.COM/x", "ws://10.1.2.3/x",
])
def test_accepts_ws_urls(url: str) -> None:
    """Ordinary ws/wss URLs pass with no allow-list."""
    checked = check_url(url)
    assert checked.scheme in ("ws", "wss")


@pytest.mark.parametrize(("url", "why"), [
    ("http://example.com/", "scheme"), ("https://example.com/", "scheme"),
    ("file:///etc/passwd", "scheme"), ("javascript:alert(1)", "scheme"),
    ("ws://169.254.169.254/latest/meta-data/", "metadata"),
    ("ws://169.254.170.2/v2/credentials", "metadata"),
    ("ws://[fd00:ec2::254]/", "metadata"), ("ws://[fe80::1]/", "metadata"),
    ("ws://[::ffff:169.254.169.254]/", "metadata"),
    ("ws:///nohost", "no host"), ("ws://exa mple.com/", "whitespace"),
    ("", "empty"), ("ws://" + "a" * 5000, "too long"), ("ws://host:99999/", "not a valid"),
    ("ws://bad_host!/", "host name"),
])
def test_refuses_hostile_urls(url: str, why: str) -> None:
    """Other schemes, link-local/metadata addresses and malformed URLs raise UnsafeUrl."""
    with pytest.raises(UnsafeUrl, match=why):
        check_url(url)


def test_metadata_allowed_only_by_an_explicit_cidr() -> None:
    """A CIDR in the allow-list that covers a link-local address lets it through."""
    policy = parse_allow_list("169.254.0.0/16")
    assert check_url("ws://169.254.10.1/x", policy).address is not None
    with pytest.raises(UnsafeUrl):
        check_url("ws://169.254.10.1/x", parse_allow_list("example.com"))


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


def test_resolved_addresses_are_checked() -> None:
    """A host name resolving to the metadata service is refused at connect time."""
    with pytest.raises(UnsafeUrl, match="metadata"):
        check_address("169.254.169.254", url="ws://innocent.example/x")
    with pytest.raises(UnsafeUrl, match="allow-list"):
        check_address("8.8.8.8", parse_allow_list("10.0.0.0/8"))
    check_address("10.0.0.5", parse_allow_list("10.0.0.0/8"))
    check_address("8.8.8.8", parse_allow_list("example.com"), name_allowed=True)


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "bad host!", "a..b", "-x.com"])
def test_bad_allow_list_entries_are_named(entry: str) -> None:
    """A malformed allow-list entry is a ValueError naming it."""
    with pytest.raises(ValueError, match="allow-list entry"):
        parse_allow_list(f"ok.com,{entry}")


def test_redact_strips_credentials_and_query_values() -> None:
    """User info, query values and fragments never reach a log line."""
    out = redact("wss://user:s3cret@feed.example.com:8443/p?token=abc&from_seq=5#frag")
    assert out == "wss://***@feed.example.com:8443/p?token=***&from_seq=***"
    assert redact("ws://h/p?justatoken") == "ws://h/p?justatoken=***"
    assert redact("ws://h/p") == "ws://h/p"


@given(user=st.text(min_size=1, max_size=20), secret=st.text(min_size=4, max_size=30),
       value=st.text(min_size=4, max_size=30))
def test_redact_never_leaks(user: str, secret: str, value: str) -> None:
    """Whatever the credentials or token values, redact's output does not contain them."""
    from urllib.parse import quote

    url = f"wss://{quote(user, safe='')}:{quote(secret, safe='')}@h.example/p?t={quote(value)}"
    out = redact(url)
    assert quote(secret, safe="") not in out and quote(value) not in out


@given(st.text(max_size=300))
def test_redact_never_raises_and_check_raises_only_unsafe(text: str) -> None:
    """Arbitrary input: redact returns a string, check_url accepts or raises UnsafeUrl."""
    assert isinstance(redact(text), str)
    with contextlib.suppress(UnsafeUrl):
        check_url(text)
