"""The worker's side of rebalancing: the claim gate, shedding, cool-downs and draining."""

from __future__ import annotations

import asyncio

from holdfast.core.directives import Directive
from holdfast.core.model import Lease
from holdfast.worker.balancing import SHED, Balancing
from holdfast.worker.budget import ConnectBudget
from holdfast.worker.connection import Connection
from holdfast.worker.context import ConnectionContext
from holdfast.worker.held import HeldStream
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.successors import ASK_WAIT_MS

NOW = 1_000_000


class Clock:
    """Wall and monotonic ms, moved by hand."""

    def __init__(self) -> None:
        self.wall_ms, self.mono_ms = NOW, 0

    def wall(self) -> int:
        return self.wall_ms

    def mono(self) -> int:
        return self.mono_ms


def _ctx() -> ConnectionContext:
    return ConnectionContext(worker_id="w1", handler=None,  # type: ignore[arg-type]
                             protocol=None, metrics=WorkerMetrics())  # type: ignore[arg-type]


def _streams(n: int, *, moved_at_ms: int | None = None,
             weight: float = 1.0) -> dict[str, Connection]:
    out = {}
    for i in range(n):
        lease = Lease(f"c{i}", "w1#i", 1, 0, "ws://x", None, weight=weight,
                      moved_at_ms=moved_at_ms)
        held = HeldStream(lease, fence_mono_ms=10**9)
        held.started()
        out[lease.conn_id] = Connection(held, _ctx())
    return out


def _balancing(streams: dict[str, Connection], clock: Clock, **kw: object) -> Balancing:
    args: dict[str, object] = {"cooldown_ms": 60_000, "drain_at_once": 3,
                               "throttled": lambda: False}
    args.update(kw)
    return Balancing(streams, wall=clock.wall, mono=clock.mono, metrics=WorkerMetrics(),
                     **args)  # type: ignore[arg-type]


def _target(share: float, ceiling: float, at_once: int, *, until: int = NOW + 10_000,
            fleet: int = 0, issued: int = NOW) -> Directive:
    return Directive(share, ceiling, at_once, until, fleet, issued)


def _shed(streams: dict[str, Connection]) -> list[str]:
    return sorted(c for c, conn in streams.items() if conn.held.stop_reason == SHED)


def test_no_target_no_gate_and_nothing_shed() -> None:
    """Without a directive the worker claims up to its capacity and sheds nothing."""
    streams, clock = _streams(5), Clock()
    b = _balancing(streams, clock)
    assert b.room() is None and b.step() == [] and not b.refuses("c0")


def test_an_over_loaded_worker_sheds_to_its_share_a_few_at_a_time() -> None:
    """Share 6 of 10, 2 at once: two now, two more as those releases land, then stop."""
    streams, clock = _streams(10), Clock()
    b = _balancing(streams, clock)
    b.update(_target(6, 6, 2))
    assert len(b.step()) == 2 and b.step() == []  # two in flight: no more yet
    for conn_id in _shed(streams):
        del streams[conn_id]
        b.finished(conn_id)
    assert len(b.step()) == 2
    for conn_id in _shed(streams):
        del streams[conn_id]
    assert b.step() == [] and len(streams) == 6


def test_the_gate_shuts_at_the_ceiling_and_a_shed_stream_is_refused() -> None:
    """At or above the ceiling no claims; a stream we shed is refused, whatever the room."""
    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock)
    b.update(_target(3, 3, 1))
    assert b.room() == 0
    (gone,) = b.step()
    del streams[gone]
    b.update(_target(3, 5, 0))
    assert b.room() == 2 and b.refuses(gone)
    clock.mono_ms += 60_001
    assert not b.refuses(gone)


def test_a_lapsed_target_opens_the_gate_and_stops_shedding() -> None:
    """A decider that went quiet leaves a target that lapses: normal claiming again."""
    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock)
    b.update(_target(1, 1, 3, until=NOW + 5))
    clock.wall_ms += 10
    assert b.room() is None and b.step() == []


