"""The invariant checker on hand-made evidence: each check finds its violation, and only it."""

from __future__ import annotations

from holdfast.chaos.evidence import Action, ConnSpan, Evidence, Sample
from holdfast.chaos.invariants import check
from holdfast.chaos.pauses import IN_FLIGHT_WAKE_MS
from holdfast.chaos.proxy import FaultWindow
from holdfast.chaos.timeline import timeline
from holdfast.chaos.verdict import Limits, Verdict, Violation
from holdfast.fleet.recorder import Handled

LIMITS = Limits(lease_ms=4000, heartbeat_ms=1000, skew_ms=500, sweep_ms=500)
T0 = 1_000_000


def _span(no: int, worker: str, open_ms: int, close_ms: int | None) -> ConnSpan:
    return ConnSpan(no, "c1", worker, open_ms * 10**6, open_ms,
                    None if close_ms is None else close_ms * 10**6, close_ms)


def _sample(at: int, owner: str | None, expires: int, last_seq: int,
            state: str = "STARTED") -> Sample:
    return Sample(at, "c1", state, owner, expires, last_seq, "RUNNING", 1, at)


def clean() -> Evidence:
    """A moves c1 to B cleanly at T0+1000: A handled 0..9, B 10..19."""
    ev = Evidence()
    ev.conns = [_span(0, "A", T0, T0 + 1000), _span(1, "B", T0 + 1001, T0 + 3000)]
    ev.handled = ([Handled("c1", s, "A", T0 + 10 + s * 10) for s in range(10)]
                  + [Handled("c1", s, "B", T0 + 1100 + s * 10) for s in range(10, 20)])
    ev.samples = [_sample(T0 + 500, "A", T0 + 4500, 5), _sample(T0 + 1050, "B", T0 + 5000, 9),
                  _sample(T0 + 2900, "B", T0 + 6000, 19)]
    return ev


def kinds(ev: Evidence, until: int = T0 + 3000, *, progress: bool = True) -> list[str]:
    return [v.kind for v in others(check(ev, LIMITS, until_ms=until), progress=progress)]


def others(verdict: Verdict, *, progress: bool = False) -> list[Violation]:
    """The violations but "no-progress" (``progress=False``): for evidence made to test
    another check, with no handler calls near its end (the progress check is tested apart)."""
    return [v for v in verdict.violations if progress or v.kind != "no-progress"]


def test_clean_handover_passes() -> None:
    """A clean move with no gap, no overlap and no loss has no violation."""
    verdict = check(clean(), LIMITS, until_ms=T0 + 3000)
    assert verdict.ok, verdict.violations
    assert verdict.stats["handled"] == 20 and verdict.stats["duplicates"] == 0


def test_overlapping_connections_found() -> None:
    """Two workers with the upstream connection open at once for longer than a handoff may
    take is a violation."""
    ev = clean()
    ev.conns[0] = _span(0, "A", T0, T0 + 1001 + LIMITS.handoff_overlap_ms + 1)
    ev.conns[1] = _span(1, "B", T0 + 1001, T0 + 1001 + LIMITS.handoff_overlap_ms + 500)
    assert kinds(ev, until=T0 + 1001 + LIMITS.handoff_overlap_ms + 500, progress=False) == [
        "connection-overlap"]


def test_a_warm_handoff_overlap_is_counted_not_a_violation() -> None:
    """Make-before-break: B's warm-up opens while A still delivers; A closes soon after. The
    connections overlap, the handling does not: counted, no violation."""
    ev = clean()
    ev.conns[0] = _span(0, "A", T0, T0 + 1500)
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert verdict.ok, verdict.violations
    assert verdict.stats["handoff_overlaps"] == 1
    ev.handled.append(Handled("c1", 9, "A", T0 + 1400))  # A handles while B does: caught
    assert kinds(ev) == ["handling-overlap"]


def test_a_warm_up_opened_just_after_its_workers_sigcont_is_a_handoff() -> None:
    """B woke 1.9 s ago and warms up for A's stream; A reconnects beside it (its stream's
    connection dropped) and hands over: a warm handoff's overlap, not a socket held over B's
    pause (the soak once failed it as one)."""
    ev = clean()
    ev.actions = [Action(T0 - 3000, "sigstop", "B"), Action(T0 - 900, "sigcont", "B")]
    ev.conns = [_span(0, "A", T0 - 500, T0 + 980), _span(1, "B", T0 + 989, T0 + 1164),
                _span(2, "A", T0 + 1000, T0 + 1139), _span(3, "B", T0 + 1200, T0 + 3000)]
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert "connection-overlap" not in [v.kind for v in verdict.violations]
    assert verdict.stats["handoff_overlaps"] == 1


