"""The rebalancing decision rule (``holdfast.core.balance``): shares, hysteresis, motion, sheds.

Pure functions, so most of these are hypothesis properties over random fleets; the convergence
test simulates a count-mode fleet (every stream weight 1) round by round, the sweeper's plan
then the workers' sheds and claims, to check that the rule settles, stays settled, and moves
no more than it must.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from holdfast.core.balance import (
    BalancePolicy,
    HeldView,
    Member,
    Plan,
    Target,
    fair_shares,
    pick_sheds,
    plan,
    split_moves,
)

EPS = 1e-6
BIG = 10**6  # a capacity that never binds
FAST = settings(max_examples=100)
SIM = settings(max_examples=100)


# -- strategies ------------------------------------------------------------------------------
@st.composite
def count_fleets(draw: st.DrawFn, *, draining: bool = True, min_size: int = 1,
                 max_size: int = 12) -> list[Member]:
    """Count mode (load == held): loads 0-200, some fresh members at 0, capacities that never
    bind or bind (never below what the member holds now), some members draining."""
    n = draw(st.integers(min_value=min_size, max_value=max_size))
    out = []
    for i in range(n):
        load = draw(st.sampled_from([0]) | st.integers(min_value=0, max_value=200))
        cap = draw(st.sampled_from([BIG]) | st.integers(min_value=max(1, load), max_value=300))
        drains = draining and draw(st.integers(min_value=0, max_value=9)) == 0
        out.append(Member(f"w{i:02d}", float(load), load, cap, drains))
    return out


@st.composite
def weighted_fleets(draw: st.DrawFn) -> list[Member]:
    """Non-unit weights: each member holds ``held`` streams of load up to 10 each."""
    n = draw(st.integers(min_value=1, max_value=12))
    out = []
    for i in range(n):
        held = draw(st.integers(min_value=0, max_value=150))
        mean = draw(st.floats(min_value=0.1, max_value=10.0))
        cap = draw(st.sampled_from([BIG]) | st.integers(min_value=max(1, held),
                                                        max_value=300))
        out.append(Member(f"w{i:02d}", held * mean, held, cap,
                          draw(st.integers(min_value=0, max_value=9)) == 0))
    return out


policies = st.builds(
    BalancePolicy,
    band_fraction=st.floats(min_value=0.0, max_value=0.5),
    band_min=st.floats(min_value=0.0, max_value=5.0),
    motion_fraction=st.floats(min_value=0.0, max_value=0.5),
    motion_min=st.integers(min_value=0, max_value=5),
)


def mean_weight(members: list[Member]) -> float:
    streams = sum(m.held for m in members)
    return sum(m.load for m in members) / streams if streams else 1.0


def in_band(m: Member, share: float, policy: BalancePolicy) -> bool:
    return not (m.draining and m.load > EPS) and abs(m.load - share) <= policy.band(share) + EPS


# -- fair_shares -----------------------------------------------------------------------------
@FAST
@given(count_fleets(), st.integers(min_value=0, max_value=300))
def test_count_shares_are_whole_capped_and_add_up(members: list[Member], unowned: int) -> None:
    """Unit weights: whole shares, none above capacity, draining 0, summing to the load when
    the open capacity allows it (else every open member is at its capacity)."""
    total = sum(m.load for m in members) + unowned
    shares = fair_shares(members, total)
    assert set(shares) == {m.owner for m in members}
    for m in members:
        s = shares[m.owner]
        assert s == int(s) and 0 <= s <= m.capacity
        if m.draining:
            assert s == 0
    room = sum(m.capacity for m in members if not m.draining)
    if room >= total:
        assert sum(shares.values()) == total
    else:
        assert all(shares[m.owner] == m.capacity for m in members if not m.draining)


@FAST
@given(count_fleets(draining=False), st.integers(min_value=0, max_value=300))
def test_equal_members_differ_by_at_most_one(members: list[Member], unowned: int) -> None:
    """Members alike in capacity get shares at most one stream apart, whatever they hold."""
    shares = fair_shares(members, sum(m.load for m in members) + unowned)
    by_cap: dict[int, list[float]] = {}
    for m in members:
        by_cap.setdefault(m.capacity, []).append(shares[m.owner])
    for group in by_cap.values():
        assert max(group) - min(group) <= 1


def test_water_filling_caps_the_small_and_shares_the_rest() -> None:
    """A member whose capacity is below the level gets its capacity; the rest is even."""
    members = [Member("a", 0, 0, 5), Member("b", 0, 0, BIG), Member("c", 90, 90, BIG)]
    assert fair_shares(members, 95) == {"a": 5, "b": 45, "c": 45}


def test_rounding_goes_to_who_holds_more() -> None:
    """The odd stream of an uneven split goes to the member already holding more (no move)."""
    members = [Member("a", 3, 3, BIG), Member("b", 4, 4, BIG), Member("c", 3, 3, BIG)]
    assert fair_shares(members, 10) == {"a": 3, "b": 4, "c": 3}


@FAST
@given(weighted_fleets(), st.floats(min_value=0.0, max_value=500.0))
def test_weighted_shares_are_capped_and_add_up(members: list[Member], unowned: float) -> None:
    """Weights: shares never exceed capacity x mean weight; draining gets 0; they add up."""
    total = sum(m.load for m in members) + unowned
    shares = fair_shares(members, total)
    w = mean_weight(members)
    for m in members:
        assert -EPS <= shares[m.owner] <= m.capacity * w * (1 + EPS) + EPS
        if m.draining:
            assert shares[m.owner] == 0
    room = sum(m.capacity * w for m in members if not m.draining)
    if room >= total * (1 + 1e-6):
        assert math.isclose(sum(shares.values()), total, rel_tol=1e-6, abs_tol=1e-6)


# -- plan: hysteresis ------------------------------------------------------------------------
@FAST
@given(count_fleets() | weighted_fleets(), st.integers(min_value=0, max_value=100), policies)
def test_balanced_exactly_when_every_member_is_in_band(members: list[Member], unowned: int,
                                                      policy: BalancePolicy) -> None:
    """Balanced (and no targets) iff every member is within band(share) of its share and no
    draining member holds anything; otherwise one target per member, aimed at its share."""
    p = plan(members, unowned=unowned, in_motion=unowned, policy=policy)
    expect = all(in_band(m, p.shares[m.owner], policy) for m in members)
    assert p.balanced is expect
    if p.balanced:
        assert p.targets == ()
    else:
        assert [t.owner for t in p.targets] == [m.owner for m in members]
        for t in p.targets:
            assert t.share == p.shares[t.owner]


@FAST
@given(st.integers(min_value=1, max_value=12), st.integers(min_value=0, max_value=2000),
       st.data())
def test_no_moves_when_balanced(n: int, base: int, data: st.DataObject) -> None:
    """Loads within ±4 % of each other (noise of a stream or two): balanced, no targets."""
    k = base // 25  # 2k <= 10 % of (base - k): every load is in band of every share
    loads = data.draw(st.lists(st.integers(min_value=max(0, base - k), max_value=base + k),
                               min_size=n, max_size=n))
    members = [Member(f"w{i}", float(x), x, BIG) for i, x in enumerate(loads)]
    p = plan(members)
    assert p.balanced and p.targets == ()


@FAST
@given(st.integers(min_value=1, max_value=12), st.floats(min_value=1.0, max_value=5000.0),
       st.data())
def test_no_moves_when_balanced_with_weights(n: int, level: float, data: st.DataObject) -> None:
    """Non-unit weights within ±4 % of each other: balanced, no targets."""
    noise = data.draw(st.lists(st.floats(min_value=-0.04, max_value=0.04), min_size=n,
                               max_size=n))
    members = [Member(f"w{i}", level * (1 + e), 100, BIG) for i, e in enumerate(noise)]
    p = plan(members)
    assert p.balanced and p.targets == ()


def test_one_stream_of_noise_moves_nothing() -> None:
    """5 vs 4 streams (within band_min) is balanced; 8 vs 2 is not."""
    assert plan([Member("a", 5, 5, BIG), Member("b", 4, 4, BIG)]).balanced
    p = plan([Member("a", 8, 8, BIG), Member("b", 2, 2, BIG)])
    assert not p.balanced and p.excess == 3
    assert p.targets == (Target("a", 5, 5, 1), Target("b", 5, 6, 0))


def test_a_draining_member_with_one_stream_is_out_of_balance() -> None:
    """Draining is never in band while it holds anything, even one stream (within band_min)."""
    p = plan([Member("a", 10, 10, BIG), Member("b", 10, 10, BIG),
              Member("d", 1, 1, BIG, draining=True)])
    assert not p.balanced and p.shares == {"a": 11, "b": 10, "d": 0}
    assert Target("d", 0, 0, 1) in p.targets
    assert plan([Member("a", 10, 10, BIG), Member("d", 0, 0, BIG, draining=True)]).balanced


@FAST
@given(count_fleets(draining=False, max_size=11), st.integers(min_value=5, max_value=200))
def test_a_fleet_with_a_fresh_member_is_not_balanced(members: list[Member], extra: int) -> None:
    """A member far out of band (a new one at 0 beside a busy fleet) unbalances the plan."""
    loaded = [Member(m.owner, m.load + extra * 2, m.held + extra * 2, BIG) for m in members]
    p = plan([*loaded, Member("new", 0, 0, BIG)])
    assert p.shares["new"] > BalancePolicy().band(p.shares["new"])
    assert not p.balanced and p.targets


# -- plan: bounded motion --------------------------------------------------------------------
@FAST
@given(count_fleets() | weighted_fleets(), st.integers(min_value=0, max_value=300),
       st.integers(min_value=0, max_value=300), policies)
def test_motion_is_bounded(members: list[Member], unowned: int, in_motion: int,
                           policy: BalancePolicy) -> None:
    """Sheds at once never exceed the motion bound less what is already moving, and no member
    is told to shed more than it must (ceil(load - share)), nor anything at or below share."""
    p = plan(members, unowned=unowned, in_motion=in_motion, policy=policy)
    streams = sum(m.held for m in members) + unowned
    room = max(0, policy.motion_bound(streams) - in_motion)
    assert p.budget == room
    assert sum(t.shed_at_once for t in p.targets) <= room
    load = {m.owner: m.load for m in members}
    for t in p.targets:
        assert 0 <= t.shed_at_once <= max(0, math.ceil(load[t.owner] - t.share))


@FAST
@given(count_fleets(), st.integers(min_value=0, max_value=300))
def test_the_budget_is_spent_when_there_is_need(members: list[Member], unowned: int) -> None:
    """Out of balance, the budget goes out in full (or all that must move does)."""
    p = plan(members, unowned=unowned, in_motion=0)
    if not p.balanced:
        need = sum(max(0, math.ceil(m.load - p.shares[m.owner])) for m in members)
        assert sum(t.shed_at_once for t in p.targets) == min(p.budget, need)


def test_failover_in_flight_leaves_no_budget() -> None:
    """Unowned streams count as in motion: a mass failover blocks moves until it is claimed."""
    members = [Member("a", 90, 90, BIG), Member("b", 0, 0, BIG)]
    p = plan(members, unowned=20, in_motion=20)
    assert not p.balanced and p.budget == 0
    assert all(t.shed_at_once == 0 for t in p.targets)


# -- plan: no claim-back ---------------------------------------------------------------------
@FAST
@given(count_fleets(), st.integers(min_value=0, max_value=100))
def test_an_over_share_member_cannot_claim_back(members: list[Member], unowned: int) -> None:
    """Over its share: ceiling == share, and shedding shed_at_once leaves it at or above the
    ceiling, so what it shed cannot come straight back; under it: ceiling share + band."""
    policy = BalancePolicy()
    p = plan(members, unowned=unowned, in_motion=unowned)
    load = {m.owner: m.load for m in members}
    draining = {m.owner for m in members if m.draining}
    for t in p.targets:
        if load[t.owner] > t.share or t.owner in draining:
            assert t.ceiling == t.share
            assert load[t.owner] - t.shed_at_once >= t.ceiling
        else:
            assert t.ceiling == t.share + policy.band(t.share)


# -- convergence (count mode) ----------------------------------------------------------------
@dataclass
class Sim:
    """A count-mode fleet: ``load`` per member, ``unowned`` streams, what happened."""

    members: list[Member]
    unowned: int
    load: dict[str, int] = field(default_factory=dict)
    moved: int = 0
    plans: list[Plan] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.load = {m.owner: m.held for m in self.members}

    def fleet(self) -> list[Member]:
        return [Member(m.owner, float(self.load[m.owner]), self.load[m.owner], m.capacity,
                       m.draining) for m in self.members]

    def round(self) -> tuple[Plan, int]:
        """One decision, then each worker's sheds, then the claims; returns (plan, shed)."""
        p = plan(self.fleet(), unowned=self.unowned, in_motion=self.unowned)
        self.plans.append(p)
        targets = {t.owner: t for t in p.targets}
        shedders: set[str] = set()
        shed = 0
        for t in p.targets:
            k = min(t.shed_at_once, max(0, math.ceil(self.load[t.owner] - t.share)))
            if k:
                shedders.add(t.owner)
                self.load[t.owner] -= k
                self.unowned += k
                shed += k
        self.moved += shed
        while self.unowned:
            eligible = [m.owner for m in self.members if not m.draining
                        and self.load[m.owner] < m.capacity
                        and (m.owner not in targets
                             or self.load[m.owner] < targets[m.owner].ceiling)]
            if not eligible:
                break
            taker = min(eligible, key=lambda o: (self.load[o], o))  # the least loaded polls
            assert taker not in shedders, "a shed stream went back to its shedder"
            self.load[taker] += 1
            self.unowned -= 1
        return p, shed


