"""The make-before-break messages on the order queues: one parser, strict, never raising."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from holdfast.core.directives import parse_inbox_body
from holdfast.core.handoff import ABORT, READY, STEPS, TAKE, WARM, HandoffStep

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
