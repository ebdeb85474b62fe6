"""Unit tests of the pure lease rules."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdfast.core import rules
from holdfast.core.exceptions import ConfigError, LossReason
from holdfast.core.model import LeaseItem
from holdfast.core.rules import LeaseTiming
from holdfast.core.schema import ATTR, BACKSTOP_MS


def item(**kw: object) -> LeaseItem:
    base: dict[str, object] = dict(conn_id="a", desired_state="STARTED", ws_url="ws://h/s/a",
                                   lease_owner=None, lease_expires_at_ms=0, last_seq=None, epoch=0)
    base.update(kw)
    return LeaseItem(**base)  # type: ignore[arg-type]


def test_timing_rejects_heartbeat_too_long_for_lease() -> None:
    """A heartbeat that cannot fit twice in the usable window is a configuration error."""
    with pytest.raises(ConfigError, match="heartbeat"):
        LeaseTiming(lease_ms=4000, heartbeat_ms=2000, skew_ms=500, margin_ms=500)


def test_timing_rejects_non_positive_values() -> None:
    """Zero or negative lease and heartbeat values are refused."""
    with pytest.raises(ConfigError):
        LeaseTiming(lease_ms=0, heartbeat_ms=1)


def test_default_timing_is_the_production_default() -> None:
    """The defaults are production's: TTL 4 s, heartbeat 1 s, skew 0.25 s, margin 0.4 s; an
    empty environment reads as exactly those."""
    t = LeaseTiming()
    assert (t.lease_ms, t.heartbeat_ms, t.skew_ms, t.margin_ms) == (4_000, 1_000, 250, 400)
    assert t.usable_ms == 3_350
    assert LeaseTiming.from_env({}) == t


def test_a_fence_is_the_length_written_less_the_skew_and_the_margin() -> None:
    """A renewal's fence: the lease's usable window after the send; a stream's backstop
    (an hour): the backstop less the same skew and margin."""
    t = LeaseTiming()
    assert rules.fence_deadline_mono_ms(1_000, t) == 1_000 + 3_350
    assert rules.fence_deadline_mono_ms(1_000, t, length_ms=BACKSTOP_MS) == (
        1_000 + BACKSTOP_MS - 250 - 400)


def test_timing_from_env_reads_seconds_and_scales_the_margin() -> None:
    """Lease and heartbeat in seconds (fractions allowed), skew and margin in ms; the margin
    defaults to a tenth of the lease, at most 1 s."""
    env = {"HOLDFAST_LEASE_SECONDS": "3", "HOLDFAST_HEARTBEAT_SECONDS": "0.5",
           "HOLDFAST_SKEW_MS": "300"}
    assert LeaseTiming.from_env(env) == LeaseTiming(3_000, 500, 300, 300)
    assert LeaseTiming.from_env({**env, "HOLDFAST_MARGIN_MS": "0"}).margin_ms == 0
    assert LeaseTiming.from_env({"HOLDFAST_LEASE_SECONDS": "60"}).margin_ms == 1_000


@pytest.mark.parametrize(("env", "name"), [
    ({"HOLDFAST_LEASE_SECONDS": "8000"}, "HOLDFAST_LEASE_SECONDS"),  # ms given as seconds
    ({"HOLDFAST_LEASE_SECONDS": "nan"}, "HOLDFAST_LEASE_SECONDS"),
    ({"HOLDFAST_HEARTBEAT_SECONDS": "soon"}, "HOLDFAST_HEARTBEAT_SECONDS"),
    ({"HOLDFAST_SKEW_MS": "0.5"}, "HOLDFAST_SKEW_MS"),
    ({"HOLDFAST_MARGIN_MS": "-1"}, "HOLDFAST_MARGIN_MS"),
    ({"HOLDFAST_HEARTBEAT_SECONDS": "4"}, "HOLDFAST_HEARTBEAT_SECONDS"),  # too long for 8 s
])
def test_timing_from_env_names_the_bad_variable(env: dict[str, str], name: str) -> None:
    """A bad or inconsistent timing is a ConfigError naming its variable."""
    with pytest.raises(ConfigError, match=name):
        LeaseTiming.from_env(env)


def test_expiry_needs_skew_allowance() -> None:
    """A lease is free only once the challenger's clock is past expiry plus the skew."""
    assert not rules.is_expired(10_000, now_wall_ms=10_500, skew_ms=1_000)
    assert rules.is_expired(10_000, now_wall_ms=11_000, skew_ms=1_000)
    assert rules.is_expired(None, now_wall_ms=0, skew_ms=1_000)
    assert rules.is_expired(0, now_wall_ms=1_000, skew_ms=1_000)