@SIM
@given(count_fleets(), st.sampled_from([0]) | st.integers(min_value=0, max_value=150))
def test_count_mode_converges_and_stays_quiet(members: list[Member], unowned: int) -> None:
    """From any fleet that can hold every stream, repeated plans settle: balanced within
    1 + ceil(excess / motion_bound) + 2 rounds (round 1 may have no budget while the initially
    unowned streams count as in motion; after it every round sheds min(budget, need) and all
    of it is claimed; one more round to see the balance, and 2 spare), then stay balanced
    with no moves; streams shed in total <= the first plan's excess (slack 0: shed streams go
    only to members below their ceiling, the least loaded first, and the rounding gives ties
    to whoever holds more, so no stream moves twice); nothing is ever lost."""
    if all(m.draining for m in members):  # someone must be able to hold the streams
        members = [Member(m.owner, m.load, m.held, m.capacity) for m in members]
    total = sum(m.held for m in members) + unowned
    if sum(m.capacity for m in members if not m.draining) < total:  # the fleet can hold all
        members = [Member(m.owner, m.load, m.held, BIG, m.draining) for m in members]
    sim = Sim(members, unowned)
    first = plan(sim.fleet(), unowned=unowned, in_motion=unowned)
    bound = BalancePolicy().motion_bound(total)
    max_rounds = 1 + math.ceil(first.excess / max(1, bound)) + 2
    rounds = 0
    while not sim.round()[0].balanced:
        rounds += 1
        assert rounds <= max_rounds, f"not balanced after {rounds} rounds"
        assert sum(sim.load.values()) + sim.unowned == total
    for _ in range(5):  # and it stays that way, with nothing moving
        before = dict(sim.load)
        p, shed = sim.round()
        assert p.balanced and p.targets == () and shed == 0
        assert sim.unowned == 0 and sim.load == before
    assert sum(sim.load.values()) + sim.unowned == total
    assert sim.moved <= first.excess
    for m in members:
        if m.draining:
            assert sim.load[m.owner] == 0


