"""Redaction: no user info, query value, matrix parameter, fragment or (by default) path."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import assume, given
from hypothesis import strategies as st

from holdfast.core.redact import path_hash, redact, scrub

FULL = "wss://user:pw-s3cret@feed.example.com:8443/token/PATH-SECRET;jsessionid=SESSION-SECRET" \
       "?token=QUERY-SECRET&a=1;b=SEMI-SECRET&LONE-SECRET#FRAG-SECRET"


def test_redact_shows_host_and_a_path_hash_by_default() -> None:
    """Host, port and query names stay; the path becomes a stable short hash."""
    out = redact(FULL)
    h = path_hash("/token/PATH-SECRET;jsessionid=SESSION-SECRET")
    assert out == f"wss://feed.example.com:8443/<{h}>?token=***&a=***&***"
    assert "SECRET" not in out
    assert redact("ws://h/p?justatoken") == f"ws://h/<{path_hash('/p')}>?***"
    assert redact("ws://h/") == "ws://h/" and redact("ws://h") == "ws://h"
    assert redact("ws://h/a") != redact("ws://h/b") and redact("ws://h/a?x=1") == redact(
        "ws://h/a?x=2")


def test_redact_with_paths_keeps_the_path_but_not_matrix_values() -> None:
    """HOLDFAST_LOG_URL_PATHS shows the path; matrix parameters and the rest stay masked."""
    out = redact(FULL, paths=True)
    assert out == ("wss://feed.example.com:8443/token/PATH-SECRET;jsessionid=***"
                   "?token=***&a=***&***")


def test_scrub_removes_the_url_and_its_secrets_from_any_text() -> None:
    """An error text quoting the URL, or pieces of it, keeps none of its secrets."""
    text = (f"InvalidURI: {FULL} isn't a valid URI; token QUERY-SECRET, session "
            f"SESSION-SECRET, {quote('pw-s3cret')} at /token/PATH-SECRET")
    out = scrub(text, FULL)
    assert "SECRET" not in out and "s3cret" not in out
    assert redact(FULL) in out
    assert scrub("HTTP 503", FULL) == "HTTP 503" and scrub("", FULL) == ""


def test_scrub_removes_a_query_value_as_written_with_plus_signs() -> None:
    """A base64 signature ("+" decodes to a space) is scrubbed as the error text quotes it,
    also from the URL the worker resumed with (its own ``from_seq`` in place of the stored)."""
    url = "wss://h.example.com/feed?from_seq=3&sig=abc+def/ghi=="
    assert "abc+def" not in scrub("signature abc+def/ghi== rejected", url)
    assert "abc+def" not in scrub(
        "connect failed for wss://h.example.com/feed?from_seq=7&sig=abc+def/ghi==", url)


@given(user=st.text(min_size=1, max_size=20), secret=st.text(min_size=4, max_size=30),
       value=st.text(min_size=4, max_size=30), segment=st.text(min_size=4, max_size=30))
def test_redact_never_leaks(user: str, secret: str, value: str, segment: str) -> None:
    """Whatever the credentials, path, matrix or query values, redact's output has none."""
    q = lambda s: quote(s, safe="")  # noqa: E731
    url = f"wss://{q(user)}:{q(secret)}@h.example/{q(segment)};k={q(value)}?t={q(value)}"
    for out in (redact(url), scrub(f"error at {url}", url)):
        assert q(secret) not in out and q(value) not in out and q(segment) not in out
    assume(q(value) not in f"h.example/{q(segment)};k=")
    assert q(value) not in redact(url, paths=True)


@given(st.text(max_size=300))
def test_redact_never_raises(text: str) -> None:
    """Arbitrary input: redact and scrub return strings."""
    assert isinstance(redact(text), str) and isinstance(redact(text, paths=True), str)
    assert isinstance(scrub(f"x {text} y", text), str)
