"""The event-source-mapping filters never drop a record the router would act on.

The matcher here is deliberately separate from the runner's (``holdfast.runner.matcher``): a
minimal reading of the EventBridge pattern language (a rule is a list of allowed values or
``{"exists": bool}``; a nested object matches the nested event object; every key must match).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from holdfast.core.filters import FILTER_PATTERNS, filter_criteria
from holdfast.lambdas.router.decide import Outcome, Reason, decide
from holdfast.runner.matcher import FilterSet
from tests.lambdas.records import image, record

NOW = 1_764_460_800_000


def eb_match(pattern: dict[str, Any], event: Any) -> bool:
    """Minimal EventBridge matching: exact values, exists, anything-but (of a present
    value), nesting (AND over keys)."""
    obj = event if isinstance(event, dict) else {}
    for key, rule in pattern.items():
        if isinstance(rule, dict):
            if not eb_match(rule, obj.get(key)):
                return False
            continue
        present = key in obj and not isinstance(obj[key], dict)
        ok = False
        for allowed in rule:
            if isinstance(allowed, dict) and set(allowed) == {"exists"}:
                ok = ok or (present is allowed["exists"])
            elif isinstance(allowed, dict) and set(allowed) == {"anything-but"}:
                ok = ok or (present and obj[key] not in allowed["anything-but"])
            elif isinstance(allowed, dict):
                raise AssertionError(f"test matcher does not know {allowed}")
            else:
                ok = ok or (present and obj[key] == allowed)
        if not ok:
            return False
    return True


def passes_filter(rec: dict[str, Any]) -> bool:
    return any(eb_match(p, rec) for p in FILTER_PATTERNS)


strings = st.sampled_from(["w1", "worker-b", "", "w1#a1b2c3", "w2#ffff"])
numbers = st.sampled_from([0, 1, NOW - 60_000, NOW - 1_500, NOW - 500, NOW + 500, NOW + 20_000,
                           NOW + 3_600_000, 10**13])
# Mostly well-formed values, so that most generated records are ones the router acts on or
# nearly acts on; the odd ones (NULL, wrong type) probe the edges of both matchers.
SHAPES = ["absent", "typed", "typed", "null"]


@st.composite
def attr(draw: st.DrawFn, values: st.SearchStrategy[Any], kind: str, broken: bool) -> Any:
    """An attribute that is absent, NULL, well-typed, or (if ``broken``) of the wrong type."""
    shape = draw(st.sampled_from([*SHAPES, "wrong"] if broken else SHAPES))
    if shape == "typed":
        return {kind: str(draw(values))}
    if shape == "null":
        return {"NULL": True}
    if shape == "wrong":
        return draw(st.sampled_from([{"N": "12"} if kind == "S" else {"S": "12"},
                                     {"BOOL": True}]))
    return None


@st.composite
def images(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    broken = draw(st.integers(0, 4)) == 0
    conn = draw(st.sampled_from(["c1", "c2", "bad id!", ""] if broken else ["c1", "c2"]))
    item = image(conn, ws_url=draw(st.sampled_from(["wss://x.test/", ""] if broken
                                                   else ["wss://x.test/"])))
    item["desired_state"] = draw(st.sampled_from(
        [{"S": "STARTED"}, {"S": "STOPPED"}, {"S": "started"}, None, {"N": "1"}] if broken
        else [{"S": "STARTED"}, {"S": "STARTED"}, {"S": "STOPPED"}]))
    for name, values, kind in (
            ("lease_owner", strings, "S"), ("lease_expires_at_ms", numbers, "N"),
            ("lease_epoch", st.integers(0, 5), "N"),
            ("status", st.sampled_from(["RUNNING", "RELEASED", "BACKOFF", "INVALID"]), "S"),
            ("last_seq", st.integers(-1, 9), "N"), ("error_count", st.integers(0, 3), "N")):
        value = draw(attr(values, kind, broken))
        if value is not None:
            item[name] = value
    return {k: v for k, v in item.items() if v is not None}


@pytest.mark.slow
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_name=st.sampled_from(["INSERT", "MODIFY", "MODIFY", "MODIFY", "REMOVE"]),
       old=images(), new=images(),
       skew=st.sampled_from([0, 1_000, 5_000]))
def test_every_actionable_record_passes_the_filter(event_name: str, old: Any, new: Any,
                                                    skew: int) -> None:
    """Whatever the images, a record the router would nudge, order or normalise is not
    filtered out."""
    if event_name == "REMOVE":
        new = None  # DynamoDB Streams REMOVE records carry only the old image
    decision = decide(event_name, old, new, NOW, skew_ms=skew)
    event(f"{decision.outcome.value}: {decision.reason.value}")
    if decision.acts:
        assert passes_filter(record(event_name, old, new)), decision


@given(owner_kept=st.sampled_from(["w1", "w2"]), seq=st.integers(0, 100),
       state=st.sampled_from(["STARTED"]))
def test_heartbeats_and_checkpoints_are_filtered_out(owner_kept: str, seq: int,
                                                     state: str) -> None:
    """Records that keep an owner (heartbeat, checkpoint, acquire) never invoke the router.

    Those writes are conditional on STARTED; a STOPPED item that keeps an owner is a stop
    order's record and passes (see below)."""
    old = image("c1", owner="w1", expires=NOW, epoch=2, last_seq=seq, state=state)
    new = image("c1", owner=owner_kept, expires=NOW + 20_000, epoch=2, last_seq=seq + 1,
                state=state)
    assert not passes_filter(record("MODIFY", old, new))