def test_paused_worker_connection_is_stale_but_handling_is_not() -> None:
    """A SIGSTOPped owner's open socket is excused; a message it handles after B took over is
    not."""
    ev = clean()
    ev.conns[0] = _span(0, "A", T0, T0 + 2500)
    ev.actions = [Action(T0 + 200, "sigstop", "A"), Action(T0 + 2400, "sigcont", "A")]
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert verdict.ok and verdict.stats["stale_connections_of_paused_workers"] == 1
    ev.handled.append(Handled("c1", 9, "A", T0 + 2450))
    assert kinds(ev) == ["handling-overlap"]


def test_a_call_a_pause_caught_in_flight_is_counted_once_not_a_violation() -> None:
    """A paused after the fence check of seq 10, before its handler ran: the call is recorded
    when A wakes, while B holds the stream; counted, once. A second record after the wake,
    or one later than ``IN_FLIGHT_WAKE_MS``, was handled after it: a violation."""
    ev = clean()
    ev.conns[0] = _span(0, "A", T0, T0 + 2410)
    ev.actions = [Action(T0 + 105, "sigstop", "A"), Action(T0 + 2400, "sigcont", "A")]
    ev.handled.append(Handled("c1", 10, "A", T0 + 2400))
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert verdict.ok, verdict.violations
    assert verdict.stats["handler_calls_across_pauses"] == 1
    ev.handled.append(Handled("c1", 11, "A", T0 + 2401))
    assert kinds(ev) == ["handling-overlap"]
    ev.handled[-2:] = [Handled("c1", 10, "A", T0 + 2400 + IN_FLIGHT_WAKE_MS + 1)]
    assert kinds(ev) == ["handling-overlap"]


def test_new_owner_connecting_just_after_sigcont_is_stale() -> None:
    """B connecting moments after A's SIGCONT, before A's fence closes the socket, is excused."""
    ev = clean()
    ev.conns[0] = _span(0, "A", T0, T0 + 1020)
    ev.actions = [Action(T0 + 200, "sigstop", "A"), Action(T0 + 990, "sigcont", "A")]
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert verdict.ok and verdict.stats["stale_connections_of_paused_workers"] == 1
    ev.conns[0] = _span(0, "A", T0, T0 + 1000 + LIMITS.resume_grace_ms + 500)
    assert kinds(ev) == ["connection-overlap"]


def test_lost_seq_found_and_duplicates_counted() -> None:
    """A seq nobody handled is loss; a seq handled twice (sequentially, above the checkpoint
    the successor resumed from: A handled 9 but had checkpointed 5) is only counted."""
    ev = clean()
    ev.handled = [h for h in ev.handled if h.seq != 12]
    assert kinds(ev) == ["lost-messages"]
    ev = clean()
    ev.samples[1] = _sample(T0 + 1050, "B", T0 + 5000, 5)
    ev.handled.append(Handled("c1", 9, "B", T0 + 1099))
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert verdict.ok and verdict.stats["duplicates"] == 1


def test_a_seq_at_or_below_the_stored_checkpoint_handed_on_again_is_a_violation() -> None:
    """B's first call comes after the table held checkpoint 9 (A's), and B hands on 8 and 9
    again: never done by the delivery rules (a stale resume point), a violation, not a
    duplicate merely counted; a paused worker's call in flight is not judged here."""
    ev = clean()
    ev.handled += [Handled("c1", 8, "B", T0 + 1080), Handled("c1", 9, "B", T0 + 1090)]
    verdict = check(ev, LIMITS, until_ms=T0 + 3000)
    assert [v.kind for v in verdict.violations] == ["replayed-below-checkpoint"]
    assert "[8, 9]" in verdict.violations[0].text
    assert verdict.stats["replayed_below_checkpoint"] == 2


def test_checkpoint_beyond_handled_is_loss() -> None:
    """A stored checkpoint above every handled seq claims messages nobody handled."""
    ev = clean()
    ev.samples.append(_sample(T0 + 2950, "B", T0 + 6000, 25))
    assert kinds(ev) == ["lost-messages"]