def test_a_new_member_gets_its_share_in_one_round_of_moves() -> None:
    """Ten members of 100 and a fresh one: the 90 streams above the shares (the odd ones stay
    with those holding them) fit the 10 % motion bound, so one round moves exactly them."""
    sim = Sim([*[Member(f"w{i}", 100, 100, BIG) for i in range(10)],
               Member("new", 0, 0, BIG)], 0)
    p, shed = sim.round()
    assert not p.balanced and p.excess == 90 and p.budget == 100 and shed == 90
    assert sim.round()[0].balanced
    assert sim.moved == 90 and sim.load["new"] == 90
    assert all(sim.load[f"w{i}"] == 91 for i in range(10))


# -- pick_sheds ------------------------------------------------------------------------------
NOW = 1_700_000_000_000
COOLDOWN = 60_000


@st.composite
def holdings(draw: st.DrawFn, *, unit: bool) -> list[HeldView]:
    n = draw(st.integers(min_value=0, max_value=40))
    weight = st.just(1.0) if unit else st.floats(min_value=0.1, max_value=10.0)
    age = st.integers(min_value=0, max_value=3 * COOLDOWN)
    return [HeldView(f"c{i:03d}", draw(weight), NOW - draw(age)) for i in range(n)]


def order_key(h: HeldView) -> tuple[int, str]:
    return (h.changed_at_ms, h.conn_id)