def test_streams_in_their_cool_down_are_not_moved() -> None:
    """A stream moved a moment ago (moved_at_ms) or just claimed by us stays put."""
    streams, clock = _streams(4, moved_at_ms=NOW - 1_000), Clock()
    b = _balancing(streams, clock)
    b.update(_target(0, 0, 4))
    assert b.step() == []
    clock.wall_ms += 60_000
    b.update(_target(0, 0, 4, until=clock.wall_ms + 10_000))
    b.claimed("c0")  # claimed by us now: its own cool-down starts
    assert sorted(b.step()) == ["c1", "c2", "c3"]


def test_draining_sheds_everything_and_claims_nothing() -> None:
    """Draining ignores the cool-down, sheds drain_at_once at a time and shuts the gate."""
    streams, clock = _streams(5, moved_at_ms=NOW), Clock()
    b = _balancing(streams, clock)
    b.update(draining=True, via="queue")
    assert b.room() == 0 and b.step() == []  # waiting for the decider's successors
    clock.mono_ms += ASK_WAIT_MS  # no answer: to whoever has room
    assert len(b.step()) == 3
    b.update(draining=False)
    assert b.room() is None


def test_a_drain_waits_for_the_deciders_successors_and_hands_its_streams_to_them() -> None:
    """A drain with no live target naming successors sheds nothing until the decider answers
    (at most ``ASK_WAIT_MS``: its streams deliver meanwhile), then to the successors named, as
    a stop does; an answer naming nobody (no worker has room) ends the wait. Shed at once, its
    streams went to whoever polled first."""
    streams, clock = _streams(5, moved_at_ms=NOW), Clock()
    b = _balancing(streams, clock)
    b.update(draining=True, via="queue")
    assert b.step() == []
    b.update(Directive(0, 0, 5, NOW + 10_000, 0, NOW, successors=(("w2#x", 5),)))
    picked = b.step()
    assert len(picked) == 5 and {streams[c].handoff_to for c in picked} == {"w2#x"}
    other = _balancing(_streams(5, moved_at_ms=NOW), clock)
    other.update(draining=True)
    other.update(Directive(0, 0, 5, NOW + 10_000, 0, NOW))  # decided: nobody has room
    assert len(other.step()) == 5  # the answer's own bound


def test_no_shed_for_balance_while_throttled_but_a_drain_goes_on() -> None:
    """While DynamoDB refuses our calls a target sheds nothing (a move is writes on a table
    refusing them); once it stops refusing the shed goes ahead; draining is not held back."""
    streams, clock, throttled = _streams(10), Clock(), [True]
    b = _balancing(streams, clock, throttled=lambda: throttled[0])
    b.update(_target(6, 6, 2))
    assert b.step() == []
    throttled[0] = False
    assert len(b.step()) == 2
    draining = _balancing(_streams(5, moved_at_ms=NOW), clock, throttled=lambda: True)
    draining.update(draining=True, via="queue")
    clock.mono_ms += ASK_WAIT_MS  # past its wait for the decider's successors
    assert len(draining.step()) == 3


def test_weights_count_as_load() -> None:
    """Load is the sum of weights; a heavy stream alone fills a share."""
    streams, clock = _streams(2, weight=5.0), Clock()
    b = _balancing(streams, clock)
    assert b.load() == 10.0
    b.update(_target(5, 5, 2))
    assert len(b.step()) == 1


def test_an_older_directive_does_not_replace_a_newer_one() -> None:
    """The session item's copy may be older than the queue's: the later decision wins."""
    streams, clock = _streams(1), Clock()
    budget = ConnectBudget(100, 100)
    b = _balancing(streams, clock, budget=budget)
    b.update(_target(1, 2, 0, fleet=4, issued=NOW), via="queue")
    b.update(_target(9, 9, 0, issued=NOW - 2_000))
    assert b.directive is not None and b.directive.share == 1 and budget.fleet == 4


def test_a_lapse_from_the_decider_opens_the_gate_at_once() -> None:
    """A later decision that lapses the target (until = issued) ends the gate now."""
    streams, clock = _streams(3), Clock()
    b = _balancing(streams, clock)
    b.update(_target(3, 3, 0, issued=NOW - 1_000))
    assert b.room() == 0
    b.update(_target(3, 3, 0, until=NOW, issued=NOW))
    assert b.room() is None


def test_claims_stop_below_a_fractional_ceiling() -> None:
    """Ceiling 27.5 lets an empty worker claim 27, never 28 (out of the band)."""
    streams, clock = _streams(0), Clock()
    b = _balancing(streams, clock)
    b.update(_target(25, 27.5, 0))
    assert b.room() == 27