def test_claim_blocker_reasons() -> None:
    """Stopped, held (whatever its expiry) and back-off streams each name their own reason;
    only an unowned one past its expiry + skew is free."""
    now = 100_000
    assert rules.claim_blocker(item(desired_state="STOPPED"), now, 1000) is LossReason.STOPPED
    assert rules.claim_blocker(item(lease_owner="w", lease_expires_at_ms=now + 5), now,
                               1000) is LossReason.HELD
    assert rules.claim_blocker(item(lease_expires_at_ms=now + 5), now, 1000) is LossReason.BACKOFF
    assert rules.claim_blocker(item(lease_owner="w", lease_expires_at_ms=now - 2000), now,
                               1000) is LossReason.HELD
    assert rules.claim_blocker(item(lease_expires_at_ms=now - 1000), now, 1000) is None


def test_classify_loss() -> None:
    """Lost, stopped and deleted are told apart; a matching owner and epoch is still ours."""
    def raw(owner: str, epoch: int, state: str = "STARTED") -> dict[str, dict[str, str]]:
        return {ATTR.lease_owner: {"S": owner}, ATTR.epoch: {"N": str(epoch)},
                ATTR.desired_state: {"S": state}}

    assert rules.classify_loss(None, "w", 1) is LossReason.DELETED
    assert rules.classify_loss(raw("x", 1), "w", 1) is LossReason.LOST
    assert rules.classify_loss(raw("w", 2), "w", 1) is LossReason.LOST
    assert rules.classify_loss({ATTR.epoch: {"N": "1"}}, "w", 1) is LossReason.LOST
    assert rules.classify_loss(raw("w", 1, "STOPPED"), "w", 1) is LossReason.STOPPED
    assert rules.classify_loss(raw("w", 1), "w", 1) is None


def test_fence_deadline_and_renew_due() -> None:
    """The holder stops at send time + lease - skew - margin and renews every heartbeat."""
    t = LeaseTiming(lease_ms=20_000, heartbeat_ms=5_000, skew_ms=1_000, margin_ms=1_000)
    assert rules.fence_deadline_mono_ms(1_000, t) == 19_000
    assert rules.renew_due_mono_ms(1_000, t) == 6_000


@given(stored=st.one_of(st.none(), st.integers(-1, 10**6)),
       handled=st.one_of(st.none(), st.integers(-1, 10**6)))
def test_next_checkpoint_never_moves_backwards(stored: int | None, handled: int | None) -> None:
    """The checkpoint to write is always ahead of the stored one, or nothing is written."""
    nxt = rules.next_checkpoint(stored, handled)
    if nxt is not None:
        assert stored is None or nxt > stored
        assert nxt == handled
    else:
        assert handled is None or (stored is not None and handled <= stored)


@given(offset_holder=st.integers(-1000, 1000), offset_taker=st.integers(-1000, 1000))
def test_holder_stops_before_anyone_can_take_over(offset_holder: int, offset_taker: int) -> None:
    """With clocks within the skew of true time, the fence precedes every possible takeover.

    The fence counts from when the renewal was *sent* (however late it lands or its answer
    comes back), and the expiry is written from the holder's clock at that moment. Without the
    margin the worst pair of offsets (holder slow, taker fast) would meet: the test fails then.
    """
    t = LeaseTiming(lease_ms=20_000, heartbeat_ms=5_000, skew_ms=1_000, margin_ms=1_000)
    sent_true = 50_000
    expires = sent_true + offset_holder + t.lease_ms  # written from the holder's wall clock
    holder_stops_true = rules.fence_deadline_mono_ms(sent_true, t)
    # Earliest true time at which the taker's clock says the lease is expired.
    takeover_true = expires + t.skew_ms - offset_taker
    assert holder_stops_true < takeover_true


def test_no_margin_is_unsafe_at_the_worst_offsets() -> None:
    """The property above is not true by construction: a zero margin breaks it."""
    t = LeaseTiming(lease_ms=20_000, heartbeat_ms=5_000, skew_ms=1_000, margin_ms=0)
    expires = 50_000 - 1_000 + t.lease_ms
    assert rules.fence_deadline_mono_ms(50_000, t) >= expires + t.skew_ms - 1_000


@given(st.integers(0, 2**40), st.integers(0, 60_000), st.integers(-100_000, 100_000))
def test_claimable_at_is_where_expiry_ends(expires: int, skew: int, offset: int) -> None:
    """A lease is expired for a challenger exactly from ``claimable_at_ms`` on."""
    now = rules.claimable_at_ms(expires, skew) + offset
    assert rules.is_expired(expires, now, skew) == (offset >= 0)