def test_last_seq_backwards_found() -> None:
    """A checkpoint that moves back between samples is a violation."""
    ev = clean()
    ev.samples.insert(2, _sample(T0 + 1500, "B", T0 + 5000, 3))
    assert "last-seq-backwards" in kinds(ev)


def test_slow_reown_found_unless_dynamodb_was_down() -> None:
    """A lease free for longer than the bound is a violation, unless a fault window covers it."""
    ev = clean()
    ev.samples = [_sample(T0, "A", T0 + 100, -1), _sample(T0 + 200, "A", T0 + 100, -1),
                  _sample(T0 + 2800, None, 0, -1), _sample(T0 + 2900, "B", T0 + 6000, 19)]
    assert kinds(ev) == ["slow-reown"]
    ev.faults = [FaultWindow("error", T0 - 500, T0 + 1500)]
    assert kinds(ev) == []


def test_a_named_successors_hold_is_not_counted_against_the_reown_bound() -> None:
    """A release naming a successor (no owner, expiry in the future: its hold) is judged
    from the hold's end, where anyone may claim it; past the bound from there, still slow."""
    hold_end = T0 + 3000
    ev = clean()
    ev.samples = [_sample(T0, "A", T0 + 4000, -1), _sample(T0 + 200, None, hold_end, -1),
                  _sample(hold_end + 1500, "B", T0 + 9000, 19)]
    assert kinds(ev, until=hold_end + 1600) == []
    ev.samples[-1] = _sample(hold_end + 3500, "B", T0 + 9000, 19)
    assert kinds(ev, until=hold_end + 3600) == ["slow-reown"]


def test_unowned_at_the_end_is_slow_reown() -> None:
    """A STARTED stream never owned again before the end is reported."""
    ev = clean()
    ev.samples.append(_sample(T0 + 2950, None, 0, 19))
    ev.samples.append(_sample(T0 + 9000, None, 0, 19))
    assert kinds(ev, until=T0 + 9000) == ["slow-reown"]


def test_a_stream_left_unowned_past_its_back_off_is_slow_reown() -> None:
    """Parked in BACKOFF, a stream is unowned on purpose until its back-off's end (its expiry);
    still unowned past the bound from there, it is slow. Its status stays BACKOFF until the
    next claim: read as "on purpose" for ever, one never claimed again went unseen."""
    backoff_end = T0 + 3000

    def parked(at: int) -> Sample:
        return Sample(at, "c1", "STARTED", None, backoff_end, -1, "BACKOFF", 1, at)

    ev = Evidence()
    ev.samples = [_sample(T0, "A", T0 + 4000, -1), parked(T0 + 200), parked(backoff_end + 500)]
    assert kinds(ev, until=backoff_end + 600) == []
    ev.samples.append(parked(backoff_end + 9000))
    assert kinds(ev, until=backoff_end + 9100) == ["slow-reown"]


def test_slow_stop_found() -> None:
    """A connection still open heartbeat + 1 s after STOPPED is a violation."""
    ev = clean()
    ev.actions = [Action(T0 + 1200, "stop", "c1")]
    ev.samples = [s for s in ev.samples if s.wall_ms < T0 + 1200]
    ev.conns[1] = _span(1, "B", T0 + 1001, T0 + 3500)
    assert kinds(ev) == ["slow-stop"]
    ev.conns[1] = _span(1, "B", T0 + 1001, T0 + 1900)
    assert kinds(ev) == []


def test_crash_reported_and_timeline_rendered() -> None:
    """An unexpected exit is a violation; a violation's timeline lists what happened."""
    ev = clean()
    ev.exits = {"A": 1}
    assert kinds(ev) == ["worker-crash"]
    ev = clean()
    ev.conns[0] = _span(0, "A", T0, T0 + 1001 + LIMITS.handoff_overlap_ms + 1)
    ev.conns[1] = _span(1, "B", T0 + 1001, T0 + 1001 + LIMITS.handoff_overlap_ms + 500)
    verdict = check(ev, LIMITS, until_ms=T0 + 1001 + LIMITS.handoff_overlap_ms + 500)
    lines = timeline(ev, verdict.violations[0])
    assert any("opened by B" in line for line in lines)
    assert any("handled: A seq 0..9" in line for line in lines)