async def test_a_shed_stream_holds_its_slot_until_someone_owns_it() -> None:
    """shed_at_once bounds streams in motion: released ones count until claimed elsewhere."""
    answers = [False, False, True]

    async def owned(_: str) -> bool:
        return answers.pop(0)

    async def no_wait(_: float) -> None:
        return

    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock, owned_elsewhere=owned, sleep=no_wait)
    b.update(_target(2, 2, 1))
    (gone,) = b.step()
    del streams[gone]
    b.moved(gone)
    b.finished(gone)
    assert b.shedding() == 1 and b.step() == []  # released, not owned yet: no second shed
    for _ in range(10):
        await asyncio.sleep(0)
    assert not answers and b.shedding() == 0 and len(b.step()) == 1


def test_successors_are_named_as_the_directive_splits_them() -> None:
    """Each stream let go names a successor in proportion to its count; once the counts are
    used up (or without a directive) nobody is named."""
    streams, clock = _streams(6), Clock()
    b = _balancing(streams, clock)
    assert b.successor() is None
    b.update(Directive(6, 6, 0, NOW + 10_000, 3, NOW,
                       successors=(("w2#a", 3), ("w3#b", 1))))
    named = [b.successor() for _ in range(5)]
    assert sorted(n for n in named if n) == ["w2#a", "w2#a", "w2#a", "w3#b"]
    assert named[-1] is None


def test_a_new_decision_starts_the_successor_counts_again() -> None:
    """A directive issued later replaces the counts (the decider saw the handoffs land)."""
    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock)
    b.update(Directive(4, 4, 0, NOW + 10_000, 2, NOW, successors=(("w2#a", 1),)))
    assert [b.successor(), b.successor()] == ["w2#a", None]
    b.update(Directive(4, 4, 0, NOW + 10_000, 2, NOW + 1, successors=(("w2#a", 1),)))
    assert b.successor() == "w2#a"


def test_successors_take_turns_so_a_new_decision_does_not_favour_the_largest() -> None:
    """Counts 40 / 30 / 30, a new directive after every 9 streams (a stop takes seconds):
    90 streams split 36 / 27 / 27, as the counts say (most-left-first gave the first
    streams after each directive all to the largest: 90 / 0 / 0)."""
    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock)
    named: list[str | None] = []
    for k in range(10):
        b.update(Directive(4, 4, 0, NOW + 10_000, 2, NOW + k, successors=(
            ("w2#a", 40), ("w3#b", 30), ("w4#c", 30))))
        named += [b.successor() for _ in range(9)]
    assert (named.count("w2#a"), named.count("w3#b"), named.count("w4#c")) == (36, 27, 27)


def test_a_stop_names_successors_from_the_directive_live_when_it_began() -> None:
    """Pinned at the stop: a later directive (remade from a half-moved fleet) does not
    change the split; 6 streams go 3 / 3 as the first one said, not 5 / 1."""
    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock)
    b.update(Directive(4, 4, 0, NOW + 10_000, 2, NOW, successors=(("w2#a", 3), ("w3#b", 3))))
    b.successors.pin()
    named = [b.successor() for _ in range(2)]
    b.update(Directive(4, 4, 0, NOW + 10_000, 2, NOW + 1, successors=(("w2#a", 5),
                                                                          ("w3#b", 1))))
    named += [b.successor() for _ in range(4)]
    assert (named.count("w2#a"), named.count("w3#b")) == (3, 3)


def test_a_shed_is_withdrawn_when_the_live_directive_drops_its_successor() -> None:
    """A shed's successor dropped by a newer directive (a deploy began) withdraws the shed at
    READY and frees its slot; a named one, or no live directive, withdraws nothing."""
    streams, clock = _streams(4), Clock()
    b = _balancing(streams, clock)
    assert not b.withdraws("c0", "w2#a")
    b.update(Directive(4, 4, 1, NOW + 10_000, 2, NOW, successors=(("w2#a", 1),)))
    b._offered.add("c0")
    assert not b.withdraws("c0", "w2#a") and "c0" in b._offered
    assert b.withdraws("c0", "w3#b") and "c0" not in b._offered
