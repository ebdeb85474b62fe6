"""The one placement authority: successors for every move, and deploys that move each stream
once, onto a new-version worker (pure: no clock, no I/O)."""

from __future__ import annotations

from holdfast.core.balance import Member, Plan
from holdfast.core.directives import Directive
from holdfast.core.placement import MAX_SUCCESSORS, fill, new_version, place


def _m(owner: str, held: int, version: str = "v1", started: int = 0, cap: int = 100,
       draining: bool = False) -> Member:
    return Member(owner, float(held), held, cap, draining, version, started)


def _target(decision: Plan, owner: str) -> tuple[float, float, int, dict[str, int]]:
    t = next(t for t in decision.targets if t.owner == owner)
    return t.share, t.ceiling, t.shed_at_once, dict(t.successors)


def test_one_version_live_is_no_deploy() -> None:
    """All on one version (or none known): no deploy."""
    assert new_version([_m("a", 5), _m("b", 5, started=9)]) is None
    assert new_version([]) is None


def test_the_new_version_is_the_one_whose_first_worker_started_last() -> None:
    """An old worker restarted mid-deploy (started last of all) does not make v1 new."""
    members = [_m("a", 5, "v1", 0), _m("n", 0, "v2", 100), _m("b", 5, "v1", 200)]
    assert new_version(members) == "v2"


def test_fill_gives_the_least_loaded_first_and_keeps_the_caps() -> None:
    """Water-filling: 5 streams onto loads 0 and 3 (cap 4) give 4 and 1; the loads follow."""
    loads = {"x": 0.0, "y": 3.0}
    assert fill(loads, {"x": 4.0, "y": 4.0}, 5) == (("x", 4), ("y", 1))
    assert loads == {"x": 4.0, "y": 4.0}
    assert fill(loads, {"x": 4.0, "y": 4.0}, 3) == ()


def test_fill_names_at_most_the_successors_a_directive_keeps() -> None:
    """100 streams over 50 empty receivers: 32 are named (the directive's reader keeps no
    more), and every stream goes to one of them."""
    loads = {f"w{i:02d}#a": 0.0 for i in range(50)}
    given = fill(loads, dict.fromkeys(loads, 100.0), 100)
    assert len(given) == MAX_SUCCESSORS and sum(n for _, n in given) == 100
    assert sum(loads.values()) == 100


def test_a_large_deploys_targets_read_back_as_written() -> None:
    """50 old workers of 100 streams and 50 new, empty: each old worker's list names every one
    of its streams within 32 successors, and reads back from the session item as written."""
    members = [_m(f"o{i:02d}#a", 100) for i in range(50)]
    members += [_m(f"n{i:02d}#b", 0, "v2", 10, cap=200) for i in range(50)]
    for t in place(members).targets:
        if t.owner.startswith("o"):
            assert len(t.successors) <= MAX_SUCCESSORS
            assert sum(n for _, n in t.successors) == 100
        directive = Directive(t.share, t.ceiling, t.shed_at_once, 10**6, 100, 1, t.successors)
        assert Directive.from_item(directive.attributes()) == directive


def test_during_a_deploy_nothing_sheds_and_old_workers_take_no_moves() -> None:
    """Old workers hold what they have (ceiling = load, shed 0) and name new successors; a
    new worker sheds nothing and may take moves up to its capacity."""
    members = [_m("o1", 20), _m("o2", 20), _m("n1", 0, "v2", 10, cap=50)]
    decision = place(members)
    assert decision.deploying == "v2" and not decision.balanced
    assert _target(decision, "o1") == (20, 20, 0, {"n1": 20})
    assert _target(decision, "o2") == (20, 20, 0, {"n1": 20})
    assert _target(decision, "n1")[1:3] == (50, 0)


def test_old_streams_never_go_to_an_old_worker_and_full_new_workers_name_nobody() -> None:
    """New capacity 15 for an old worker of 20: 15 are named, the rest go to whoever has
    room; no list names an old worker."""
    members = [_m("o1", 20), _m("o2", 20), _m("n1", 0, "v2", 10, cap=15)]
    decision = place(members)
    assert _target(decision, "o1")[3] == {"n1": 15} == _target(decision, "o2")[3]
    assert all(not o.startswith("o") for t in decision.targets for o, _ in t.successors)


def test_each_old_list_is_made_as_if_its_worker_stopped_next() -> None:
    """One-at-a-time: whichever old worker stops next, its streams go to the new worker that
    just started (least loaded), not half to the one that took the last old worker's."""
    members = [_m("o2", 20, started=2), _m("o3", 20, started=1), _m("n1", 20, "v2", 10),
               _m("n2", 0, "v2", 20)]
    decision = place(members)
    assert _target(decision, "o2")[3] == {"n2": 20} == _target(decision, "o3")[3]


def _simulate(members: list[Member], stop: str) -> tuple[list[Member], dict[str, int]]:
    """``stop`` stops: its streams go where the decider's successors say (one move each)."""
    decision = place(members)
    successors = dict(next(t for t in decision.targets if t.owner == stop).successors)
    assert sum(successors.values()) == next(m for m in members if m.owner == stop).held
    out = [Member(m.owner, m.load + successors.get(m.owner, 0), m.held + successors.get(
        m.owner, 0), m.capacity, m.draining, m.version, m.started_at_ms)
        for m in members if m.owner != stop]
    return out, successors