def test_kill_extends_reown_bound_by_nudge_visibility() -> None:
    """A worker killed around the loss may have swallowed a nudge: 2 s more are allowed."""
    ev = clean()
    ev.samples = [_sample(T0, "A", T0 + 100, -1), _sample(T0 + 200, None, T0 + 100, -1),
                  _sample(T0 + 3500, "B", T0 + 6000, 19)]
    assert kinds(ev, until=T0 + 4000) == ["slow-reown"]
    ev.actions = [Action(T0 - 3000, "sigkill", "A")]
    assert kinds(ev, until=T0 + 4000) == []


def _scan(at: int, held: dict[str, str | None]) -> list[Sample]:
    """One table scan at ``at``: stream -> live owner (None: unowned)."""
    return [Sample(at, c, "STARTED", o, at + 3000 if o else 0, 5, "RUNNING", 1, at)
            for c, o in held.items()]


def drained(empty_at: int | None, claim_at: int | None = None) -> Evidence:
    """A#1 holds c1, c2 and is drained at T0; B takes them at ``empty_at`` (None: never)."""
    ev = Evidence(actions=[Action(T0, "drain", "A", "A#1")])
    for at in range(T0 - 200, T0 + 9000, 250):
        mine = "A#1" if empty_at is None or at < empty_at else "B#1"
        scan = {"c1": mine, "c2": mine, "c3": "B#1"}
        if claim_at is not None and at >= claim_at:
            scan["c3"] = "A#1"
        ev.samples += _scan(at, scan)
    return ev


def test_drained_worker_sheds_everything_and_claims_nothing() -> None:
    """A drain emptied in time passes; never emptied, or a claim while draining, is found."""
    def drain_kinds(ev: Evidence) -> list[str]:
        verdict = check(ev, LIMITS, until_ms=T0 + 9000)
        return sorted({v.kind for v in verdict.violations if v.kind.startswith("drain")})

    assert drain_kinds(drained(T0 + 1500)) == []
    assert drain_kinds(drained(None)) == ["drain-not-empty"]
    assert drain_kinds(drained(T0 + 8500)) == ["drain-not-empty"]
    assert drain_kinds(drained(T0 + 1500, claim_at=T0 + 4000)) == ["drain-claimed"]
    # A successor killed just before or during the drain may be named while its session
    # looks live: each such worker allows one warm-up wait more (3 s), no more.
    late = drained(T0 + 8500)
    late.actions.append(Action(T0 - 2000, "sigkill", "C"))
    assert drain_kinds(late) == []
    late = drained(T0 + 8500)
    late.actions.append(Action(T0 - 2000, "sigkill", "A"))  # the drained one: no allowance
    late.actions.append(Action(T0 - 9000, "sigkill", "C"))  # long dead: not named any more
    assert drain_kinds(late) == ["drain-not-empty"]
    ev = drained(None)  # cancelled before it could finish: nothing to judge
    ev.actions.append(Action(T0 + 1000, "undrain", "A", "A#1"))
    assert drain_kinds(ev) == []


def test_fleet_out_of_balance_at_the_end_found() -> None:
    """The final balance action is judged against the scan before it: ±max(1, 10 %)."""
    import json

    def balance_kinds(held: dict[str, str | None], live: list[str]) -> list[str]:
        ev = Evidence(samples=_scan(T0, held),
                      actions=[Action(T0 + 10, "balance", "fleet", json.dumps({"live": live}))])
        verdict = check(ev, LIMITS, until_ms=T0 + 100)
        return [v.kind for v in verdict.violations if v.kind == "not-balanced"]

    four = {"c1": "A#1", "c2": "A#1", "c3": "B#1", "c4": "B#2"}
    assert balance_kinds(four, ["A", "B"]) == []
    assert balance_kinds(four, ["A", "B", "C"]) == []  # shares 2, 1, 1 ± 1: C's 0 is in band
    assert balance_kinds({**four, "c5": "A#1", "c6": "A#1"}, ["A", "B", "C"]) == [
        "not-balanced"]
    assert balance_kinds({**four, "c4": None}, ["A", "B"]) == ["not-balanced"]


BACKSTOP = T0 + 3_600_000  # an owned item's expiry with sessions: not a sign of a live owner