def test_a_release_has_landed_with_no_owner_or_with_the_successor_it_named() -> None:
    """No item, no owner, or the named successor holding it: landed; the releasing owner at
    its epoch: still ours; anyone else, or ours at another epoch: lost."""
    found = rules.ReleaseFound
    owned = {ATTR.lease_owner: {"S": "w2"}, ATTR.epoch: {"N": "7"}}
    assert rules.release_found(None, "w1", 7, None) is found.LANDED
    assert rules.release_found({ATTR.epoch: {"N": "7"}}, "w1", 7, None) is found.LANDED
    assert rules.release_found(owned, "w1", 7, "w2") is found.LANDED
    assert rules.release_found(owned, "w1", 7, "w3") is found.LOST
    assert rules.release_found(owned, "w1", 7, None) is found.LOST
    assert rules.release_found(owned, "w2", 7, None) is found.STILL_OURS
    assert rules.release_found(owned, "w2", 6, None) is found.LOST
    assert rules.release_found(owned, "w2", 7, "w2") is found.STILL_OURS  # named itself


def test_a_release_finding_the_item_written_over_has_not_landed() -> None:
    """No owner and our epoch gone or lowered (an app's PutItem of the whole item): lost,
    so its holder gives it back with its checkpoint (taken as landed, the checkpoint the
    write removed stayed removed); the epoch kept (our own release): landed."""
    found = rules.ReleaseFound
    assert rules.release_found({ATTR.desired_state: {"S": "STARTED"}}, "w1", 7,
                               None) is found.LOST
    assert rules.release_found({ATTR.epoch: {"N": "6"}}, "w1", 7, None) is found.LOST
    assert rules.release_found({ATTR.epoch: {"N": "7"}}, "w1", 7, None) is found.LANDED


def test_held_by_needs_the_owner_and_the_epoch() -> None:
    """Still held: the same owner under the same epoch."""
    item = {ATTR.lease_owner: {"S": "w1"}, ATTR.epoch: {"N": "7"}}
    assert rules.held_by(item, "w1", 7)
    assert not rules.held_by(item, "w1", 8)
    assert not rules.held_by(item, "w2", 7)
    assert not rules.held_by({}, "w1", 7)


def test_next_epoch_is_above_every_stored_epoch_and_never_below_the_clock() -> None:
    """The acquire's and the transfer's one epoch rule: max(stored + 1, now)."""
    assert rules.next_epoch(1_000) == 1_000
    assert rules.next_epoch(1_000, 5) == 1_000
    assert rules.next_epoch(1_000, 999) == 1_000
    assert rules.next_epoch(1_000, 1_000) == 1_001
    assert rules.next_epoch(1_000, 3, 2_000, 7) == 2_001


@pytest.mark.parametrize("bad", [
    {"heartbeat_ms": 0}, {"heartbeat_ms": -1}, {"skew_ms": -1}, {"margin_ms": -1}])
def test_timing_rejects_each_bad_value_alone(bad: dict[str, int]) -> None:
    """A zero heartbeat, a negative skew or a negative margin is refused on its own, even in
    a lease the heartbeat fits."""
    kw = {"lease_ms": 4_000, "heartbeat_ms": 1_000, "skew_ms": 250, "margin_ms": 400, **bad}
    with pytest.raises(ConfigError, match="positive"):
        LeaseTiming(**kw)


def test_timing_accepts_its_bounds() -> None:
    """Two heartbeats exactly filling the usable window, zero skew and margin, and a 1 ms
    heartbeat are all valid timings."""
    exact = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_000, skew_ms=1_000, margin_ms=1_000)
    assert exact.usable_ms == 2 * exact.heartbeat_ms
    assert LeaseTiming(lease_ms=2_000, heartbeat_ms=1_000, skew_ms=0, margin_ms=0).usable_ms == (
        2_000)
    assert LeaseTiming(lease_ms=100, heartbeat_ms=1, skew_ms=0, margin_ms=0).heartbeat_ms == 1


def test_timing_cannot_be_changed_after_its_checks() -> None:
    """A LeaseTiming is frozen: no field can be set past the validation of ``__post_init__``."""
    t = LeaseTiming()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.heartbeat_ms = 10_000  # type: ignore[misc]


def test_default_margin_is_whole_milliseconds() -> None:
    """The default margin is a tenth of the lease rounded down to whole ms, at most 1 s."""
    assert rules.default_margin_ms(4_005) == 400
    assert isinstance(rules.default_margin_ms(4_005), int)
    assert rules.default_margin_ms(10_010) == 1_000