def test_a_one_at_a_time_deploy_moves_each_stream_once_and_ends_balanced() -> None:
    """Three old workers of 20, replaced one at a time: each old worker's streams go to the
    new worker started for it, none to an old worker, and the fleet ends at 20 each."""
    fleet = [_m("o1", 20), _m("o2", 20), _m("o3", 20)]
    for i, old in enumerate(("o1", "o2", "o3"), start=1):
        fleet.append(_m(f"n{i}", 0, "v2", 100 * i))
        fleet, given = _simulate(fleet, old)
        assert set(given) <= {"n1", "n2", "n3"}
    assert sorted(m.held for m in fleet) == [20, 20, 20]
    assert new_version(fleet) is None and place(fleet).balanced


def test_new_first_then_all_old_stopped_at_once_ends_balanced() -> None:
    """All new workers first, then the three old ones stop together using one decision's
    successors: each list spreads over the three, ties taking turns, 20 each."""
    fleet = [_m("o1", 20), _m("o2", 20), _m("o3", 20)] + [
        _m(f"n{i}", 0, "v2", 100 + i) for i in range(3)]
    decision = place(fleet)
    got: dict[str, int] = {}
    for t in decision.targets:
        if t.owner.startswith("o"):
            for owner, n in t.successors:
                got[owner] = got.get(owner, 0) + n
    assert got == {"n0": 20, "n1": 20, "n2": 20}


def test_a_draining_old_worker_sheds_to_new_workers_only() -> None:
    """Draining mid-deploy: share 0, sheds within the motion budget, successors new."""
    members = [_m("o1", 20, draining=True), _m("o2", 20), _m("n1", 0, "v2", 10)]
    share, ceiling, at_once, successors = _target(place(members), "o1")
    assert (share, ceiling) == (0, 0) and at_once >= 1 and successors == {"n1": 20}


def test_out_of_balance_the_shedders_name_the_members_below_their_share() -> None:
    """One version: a member above its share names the under-loaded ones for its excess."""
    members = [_m("a", 30), _m("b", 0), _m("c", 30)]
    decision = place(members)
    assert decision.deploying is None and not decision.balanced
    a, c = _target(decision, "a"), _target(decision, "c")
    assert a[2] > 0 and c[2] > 0
    assert a[3] == {"b": 10} and c[3] == {"b": 10}
    assert _target(decision, "b")[3] == {}


def test_a_draining_member_names_successors_when_the_motion_budget_is_spent() -> None:
    """A third of the streams unowned (a failover: the budget for moves spent), and a member
    draining: it sheds 0 "at once" by the budget, but its successors are named for all it
    holds (its worker drains anyway; before, its streams went to nobody by name)."""
    members = [_m("a", 20, draining=True), _m("b", 10), _m("c", 10)]
    decision = place(members, unowned=20, in_motion=20)
    assert decision.budget == 0 and not decision.balanced
    share, _, at_once, successors = _target(decision, "a")
    assert (share, at_once, sum(successors.values())) == (0.0, 0, 20)
    assert set(successors) == {"b", "c"}


def test_a_balanced_fleet_names_nobody() -> None:
    """Balanced, one version: no targets at all (nothing written)."""
    assert place([_m("a", 10), _m("b", 10)]).targets == ()


def test_successors_are_counted_in_streams_whatever_the_weights() -> None:
    """Streams of weight 100: a shedder's list names its excess in streams (10 each), not in
    load (1,000: a decision took seconds at weight 10,000, one unit at a time); during a
    deploy a new worker's room is its capacity less the streams it holds, not its load."""
    def heavy(owner: str, held: int, version: str = "v1", started: int = 0,
              cap: int = 100) -> Member:
        return Member(owner, 100.0 * held, held, cap, False, version, started)

    decision = place([heavy("a", 30), heavy("b", 0), heavy("c", 30)])
    assert _target(decision, "a")[3] == {"b": 10} == _target(decision, "c")[3]
    decision = place([heavy("o1", 20), heavy("n1", 10, "v2", 10, cap=15)])
    assert _target(decision, "o1")[3] == {"n1": 5}


def test_each_member_counts_its_load_in_its_own_streams() -> None:
    """Weights that differ between members: a draining member of 3 light streams names
    successors for its 3 (counted by the fleet's mean weight, 77, it named none, and its
    drain went to nobody), and a member of heavy streams no more than it holds."""
    members = [Member("a", 3.0, 3, 100, True), Member("b", 1000.0, 10, 100),
               Member("c", 0.0, 0, 100)]
    successors = _target(place(members), "a")[3]
    assert sum(successors.values()) == 3 and set(successors) == {"c"}
    members = [Member("a", 1000.0, 10, 100), Member("b", 0.0, 0, 100), Member("c", 0.0, 0, 100)]
    assert sum(_target(place(members), "a")[3].values()) <= 10