def _owned(at: int, owner: str, down: int | None = None) -> Sample:
    return Sample(at, "c1", "STARTED", owner, BACKSTOP, None, "RUNNING", 1, at,
                  owner_down_ms=down)


def test_stream_of_a_non_live_session_past_the_bound_is_slow_reown() -> None:
    """A stream whose owner's session went down (expiry an hour ahead) counts as unowned from
    that moment: re-owned past the bound, or never, is a violation; in time, it is not."""
    base = 500 + 500 + 300 + 1000  # skew + sweep + scan + slack
    stranded = [_owned(T0, "A#1"), _owned(T0 + 500, "A#1", down=T0 + 100),
                _owned(T0 + 1500, "A#1", down=T0 + 100)]
    ev = Evidence(samples=[*stranded, _owned(T0 + 100 + base + 400, "B#1")])
    (v,) = others(check(ev, LIMITS, until_ms=T0 + 9000))
    assert (v.kind, v.at_ms) == ("slow-reown", T0 + 100) and "no live owner" in v.text
    ev = Evidence(samples=[*stranded, _owned(T0 + 100 + base - 100, "B#1")])
    assert others(check(ev, LIMITS, until_ms=T0 + 9000)) == []
    ev = Evidence(samples=[*stranded, _owned(T0 + 8000, "A#1", down=T0 + 100)])
    assert [v.kind for v in others(check(ev, LIMITS, until_ms=T0 + 9000))] == ["slow-reown"]


def test_stranded_clock_never_starts_before_the_stream_was_last_seen_held() -> None:
    """An acquire that lands after its session died strands the stream from the last time it
    was seen held, not from the (earlier) death of the acquirer's session."""
    ev = Evidence(samples=[_owned(T0 + 1000, "B#1"), _owned(T0 + 1250, "A#1", down=T0 - 5000),
                           _owned(T0 + 3000, "C#1")])
    verdict = check(ev, LIMITS, until_ms=T0 + 9000)
    assert others(verdict) == [] and verdict.stats["reown_gaps_ms"] == {
        "count": 1, "max": 2000, "p50": 2000}


def test_a_stream_held_at_the_end_that_stopped_delivering_is_no_progress() -> None:
    """Held by a live owner in the last scan, but its handler's last call long before the end
    (a connection that died under a live session): "no-progress", which ownership and the
    seq gaps miss; a call within the allowance, a stream created near the end, one in BACKOFF
    or STOPPED are fine."""
    until = T0 + 60_000
    ev = clean()
    ev.samples.append(_sample(until - 100, "B", until + 3000, 19))
    (v,) = check(ev, LIMITS, until_ms=until).violations
    assert v.kind == "no-progress" and "last call was" in v.text
    allowed = check(ev, LIMITS, until_ms=until).stats["progress"]["quiet_allowed_ms"]
    ev.handled.append(Handled("c1", 20, "B", until - allowed + 100))
    assert check(ev, LIMITS, until_ms=until).ok
    ev.handled.pop()
    for late in (Action(until - 1000, "create", "c1"), Action(until - 1000, "start", "c1")):
        ev.actions = [late]
        assert check(ev, LIMITS, until_ms=until).ok
    ev.actions = []
    for status, state in (("BACKOFF", "STARTED"), ("RUNNING", "STOPPED")):
        ev.samples[-1] = Sample(until - 100, "c1", state, "B", until + 3000, 19, status, 1,
                                until - 100)
        assert [v.kind for v in check(ev, LIMITS, until_ms=until).violations
                if v.kind == "no-progress"] == []


def test_an_unusable_hostile_item_connected_to_or_handled_is_a_violation() -> None:
    """A bad-* item (no URL, a metadata address, a mistyped epoch...) must never be connected
    to or reach a handler; an x- stream (usable, misbehaving) may."""
    ev = clean()
    ev.expected_bad = {"bad-state", "x-huge"}
    ev.conns.append(ConnSpan(9, "bad-state", "A", T0 * 10**6, T0, (T0 + 5) * 10**6, T0 + 5))
    ev.handled.append(Handled("bad-state", 1, "A", T0 + 2))
    ev.handled.append(Handled("x-huge", 1, "A", T0 + 2))
    assert [v.kind for v in check(ev, LIMITS, until_ms=T0 + 3000).violations] == [
        "unusable-item-used", "unusable-item-used"]