def test_a_handoffs_hold_blocks_everyone_but_the_successor_it_names() -> None:
    """An unowned stream held for a named successor until its expiry: that successor may take
    it now; any other claimer, or one not named, is in back-off; a stop still blocks it."""
    now = 100_000
    held = item(lease_expires_at_ms=now + rules.HANDOFF_HOLD_MS, successor="w2")
    assert rules.claim_blocker(held, now, 1000, claimer="w2") is None
    assert rules.claim_blocker(held, now, 1000, claimer="w3") is LossReason.BACKOFF
    assert rules.claim_blocker(held, now, 1000) is LossReason.BACKOFF
    stopped = item(desired_state="STOPPED", lease_expires_at_ms=now + 5, successor="w2")
    assert rules.claim_blocker(stopped, now, 1000, claimer="w2") is LossReason.STOPPED


def test_another_owner_at_a_lower_epoch_is_lost_not_written_over() -> None:
    """Written over needs no owner and our epoch gone or lowered; another owner, whatever its
    epoch, took the lease: LOST (its holder must not take it back as OVERWRITTEN)."""
    other = {ATTR.lease_owner: {"S": "x"}, ATTR.epoch: {"N": "6"},
             ATTR.desired_state: {"S": "STARTED"}}
    assert not rules.written_over(other, 7)
    assert rules.classify_loss(other, "w", 7) is LossReason.LOST
    ownerless = {ATTR.epoch: {"N": "6"}, ATTR.desired_state: {"S": "STARTED"}}
    assert rules.classify_loss(ownerless, "w", 7) is LossReason.OVERWRITTEN


def test_the_throttled_heartbeat_halves_only_where_the_outage_window_is_short() -> None:
    """usable - 1.5 x heartbeat below OUTAGE_TOLERANCE_MS (2 s): half the period (whole ms);
    at or above it: the period kept."""
    assert rules.throttled_heartbeat_ms(LeaseTiming()) == 500  # 3,350 - 1,500 = 1,850
    at = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_000, skew_ms=250, margin_ms=250)
    assert rules.throttled_heartbeat_ms(at) == 1_000  # 3,500 - 1,500 = 2,000: kept
    below = LeaseTiming(lease_ms=3_999, heartbeat_ms=1_000, skew_ms=250, margin_ms=250)
    assert rules.throttled_heartbeat_ms(below) == 500  # 1,999: halved
    odd_at = LeaseTiming(lease_ms=4_001, heartbeat_ms=1_001, skew_ms=250, margin_ms=250)
    assert rules.throttled_heartbeat_ms(odd_at) == 1_001  # 3,501 - 1,501 = 2,000: kept
    odd_below = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_001, skew_ms=250, margin_ms=250)
    assert rules.throttled_heartbeat_ms(odd_below) == 500  # 1,999: 1,001 // 2


def test_the_tolerated_outage_is_the_window_less_a_periods_age_and_a_retry_pause() -> None:
    """usable - the last renewal's age (the throttled period after refusals, else a whole
    one) - half a period for the retry pause, in whole ms."""
    t = LeaseTiming()  # usable 3,350, heartbeat 1,000, throttled 500
    assert rules.tolerated_outage_ms(t, after_refusals=False) == 3_350 - 1_000 - 500
    assert rules.tolerated_outage_ms(t, after_refusals=True) == 3_350 - 500 - 500
    odd = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_001, skew_ms=250, margin_ms=250)
    assert rules.tolerated_outage_ms(odd, after_refusals=False) == 3_500 - 1_001 - 500


@pytest.mark.parametrize(("checkpoint_ms", "slices"), [
    (0, 1), (3_999, 1), (4_000, 2), (5_999, 2), (20_000, 10), (60_000, 10)])
def test_a_checkpoint_round_is_cut_into_2_s_slices_one_to_ten(checkpoint_ms: int,
                                                             slices: int) -> None:
    """One slice per whole 2 s of the period: at least one (periods under 4 s), at most ten."""
    assert rules.checkpoint_slices(checkpoint_ms) == slices


def test_a_streams_checkpoint_slice_is_stable_in_range_and_spread() -> None:
    """A stream's slice is in 0..slices-1, the same on every call (crc32, not the salted
    ``hash()``), and the slices are all used."""
    ids = [f"conn-{i}" for i in range(200)]
    got = [rules.checkpoint_slice(c, 10) for c in ids]
    assert set(got) == set(range(10))
    assert got == [rules.checkpoint_slice(c, 10) for c in ids]
    assert {rules.checkpoint_slice(c, 1) for c in ids} == {0}
    assert rules.checkpoint_slice("a", 10) == 7  # crc32(b"a") = 3904355907