@FAST
@given(st.booleans().flatmap(lambda unit: holdings(unit=unit)),
       st.floats(min_value=0.0, max_value=300.0), st.integers(min_value=0, max_value=20),
       st.integers(min_value=0, max_value=20), st.booleans())
def test_pick_sheds_respects_room_cooldown_order_and_share(
        held: list[HeldView], share: float, at_once: int, shedding: int,
        draining: bool) -> None:
    """At most shed_at_once - shedding; none in its cool-down unless draining; longest-held
    first; never further below share than half the weight of a stream it sheds."""
    picked = pick_sheds(held, share=share, shed_at_once=at_once, shedding=shedding, now_ms=NOW,
                        cooldown_ms=COOLDOWN, draining=draining)
    by_id = {h.conn_id: h for h in held}
    room = max(0, at_once - shedding)
    assert len(picked) <= room and len(set(picked)) == len(picked) and set(picked) <= set(by_id)
    views = [by_id[c] for c in picked]
    assert views == sorted(views, key=order_key)
    if draining:
        assert len(picked) == min(room, len(held))
        assert picked == [h.conn_id for h in sorted(held, key=order_key)][:len(picked)]
        return
    assert all(NOW - h.changed_at_ms >= COOLDOWN for h in views)
    load = sum(h.weight for h in held)
    left = load - sum(h.weight for h in views)
    if views:
        assert left >= share - max(h.weight for h in views) / 2 - EPS
    if load <= share:
        assert picked == []


