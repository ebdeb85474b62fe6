"""The invariants of a soak, checked from evidence only (no clock, no I/O).

Tolerances, and why:
- connection overlap: none (monotonic ns from one upstream process), except a connection whose
  worker was SIGSTOPped: a paused process cannot close its socket. That connection is "stale",
  allowed if it closes within ``resume_grace_ms`` of SIGCONT, and any message it handles after
  another worker took over is caught by the handling check, which has no such exception; and
  a make-before-break handoff (``holdfast.core.handoff``): another worker's warm-up connection
  may overlap for at most ``handoff_overlap_ms`` (the warm-up wait plus the take-over wait
  plus a second), counted, not a violation: the handling check still allows no overlap;
- handling overlap: none beyond the recorder's 1 ms resolution (both sides read one clock),
  except one call per stream of a worker SIGSTOPped in the middle of it: the fence was checked
  before the pause, the call goes on when the process wakes, and the recorder stamps it then.
  Only a record within ``IN_FLIGHT_WAKE_MS`` of the SIGCONT (``holdfast.chaos.pauses``), of
  the seq after the worker's last one (or that seq again) is taken for it; any other record
  after the wake is a violation;
- re-ownership (``holdfast.chaos.timeliness``, as the stop's): measured from the moment the
  lease ended (its expiry, or the release write; a release naming a successor reserves the
  stream for it until the hold's end, its expiry, which a successor that died costs), or, for a
  stream owned by a session that is not live (stranded: DEAD, ENDED, replaced, silent past its
  TTL, or no session item), from when that owner stopped being live (the sampler's
  ``owner_down_ms``; never before the stream was last seen held), allowed ``skew + sweep
  interval + scan period + 1 s`` (the claim rule waits out the skew, the sweeper runs every
  interval, the checker sees the table once per scan). Since a lease ends at most ``lease``
  after its owner's last renewal, this is "owned again within lease + skew + sweep + 1 s of
  losing its owner". If a DynamoDB fault window overlaps, the clock starts at the end of the
  window instead, plus the up to 4 s (jittered) after which a refused nudge comes back. If a
  worker was killed or paused meanwhile, add the nudge visibility timeout (2 s in the fleet): a
  nudge that worker had just received stays invisible that long before another worker (or the
  sweeper's re-nudge) gets it;
- stop: every connection of a STOPPED stream closed within ``heartbeat + 1 s`` of the write (the
  worker learns it at its next renewal), later if its worker was paused or DynamoDB was faulted;
- rebalancing (draining claims nothing and ends empty; the fleet ends balanced):
  ``holdfast.chaos.rebalancing``;
- progress: a healthy stream held at the end delivered within a lease, the re-own bound and
  5 s of it (``holdfast.chaos.progress``): owned is not enough.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from holdfast.chaos.evidence import ConnSpan, Evidence, Sample
from holdfast.chaos.pauses import calls_across_pauses, paused_at, pauses_of
from holdfast.chaos.progress import check_progress
from holdfast.chaos.rebalancing import check_rebalancing
from holdfast.chaos.timeliness import check_reown, check_stops
from holdfast.chaos.verdict import Limits, Verdict, Violation
from holdfast.fleet.recorder import Handled
from holdfast.fleet.report import check_seqs

__all__ = ["check"]

def check_conn_overlaps(conns: list[ConnSpan], pauses: dict[str, list[tuple[int, int]]],
                        limits: Limits, verdict: Verdict) -> None:
    by_stream: dict[str, list[ConnSpan]] = defaultdict(list)
    for c in conns:
        by_stream[c.stream].append(c)
    stale = handoffs = 0
    for stream, spans in by_stream.items():
        spans.sort(key=lambda c: c.open_ns)
        for i, a in enumerate(spans):
            for b in spans[i + 1:]:
                if a.close_ns is not None and b.open_ns >= a.close_ns:
                    break
                # A paused worker cannot close its socket until it runs again: the new owner
                # may connect during the pause or just after SIGCONT, before the fence closes it.
                pause = paused_at(pauses, a.worker, b.open_ms, limits.resume_grace_ms)
                if pause is not None and a.open_ms > pause[1]:
                    # Opened after its worker woke (a warm-up just after SIGCONT, the holder
                    # reconnecting beside it): no socket held over a pause, judged as any.
                    pause = None
                if (pause and a.worker != b.worker and a.close_ms is not None
                        and a.close_ms <= pause[1] + limits.resume_grace_ms):
                    stale += 1
                    continue
                ends = [x for x in (a.close_ms, b.close_ms) if x is not None]
                if not pause and a.worker != b.worker and ends and (
                        min(ends) - b.open_ms <= limits.handoff_overlap_ms):
                    handoffs += 1  # a warm-up beside the holder's connection, bounded
                    continue
                verdict.violations.append(Violation(
                    "connection-overlap", stream, b.open_ms,
                    f"{stream}: connection #{a.conn_no} of {a.worker} (open {a.open_ms}, close "
                    f"{a.close_ms}) still open when #{b.conn_no} of {b.worker} opened"))
    verdict.stats["stale_connections_of_paused_workers"] = stale
    verdict.stats["handoff_overlaps"] = handoffs


Tenures = dict[tuple[str, str, int], list[Handled]]


def tenures(ev: Evidence, across: set[int]) -> Tenures:
    """The handled records of each (stream, worker, connection): a record belongs to its
    worker's latest connection to that stream opened before it (the calls a pause caught in
    flight, ``across``, left out)."""
    opens: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for c in ev.conns:
        opens[(c.stream, c.worker)].append((c.open_ms, c.conn_no))
    for lst in opens.values():
        lst.sort()
    out: Tenures = defaultdict(list)
    for n, h in enumerate(ev.handled):
        if n in across:
            continue
        lst = opens.get((h.conn_id, h.worker_id), [])
        i = bisect.bisect_right(lst, (h.wall_ms + 1, 2**62)) - 1
        out[(h.conn_id, h.worker_id, lst[i][1] if i >= 0 else -1)].append(h)
    return out


def check_handling(ev: Evidence, verdict: Verdict,
                   pauses: dict[str, list[tuple[int, int]]] | None = None) -> None:
    """Each handled message belongs to its worker's latest connection to that stream; the spans
    (first..last handled) of different workers' connections to one stream must not overlap,
    but for the calls a pause caught in flight (``calls_across_pauses``, counted); and no
    connection hands on a seq at or below the checkpoint stored before its first call."""
    across = calls_across_pauses(ev.handled, pauses or {})
    verdict.stats["handler_calls_across_pauses"] = len(across)
    held = tenures(ev, across)
    check_replays(ev, held, verdict)
    by_stream: dict[str, list[tuple[int, int, str, int]]] = defaultdict(list)
    for (stream, worker, no), records in held.items():
        times = [h.wall_ms for h in records]
        by_stream[stream].append((min(times), max(times), worker, no))
    for stream, spans in by_stream.items():
        spans.sort()
        for i, (lo, hi, worker, no) in enumerate(spans):
            for lo2, hi2, worker2, no2 in spans[i + 1:]:
                if lo2 >= hi:
                    break
                if worker2 != worker and lo2 < hi and lo < hi2:
                    verdict.violations.append(Violation(
                        "handling-overlap", stream, lo2,
                        f"{stream}: {worker} handled messages until {hi} (connection #{no}) "
                        f"while {worker2} handled from {lo2} (connection #{no2})"))


def check_replays(ev: Evidence, held: Tenures, verdict: Verdict) -> None:
    """No connection hands its handler a seq at or below the checkpoint the table held before
    that connection's first call: the delivery rules never pass one (``worker.delivery``), so
    a successor resuming below where its predecessor had checkpointed (a stale or zero resume
    point, a warm socket ignoring the transferred checkpoint) is caught, not only counted as
    duplicates. A sample can only lag the true checkpoint: no false alarm from its timing."""
    samples: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for s in ev.samples:
        if s.last_seq is not None:
            samples[s.conn_id].append((s.wall_ms, s.last_seq))
    for lst in samples.values():
        lst.sort()
    below = 0
    for (stream, worker, no), records in held.items():
        if stream in ev.expected_bad:
            continue
        first = min(h.wall_ms for h in records)
        lst = samples.get(stream, [])
        i = bisect.bisect_left(lst, (first, -2**63)) - 1
        if i < 0:
            continue
        at, checkpoint = lst[i]
        replayed = sorted({h.seq for h in records if h.seq <= checkpoint})
        if replayed:
            below += len(replayed)
            verdict.violations.append(Violation(
                "replayed-below-checkpoint", stream, first,
                f"{stream}: connection #{no} of {worker} handed on {len(replayed)} seqs at or "
                f"below the checkpoint {checkpoint} stored before its first call (at {at}): "
                f"{replayed[:8]}"))
    verdict.stats["replayed_below_checkpoint"] = below


def check_loss(ev: Evidence, final: dict[str, Sample], verdict: Verdict) -> None:
    good = {c: s.last_seq for c, s in final.items() if c not in ev.expected_bad}
    seqs = check_seqs([h for h in ev.handled if h.conn_id in good], good)
    dups = handled = 0
    for c in seqs.values():
        dups += c.duplicates
        handled += c.handled
        if c.missing:
            verdict.violations.append(Violation(
                "lost-messages", c.conn_id, 0,
                f"{c.conn_id}: {len(c.missing)} seqs never handled (first {c.missing[:8]}); "
                f"handled {c.first}..{c.last}, checkpoint {c.checkpoint}"))
    verdict.stats.update(handled=handled, duplicates=dups, streams_checked=len(seqs))


def check_unusable_left_alone(ev: Evidence, verdict: Verdict) -> None:
    """The unusable hostile items (``bad-*``, ``holdfast.chaos.hostile``; not the ``x-``
    streams, usable but misbehaving) are never connected to and never reach a handler:
    listed with their final status only, a worker delivering one passed."""
    bad = {c for c in ev.expected_bad if not c.startswith("x-")}
    for stream in sorted({c.stream for c in ev.conns if c.stream in bad}):
        verdict.violations.append(Violation(
            "unusable-item-used", stream, 0, f"{stream}: an unusable item was connected to"))
    for conn_id in sorted({h.conn_id for h in ev.handled if h.conn_id in bad}):
        verdict.violations.append(Violation(
            "unusable-item-used", conn_id, 0,
            f"{conn_id}: an unusable item's frames reached a handler"))


def check_last_seq(samples: list[Sample], verdict: Verdict) -> None:
    best: dict[str, Sample] = {}
    for s in sorted(samples, key=lambda s: s.wall_ms):
        prev = best.get(s.conn_id)
        if s.last_seq is None:
            continue
        if prev is not None and prev.last_seq is not None and s.last_seq < prev.last_seq:
            verdict.violations.append(Violation(
                "last-seq-backwards", s.conn_id, s.wall_ms,
                f"{s.conn_id}: last_seq {prev.last_seq} (owner {prev.owner}) went back to "
                f"{s.last_seq} (owner {s.owner})"))
        if prev is None or prev.last_seq is None or s.last_seq >= prev.last_seq:
            best[s.conn_id] = s


def check(ev: Evidence, limits: Limits, *, until_ms: int, from_ms: int = 0) -> Verdict:
    """Run every check; ``until_ms``: end of the chaos phase (the final shutdown is not judged
    for re-ownership)."""
    verdict = Verdict()
    pauses = pauses_of(ev.actions)
    final: dict[str, Sample] = {}
    for s in sorted(ev.samples, key=lambda s: s.wall_ms):
        final[s.conn_id] = s
    check_conn_overlaps(ev.conns, pauses, limits, verdict)
    check_handling(ev, verdict, pauses)
    check_loss(ev, final, verdict)
    check_unusable_left_alone(ev, verdict)
    check_last_seq(ev.samples, verdict)
    check_reown(ev, limits, until_ms, verdict, from_ms)
    check_progress(ev, limits, until_ms, verdict)
    check_stops(ev, limits, pauses, verdict)
    check_rebalancing(ev, limits, until_ms, verdict)
    for worker, code in sorted(ev.exits.items()):
        verdict.violations.append(Violation("worker-crash", None, 0,
                                            f"worker {worker} exited on its own (code {code})"))
    verdict.stats.update(connections=len(ev.conns), faults=len(ev.faults),
                         actions=len(ev.actions))
    return verdict