def test_deletes_and_stops_are_filtered_out() -> None:
    """Deletes of free streams, and STOPPED items never held, are dropped; deletes and stops
    of held streams pass (the router orders the holder to stop), and so does a held stream
    left STOPPED without an owner (its holder's release, skipped, or a write over it, put
    back: the filter cannot compare epochs)."""
    held = image("c1", owner="w1", expires=NOW, epoch=2)
    free = image("c1", expires=0, epoch=2)
    assert not passes_filter(record("REMOVE", free, None))
    assert not passes_filter(record("REMOVE", free, None, ttl=True))
    assert passes_filter(record("REMOVE", held, None))
    assert passes_filter(record("MODIFY", held, image("c1", state="STOPPED", owner="w1",
                                                      expires=NOW, epoch=2)))
    assert passes_filter(record("MODIFY", held, image("c1", state="STOPPED", expires=0)))
    free_stopped = image("c1", state="STOPPED", expires=0, epoch=2)
    assert not passes_filter(record("MODIFY", free_stopped, {**free_stopped, "x": {"N": "1"}}))
    assert not passes_filter(record("INSERT", None, image("c1", state="STOPPED")))
    assert not passes_filter(record("INSERT", None, held))  # restored with an owner: skipped


def test_filter_matches_the_cases_that_need_nudges() -> None:
    """Insert, release, give-up and STOPPED -> STARTED pass (the matcher is not vacuous)."""
    held = image("c1", owner="w1", expires=NOW, epoch=2)
    assert passes_filter(record("INSERT", None, image("c1")))
    assert passes_filter(record("MODIFY", held, image("c1", expires=0, status="RELEASED")))
    assert passes_filter(record("MODIFY", held, image("c1", expires=NOW, status="BACKOFF")))
    assert passes_filter(record("MODIFY", image("c1", state="STOPPED"), image("c1", expires=0)))


SESSION_OWNER = "w-7#a1b2c3"
BACKSTOP = NOW + 3_600_000


def freed_in_place() -> dict[str, Any]:
    """The seed's release_lease: expiry 0, the owner left in place."""
    return record("MODIFY", image("c1", owner="w1", expires=NOW + 5_000, epoch=2),
                  image("c1", owner="w1", expires=0, epoch=2))


def restarted_with_owner(owner: str = SESSION_OWNER) -> dict[str, Any]:
    """STOPPED -> STARTED on an item that still names its old (session) owner."""
    return record("MODIFY", image("c1", state="STOPPED", owner=owner, expires=BACKSTOP, epoch=2),
                  image("c1", owner=owner, expires=BACKSTOP, epoch=2))