@FAST
@given(holdings(unit=True), st.integers(min_value=0, max_value=60),
       st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=5))
def test_unit_sheds_are_the_oldest_eligible_and_enough(held: list[HeldView], share: int,
                                                       at_once: int, shedding: int) -> None:
    """Unit weights: exactly the oldest streams out of cool-down, as many as the room, the
    eligible ones and the distance to the share allow."""
    picked = pick_sheds(held, share=share, shed_at_once=at_once, shedding=shedding, now_ms=NOW,
                        cooldown_ms=COOLDOWN)
    eligible = [h.conn_id for h in sorted(held, key=order_key)
                if NOW - h.changed_at_ms >= COOLDOWN]
    want = min(max(0, at_once - shedding), len(eligible), max(0, len(held) - share))
    assert picked == eligible[:want]


def test_a_heavy_stream_that_would_overshoot_is_skipped() -> None:
    """Down to share 10 from 12: the 8-weight oldest stream would overshoot, two 1s go."""
    held = [HeldView("heavy", 8.0, 0), HeldView("a", 1.0, 1), HeldView("b", 1.0, 2),
            HeldView("c", 2.0, 3)]
    assert pick_sheds(held, share=10.0, shed_at_once=5, shedding=0, now_ms=NOW,
                      cooldown_ms=COOLDOWN) == ["a", "b"]


def test_draining_ignores_the_cooldown_but_not_the_room() -> None:
    """Draining sheds fresh streams too, oldest first, up to shed_at_once - shedding."""
    held = [HeldView(f"c{i}", 1.0, NOW - i) for i in range(6)]
    assert pick_sheds(held, share=6.0, shed_at_once=4, shedding=1, now_ms=NOW,
                      cooldown_ms=COOLDOWN, draining=True) == ["c5", "c4", "c3"]
    assert pick_sheds(held, share=0.0, shed_at_once=4, shedding=4, now_ms=NOW,
                      cooldown_ms=COOLDOWN, draining=True) == []


