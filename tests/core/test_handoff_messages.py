"""The make-before-break messages on the order queues: one parser, strict, never raising."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from holdfast.core.directives import parse_inbox_body
from holdfast.core.handoff import (
    ABORT,
    READY,
    STEPS,
    TAKE,
    WARM,
    HandoffStep,
    take_says_the_transfer,
)

OWNER, PEER = "w-1#abc123", "w-2#def456"


@pytest.mark.parametrize("kind", STEPS)
def test_each_step_round_trips_for_its_recipient_only(kind: str) -> None:
    """parse_inbox_body(step.body(owner), owner) is the step; another owner reads None."""
    step = HandoffStep(kind, "c1", 1_700_000_000_123, 41 if kind in (WARM, TAKE) else None, PEER,
                       1_700_000_000_120 if kind == TAKE else None)
    assert parse_inbox_body(step.body(OWNER), OWNER) == step
    assert parse_inbox_body(step.body(OWNER), "w-3#abc123") is None


@pytest.mark.parametrize("body", [
    {"owner": OWNER, "warm": "c1"},
    {"owner": OWNER, "warm": {"conn_id": "c1", "epoch": 5, "seq": 1}},  # no peer
    {"owner": OWNER, "take": {"conn_id": "c1", "epoch": "5", "seq": 1, "peer": PEER}},
    {"owner": OWNER, "take": {"conn_id": "c1", "epoch": True, "seq": 1, "peer": PEER}},
    {"owner": OWNER, "ready": {"conn_id": "c1", "epoch": 5, "seq": "x", "peer": PEER}},
    {"owner": OWNER, "ready": {"conn_id": "c1", "epoch": 5, "seq": None, "peer": "nobody"}},
    {"owner": OWNER, "take": {"conn_id": "c1", "epoch": 5, "seq": 1, "peer": PEER, "at": "9"}},
    {"owner": OWNER, "abort": {"conn_id": "", "epoch": 5, "seq": None, "peer": PEER}},
    {"owner": OWNER, "warm": {"conn_id": "c1", "epoch": 5, "seq": 1, "peer": PEER},
     "take": {"conn_id": "c1", "epoch": 5, "seq": 1, "peer": PEER}},
])
def test_malformed_steps_parse_to_none(body: dict[str, object]) -> None:
    """A step missing a field, with a wrong type, an unknown peer or two kinds at once: None."""
    assert parse_inbox_body(json.dumps(body), OWNER) is None


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(["owner", WARM, READY, TAKE, ABORT]), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.dictionaries(st.sampled_from(["conn_id", "epoch", "seq", "peer", "at"]), inner,
                                  max_size=4), max_leaves=8), max_size=3))
def test_any_step_like_body_parses_without_raising(data: dict[str, object]) -> None:
    """Whatever a step-like message holds: a HandoffStep or None, never an exception."""
    said = parse_inbox_body(json.dumps({**data, "owner": OWNER}), OWNER)
    assert said is None or isinstance(said, HandoffStep | bool)


def test_a_take_starts_without_a_read_only_if_it_says_what_the_transfer_wrote() -> None:
    """A TAKE whose epoch is the transfer's (next_epoch of its time and the holder's epoch),
    whose time is within a lease before now (a skew ahead at most) and whose checkpoint is
    not behind the warm-up's passes; a forged one (epoch 2**63-1, seq -1, a time long past or
    ahead, an epoch not the transfer's) goes to the read."""
    from holdfast.core.handoff import take_says_the_transfer

    now, holder = 1_800_000_000_000, 1_799_999_000_000
    kw = {"holder_epoch": holder, "checkpoint": 41, "now_ms": now, "lease_ms": 4_000,
          "skew_ms": 250}

    def take(epoch: int, seq: int | None, at: int | None) -> HandoffStep:
        return HandoffStep(TAKE, "s1", epoch, seq, "w2#abc", at)

    assert take_says_the_transfer(take(now - 5, 44, now - 5), **kw)
    assert take_says_the_transfer(take(now + 200, 41, now + 200), **kw)  # its clock ahead
    # A holder's epoch ahead of the clock: the transfer's is one above it.
    assert take_says_the_transfer(take(now + 1, 44, now - 5),
                                  **{**kw, "holder_epoch": now})
    for forged in (take(2**63 - 1, -1, 1), take(now - 5, -1, now - 5),
                   take(now - 5, None, now - 5), take(now - 9_000, 44, now - 9_000),
                   take(now + 1_000, 44, now + 1_000), take(now, 44, now - 5),
                   take(now - 5, 44, None)):
        assert not take_says_the_transfer(forged, **kw), forged


@pytest.mark.parametrize("step", [
    {"conn_id": 5, "epoch": 5, "seq": 1, "peer": PEER},
    {"conn_id": "c1", "epoch": -2, "seq": 1, "peer": PEER},
    {"conn_id": "c1", "epoch": 2**63, "seq": 1, "peer": PEER},
    {"conn_id": "c1", "epoch": 5, "seq": -2, "peer": PEER},
    {"conn_id": "c1", "epoch": 5, "seq": 2**63, "peer": PEER},
    {"conn_id": "c1", "epoch": 5, "seq": 1, "peer": PEER, "at": 2**64},
])
def test_a_step_with_a_number_out_of_range_or_a_conn_id_not_text_parses_to_none(
        step: dict[str, object]) -> None:
    """An epoch, seq or time below -1 or past 2**63-1, or a conn id that is not a string: None."""
    assert parse_inbox_body(json.dumps({"owner": OWNER, TAKE: step}), OWNER) is None
    edge = {**step, "conn_id": "c1", "epoch": 2**63 - 1, "seq": -1, "at": 0}
    assert parse_inbox_body(json.dumps({"owner": OWNER, TAKE: edge}), OWNER) == HandoffStep(
        TAKE, "c1", 2**63 - 1, -1, PEER, 0)


def test_a_take_for_a_warm_up_without_a_checkpoint_needs_no_seq_check() -> None:
    """No checkpoint read at the warm-up: a TAKE with the transfer's epoch and time passes,
    whatever its seq."""
    now = 1_800_000_000_000
    for seq in (44, None):
        assert take_says_the_transfer(HandoffStep(TAKE, "s1", now - 5, seq, PEER, now - 5),
                                      holder_epoch=now - 1_000_000, checkpoint=None, now_ms=now,
                                      lease_ms=4_000, skew_ms=250)


def test_a_take_at_the_edges_of_its_window_passes() -> None:
    """A transfer time exactly a lease before now, or exactly the skew ahead of it, passes."""
    now = 1_800_000_000_000
    kw = {"holder_epoch": now - 1_000_000, "checkpoint": 41, "now_ms": now, "lease_ms": 4_000,
          "skew_ms": 250}
    for at in (now - 4_000, now + 250):
        assert take_says_the_transfer(HandoffStep(TAKE, "s1", at, 41, PEER, at), **kw), at
    for at in (now - 4_001, now + 251):
        assert not take_says_the_transfer(HandoffStep(TAKE, "s1", at, 41, PEER, at), **kw), at
