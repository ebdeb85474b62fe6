"""Resume protocols and frame parsing."""

from __future__ import annotations

import pytest

from holdfast.worker.handler import HandlerLoadError
from holdfast.worker.protocol import (
    FirstFrameProtocol,
    HeaderProtocol,
    QueryParamProtocol,
    load_protocol,
    parse_json_seq,
)


def test_query_param_resume() -> None:
    """from_seq is appended, replacing an existing one, and other parameters are kept."""
    p = QueryParamProtocol()
    assert p.url("ws://h/s/1", None) == "ws://h/s/1"
    assert p.url("ws://h/s/1", 8) == "ws://h/s/1?from_seq=8"
    assert p.url("ws://h/s/1?token=a&from_seq=2", 9) == "ws://h/s/1?token=a&from_seq=9"


@pytest.mark.parametrize(("url", "resumed"), [
    ("ws://h/p?a=1;b=2", "ws://h/p?a=1;b=2&from_seq=7"),
    ("wss://h/p?sig=a%2Fb%3D&exp=9", "wss://h/p?sig=a%2Fb%3D&exp=9&from_seq=7"),
    ("ws://h/p?q=a+b%20c&x", "ws://h/p?q=a+b%20c&x&from_seq=7"),
    ("ws://h/p?from_seq=1&sig=Zz%3D", "ws://h/p?from_seq=7&sig=Zz%3D"),
    ("ws://h/p?a=1&from%5Fseq=1&from_seq=2&b=%7E", "ws://h/p?a=1&from_seq=7&b=%7E"),
    ("ws://h/p?", "ws://h/p?from_seq=7"), ("ws://h/p?a=1&", "ws://h/p?a=1&from_seq=7"),
    ("ws://h/p;m=1?a=1#frag", "ws://h/p;m=1?a=1&from_seq=7#frag"),
])
def test_query_resume_keeps_the_user_query_byte_for_byte(url: str, resumed: str) -> None:
    """Only from_seq is added or replaced; the rest of a (signed) URL is never re-encoded."""
    assert QueryParamProtocol().url(url, 7) == resumed


def test_header_and_first_frame_resume() -> None:
    """The header and first-frame protocols carry the same number elsewhere."""
    assert HeaderProtocol().headers(5) == {"X-From-Seq": "5"}
    assert HeaderProtocol().headers(None) == {}
    assert FirstFrameProtocol().first_frames(5) == ['{"from_seq": 5}']


@pytest.mark.parametrize(("frame", "seq"), [
    ('{"seq": 3, "data": "x"}', 3), ('{"seq": "3"}', None), ('{"seq": true}', None),
    ('{"seq": 1.5}', None), ('{"seq": -1}', None), ("[1]", None), ("not json", None),
    (b"\x00bin", None), ("{broken", None), ('{"seq": 99999999999999999999999}', None),
])
def test_parse_json_seq(frame: str | bytes, seq: int | None) -> None:
    """Only JSON objects with a non-negative integer seq carry a seq; data is passed unchanged."""
    parsed = parse_json_seq(frame)
    assert parsed.seq == seq and parsed.data == frame


@pytest.mark.parametrize(("frame", "malformed"), [
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, True),  # RecursionError in json.loads
    ('{"seq": 1, "a": ' + "[" * 50_000 + "]" * 50_000 + "}", True),
    ("not json", True), ("{broken", True), ("", True), ("\u00e9t\u00e9", True),
    ("[1]", False), ('"x"', False), ("null", False), ("-3", False), (b"\xff\xfe", False),
    ('{"seq": 3}', False),
])
def test_unparseable_frames_never_raise(frame: str | bytes, malformed: bool) -> None:
    """Deep nesting or non-JSON text is malformed with seq None, never an exception."""
    parsed = parse_json_seq(frame)
    assert parsed.malformed is malformed and parsed.data == frame
    assert parsed.seq == (3 if frame == '{"seq": 3}' else None)


@pytest.mark.parametrize("frame", ['{"seq": "42"}', '{"seq": 42.0}', '{"seq": -3}',
                                   '{"seq": true}', '{"seq": 99999999999999999999}'])
def test_a_seq_that_is_not_a_sequence_number_is_malformed_and_says_why(frame: str) -> None:
    """A seq present but not an integer from 0 to 2**63-1 is out of contract: counted and
    logged with why (silently seq-less, such a stream never had a checkpoint)."""
    parsed = parse_json_seq(frame)
    assert parsed.seq is None and parsed.malformed and "'seq' is not an integer" in parsed.why


@pytest.mark.parametrize(("frame", "malformed"), [
    (b'{"seq": 3, "data": "x"}', True), (b'{"type": "hello"}', False), (b"\x00bin", False),
    (b'[{"seq": 3}]', False)])
def test_a_binary_frame_that_looks_like_json_with_a_seq_says_why_it_has_none(
        frame: bytes, malformed: bool) -> None:
    """Binary frames stay opaque (seq None, not parsed), but one that starts like a JSON object
    naming the seq is malformed, saying why: such a stream was silently never checkpointed."""
    parsed = parse_json_seq(frame)
    assert parsed.seq is None and parsed.data == frame and parsed.malformed is malformed
    assert ("reads seqs from text frames only" in parsed.why) is malformed


def test_an_object_after_whitespace_carries_its_seq() -> None:
    """JSON may begin with whitespace: a newline before the object does not lose its seq; an
    object without a seq (or with a null one: a control frame) is not malformed."""
    assert parse_json_seq('\n {"seq": 42}').seq == 42
    assert not parse_json_seq('{"type": "hello"}').malformed
    assert not parse_json_seq('{"type": "ping", "seq": null}').malformed


def test_load_protocol() -> None:
    """Built-in names and module:factory load; anything else is a clear error."""
    assert isinstance(load_protocol(None), QueryParamProtocol)
    assert isinstance(load_protocol("header"), HeaderProtocol)
    first_frame = load_protocol("holdfast.worker.protocol:FirstFrameProtocol")
    assert isinstance(first_frame, FirstFrameProtocol)
    with pytest.raises(HandlerLoadError, match="HOLDFAST_PROTOCOL"):
        load_protocol("turbo")
    with pytest.raises(HandlerLoadError, match="cannot be loaded"):
        load_protocol("no.such.module:x")
    with pytest.raises(HandlerLoadError, match="ResumeProtocol"):
        load_protocol("builtins:dict")