def test_shares_are_rounded_only_when_total_loads_and_capacities_are_whole() -> None:
    """Whole shares need a whole total, whole loads and whole capacities (x mean weight);
    otherwise each open member gets the exact water-filling level, and the shares add up."""
    # Whole loads and total, mean weight 5/3: capacities not whole.
    weighted = [Member("a", 3, 2, BIG), Member("b", 3, 2, BIG), Member("c", 4, 2, BIG)]
    assert all(math.isclose(s, 10 / 3) for s in fair_shares(weighted, 10).values())
    # Whole total and capacities (mean weight 2), loads not whole.
    halves = [Member("a", 2.5, 1, BIG), Member("b", 2.5, 1, BIG), Member("c", 5, 3, BIG)]
    assert all(math.isclose(s, 10 / 3) for s in fair_shares(halves, 10).values())
    # Whole loads and capacities, a total that is not whole.
    assert fair_shares([Member("a", 1, 1, BIG), Member("b", 1, 1, BIG)], 2.5) == {
        "a": 1.25, "b": 1.25}


def test_rounding_goes_to_who_holds_more_even_at_its_capacity() -> None:
    """The odd stream goes to the member holding more though its share rounds up to exactly
    its capacity: no move for the rounding."""
    members = [Member("a", 5, 5, 5), Member("b", 5, 5, BIG), Member("c", 4, 4, BIG)]
    assert fair_shares(members, 14) == {"a": 5, "b": 5, "c": 4}


def test_moves_are_shared_in_proportion_to_what_each_must_shed() -> None:
    """Two members equally over their shares split the budget evenly, neither takes it all."""
    assert split_moves(10, {"a": 10.0, "b": 10.0}) == {"a": 5, "b": 5}
    assert split_moves(9, {"a": 12.0, "b": 6.0}) == {"a": 6, "b": 3}


def test_a_short_budget_gives_one_move_each_to_the_most_over_first() -> None:
    """A budget too short for everyone goes in order of need, the most over first, each
    member its proportional part but at least one move, until none is left."""
    assert split_moves(2, {"a": 10.0, "b": 1.0, "c": 1.0}) == {"a": 1, "b": 1}


def test_what_rounding_leaves_of_the_budget_goes_to_the_most_over() -> None:
    """Moves the proportional split rounded away go to the member most over its share."""
    assert split_moves(4, {"a": 3.0, "b": 2.0, "c": 2.0}) == {"a": 2, "b": 1, "c": 1}


def test_a_draining_worker_sheds_down_to_nothing() -> None:
    """Draining aims at zero whatever the share: with room for all, its last stream goes too."""
    held = [HeldView(f"c{i}", 1.0, NOW - i) for i in range(3)]
    assert pick_sheds(held, share=5.0, shed_at_once=10, shedding=0, now_ms=NOW,
                      cooldown_ms=COOLDOWN, draining=True) == ["c2", "c1", "c0"]


def test_a_stream_exactly_a_cooldown_old_may_be_shed() -> None:
    """The cool-down covers streams that changed owner less than ``cooldown_ms`` ago: one
    exactly that old is shed, one a millisecond younger is not."""
    held = [HeldView("old", 1.0, NOW - COOLDOWN), HeldView("young", 1.0, NOW - COOLDOWN + 1)]
    assert pick_sheds(held, share=0.0, shed_at_once=5, shedding=0, now_ms=NOW,
                      cooldown_ms=COOLDOWN) == ["old"]


def test_a_stream_leaving_us_exactly_half_its_weight_below_share_is_shed() -> None:
    """Down to share 10 from 12, a 4-weight stream leaves 8: exactly half its weight below
    the share, so it goes; the 8-weight one that would leave 4 is kept."""
    held = [HeldView("four", 4.0, 0), HeldView("eight", 8.0, 1)]
    assert pick_sheds(held, share=10.0, shed_at_once=5, shedding=0, now_ms=NOW,
                      cooldown_ms=COOLDOWN) == ["four"]
