"""The nudge message format and its one parser, shared by the Lambdas and the worker."""

from __future__ import annotations

import json

import pytest

from holdfast.core.nudge import (
    MAX_DELAY_S,
    MAX_URL_CHARS,
    URL_FRESH_MS,
    Nudge,
    nudge_delay_s,
    parse_nudge,
    url_if_fresh,
)


def test_body_is_the_documented_json() -> None:
    """The body has exactly conn_id, reason and epoch (null when unknown)."""
    assert json.loads(Nudge("c-1", "inserted", 4).body()) == {
        "conn_id": "c-1", "reason": "inserted", "epoch": 4}
    assert json.loads(Nudge("c-1", "expired").body())["epoch"] is None


def test_body_round_trips() -> None:
    """``parse_nudge`` reads back what ``body`` wrote (the delay is not part of the body)."""
    nudge = Nudge("c/1:x", "gave_up", 7, delay_s=30)
    assert parse_nudge(nudge.body()) == Nudge("c/1:x", "gave_up", 7)


def test_parse_is_lenient_but_not_credulous() -> None:
    """Any JSON object with a valid string conn_id is a nudge; extra keys are ignored."""
    assert parse_nudge('{"conn_id": "abc", "reason": "x", "epoch": 3, "extra": [1]}') == Nudge(
        "abc", "x", 3)
    assert parse_nudge('{"conn_id": "abc", "epoch": null}') == Nudge("abc", "", None)


@pytest.mark.parametrize("body", ['{"conn_id": "c", "epoch": true}',
                                  '{"conn_id": "c", "epoch": "3"}',
                                  '{"conn_id": "c", "reason": 5, "epoch": 1.5}'])
def test_malformed_hints_are_dropped(body: str) -> None:
    """A reason or epoch of the wrong type is read as empty: a nudge is only a hint."""
    assert parse_nudge(body) == Nudge("c", "", None)


@pytest.mark.parametrize("body", ["", "not json", "nope", "[]", '"abc"', '{"reason": "x"}',
                                  '{"conn_id": 5}', '{"conn_id": ""}', '{"conn_id": "a b"}',
                                  '{"id": "abc"}', "[" * 5000, '{"conn_id": ' + "[" * 5000])
def test_poison_bodies_are_rejected(body: str) -> None:
    """A body without a valid string conn_id raises ValueError, not a KeyError or TypeError
    (nor a RecursionError for nesting past the recursion limit)."""
    with pytest.raises(ValueError):
        parse_nudge(body)


def test_delay_is_bounded() -> None:
    """A nudge's delay must fit SQS's 0..900 s, and a connection id is required."""
    with pytest.raises(ValueError):
        Nudge("c", "x", delay_s=MAX_DELAY_S + 1)
    with pytest.raises(ValueError):
        Nudge("c", "x", delay_s=-1)
    with pytest.raises(ValueError):
        Nudge("", "x")


@pytest.mark.parametrize(("wait", "expected"), [
    (0, 0), (1, 1), (1_000, 1), (1_001, 2), (-5_000, 0), (900_000, MAX_DELAY_S),
    (900_001, None), (3_600_000, None)])
def test_a_router_nudge_is_delayed_to_the_claimable_second_never_early(
        wait: int, expected: int | None) -> None:
    """Delays round up (never early); past SQS's limit none (the sweeper nudges it)."""
    assert nudge_delay_s(wait) == expected


def test_a_back_off_nudge_comes_back_when_it_ends_and_never_is_deleted_for_being_late() -> None:
    """A worker's refused nudge: rounded up plus a second; at least a second when the back-off
    ended before the answer came (a visibility of 0 redelivers at once); None past SQS's
    limit."""
    def again(wait: int) -> int | None:
        return nudge_delay_s(wait, slack_s=1, least_s=1)

    assert again(2_500) == 4
    assert again(0) == 1
    assert again(-1_000) == 1
    assert again(-30_000) == 1
    assert again(899_000) == 900
    assert again(900_001) is None


def test_an_inserted_nudges_url_round_trips_and_a_bad_one_is_dropped() -> None:
    """``ws_url`` is written only when set and read back; a non-string, empty or over-long one
    is read as absent (the worker then reads the item)."""
    nudge = Nudge("c", "inserted", None, ws_url="wss://h.test/a")
    assert json.loads(nudge.body())["ws_url"] == "wss://h.test/a"
    assert parse_nudge(nudge.body()).ws_url == "wss://h.test/a"
    assert "ws_url" not in json.loads(Nudge("c", "inserted").body())
    for bad in (5, "", "wss://h.test/" + "x" * MAX_URL_CHARS, None, ["wss://h.test/a"]):
        body = json.dumps({"conn_id": "c", "reason": "inserted", "ws_url": bad})
        assert parse_nudge(body).ws_url is None, bad


def test_an_inserted_nudges_url_is_used_only_while_fresh() -> None:
    """The URL is used on a first receive within URL_FRESH_MS of the send; late, redelivered
    or of unknown age, the worker reads the item instead."""
    nudge = Nudge("c", "inserted", None, ws_url="wss://h.test/a")
    sent = 1_000_000
    assert url_if_fresh(nudge, sent, 1, sent + URL_FRESH_MS) == "wss://h.test/a"
    assert url_if_fresh(nudge, sent, 1, sent - 200) == "wss://h.test/a"  # clocks a bit apart
    assert url_if_fresh(nudge, sent, 1, sent + URL_FRESH_MS + 1) is None
    assert url_if_fresh(nudge, sent, 2, sent) is None
    assert url_if_fresh(nudge, None, 1, sent) is None
    assert url_if_fresh(Nudge("c", "inserted"), sent, 1, sent) is None