def test_freed_in_place_passes_and_orders_the_holder_to_release() -> None:
    """Expiry set to 0 with the owner kept passes the filter and becomes a release order to
    the holder, never a nudge that would let a second worker deliver (finding 1)."""
    rec = freed_in_place()
    assert passes_filter(rec)
    d = decide("MODIFY", rec["dynamodb"]["OldImage"], rec["dynamodb"]["NewImage"], NOW)
    assert (d.outcome, d.reason, d.owner) == (Outcome.ORDER, Reason.RELEASE, "w1")


def test_session_heartbeats_checkpoints_and_claims_are_filtered_out() -> None:
    """Writes that keep STARTED and a non-zero expiry (checkpoint, claim, takeover) do not
    pass, with session and plain owners alike."""
    for owner in (SESSION_OWNER, "w1"):
        held = image("c1", owner=owner, expires=BACKSTOP, epoch=2, last_seq=4)
        assert not passes_filter(record("MODIFY", held, image(
            "c1", owner=owner, expires=BACKSTOP, epoch=2, last_seq=9)))
        assert not passes_filter(record("MODIFY", image("c1", expires=0, epoch=1), held))
        assert not passes_filter(record("MODIFY", image("c1", owner="x", expires=0, epoch=1),
                                        held))


def test_later_writes_to_a_freed_item_pass_but_are_skipped() -> None:
    """An item already freed in place passes on every write (a filter cannot compare images);
    the router skips it unless something changed."""
    freed = image("c1", owner="w1", expires=0, epoch=2, last_seq=3)
    rec = record("MODIFY", freed, image("c1", owner="w1", expires=0, epoch=2, last_seq=3,
                                        ws_url="wss://o.test/"))
    assert passes_filter(rec)
    d = decide("MODIFY", rec["dynamodb"]["OldImage"], rec["dynamodb"]["NewImage"], NOW)
    assert (d.outcome, d.reason) == (Outcome.SKIP, Reason.OWNED)


def test_runner_matcher_agrees_on_the_new_cases() -> None:
    """The local runner's matcher lets the same records through: the expiry's "0" is matched
    as the string DynamoDB streams carry, and a non-zero expiry is not."""
    runner = FilterSet(FILTER_PATTERNS)
    held = image("c1", owner="w1", expires=NOW, epoch=2)
    cases = [freed_in_place(), restarted_with_owner(), restarted_with_owner("w1"),
             record("MODIFY", held, image("c1", owner="w1", expires=NOW + 20_000, epoch=2)),
             record("MODIFY", held, image("c1", owner="w1", expires=10, epoch=2)),
             record("MODIFY", held, image("c1", owner="w1", expires=0, state="STOPPED")),
             record("INSERT", None, image("c1", owner="w1", expires=0))]
    assert [runner(r) for r in cases] == [passes_filter(r) for r in cases] == [
        True, False, False, False, False, True, True]


@pytest.mark.parametrize("expires", [None, 0], ids=["no-expiry", "expiry-0"])
def test_a_held_stream_written_over_again_as_stopped_passes_and_is_held_again(
        expires: int | None) -> None:
    """A stream the router holds for its holder's take-back (no owner, no status, expiry
    ahead) written over again as STOPPED: the record passes (no pattern let it through) and is
    held again, so a restart before the take-back is not nudged at once; both matchers
    agree."""
    held_for_take_back = image("c1", expires=NOW + 4_000)
    rec = record("MODIFY", held_for_take_back, image("c1", state="STOPPED", expires=expires))
    d = decide("MODIFY", rec["dynamodb"]["OldImage"], rec["dynamodb"]["NewImage"], NOW)
    assert d.acts and d.reason is Reason.HELD
    assert passes_filter(rec) and FilterSet(FILTER_PATTERNS)(rec)


def test_filters_fit_lambdas_quota() -> None:
    """Lambda accepts at most 5 filters per event source mapping (default quota)."""
    assert len(filter_criteria()["Filters"]) <= 5


def test_filter_criteria_round_trips() -> None:
    """``filter_criteria()`` is FILTER_PATTERNS as the JSON strings Lambda expects."""
    patterns = [json.loads(f["Pattern"]) for f in filter_criteria()["Filters"]]
    assert patterns == [json.loads(json.dumps(p)) for p in FILTER_PATTERNS]
