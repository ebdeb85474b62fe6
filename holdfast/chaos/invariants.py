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
- re-ownership: measured from the moment the lease ended (its expiry, or the release write),
  or, for a stream owned by a session that is not live (stranded: DEAD, ENDED, replaced, silent
  past its TTL, or no session item), from when that owner stopped being live (the sampler's
  ``owner_down_ms``; never before the stream was last seen held),
  allowed ``skew + sweep interval + scan period + 1 s`` (the claim rule waits out the skew, the
  sweeper runs every interval, the checker sees the table once per scan). Since a lease ends at
  most ``lease`` after its owner's last renewal, this is "owned again within lease + skew + sweep
  + 1 s of losing its owner". If a DynamoDB fault window overlaps, the clock starts at the end of
  the window instead, plus the up to 4 s (jittered) after which a refused nudge comes back. If
  a worker was killed or paused meanwhile, add the nudge visibility timeout (2 s in the fleet):
  a nudge that worker had just received stays invisible that long before another worker (or the
  sweeper's re-nudge) gets it;
- stop: every connection of a STOPPED stream closed within ``heartbeat + 1 s`` of the write (the
  worker learns it at its next renewal), later if its worker was paused or DynamoDB was faulted;
- rebalancing (draining claims nothing and ends empty; the fleet ends balanced):
  ``holdfast.chaos.rebalancing``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from holdfast.chaos.evidence import ConnSpan, Evidence, Sample
from holdfast.chaos.pauses import calls_across_pauses, paused_at, pauses_of
from holdfast.chaos.proxy import FaultWindow
from holdfast.core.handoff import TAKE_TIMEOUT_MS, WARM_TIMEOUT_MS
from holdfast.fleet.report import check_seqs

__all__ = ["Limits", "Verdict", "Violation", "check"]

# A nudge refused as "DynamoDB unavailable" comes back within 4 s (worker.backoff.claim_retry_s).
NUDGE_RETRY_MS = 4000


@dataclass(frozen=True, slots=True)
class Limits:
    lease_ms: int
    heartbeat_ms: int
    skew_ms: int
    sweep_ms: int
    scan_ms: int = 300
    slack_ms: int = 1000
    resume_grace_ms: int = 2000
    nudge_visibility_ms: int = 2000
    handoff_overlap_ms: int = WARM_TIMEOUT_MS + TAKE_TIMEOUT_MS + 1000


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    conn_id: str | None
    at_ms: int
    text: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


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


def check_handling(ev: Evidence, verdict: Verdict,
                   pauses: dict[str, list[tuple[int, int]]] | None = None) -> None:
    """Each handled message belongs to its worker's latest connection to that stream; the spans
    (first..last handled) of different workers' connections to one stream must not overlap,
    but for the calls a pause caught in flight (``calls_across_pauses``, counted)."""
    across = calls_across_pauses(ev.handled, pauses or {})
    verdict.stats["handler_calls_across_pauses"] = len(across)
    opens: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for c in ev.conns:
        opens[(c.stream, c.worker)].append((c.open_ms, c.conn_no))
    for lst in opens.values():
        lst.sort()
    tenure: dict[tuple[str, str, int], list[int]] = {}
    for n, h in enumerate(ev.handled):
        if n in across:
            continue
        lst = opens.get((h.conn_id, h.worker_id), [])
        i = bisect.bisect_right(lst, (h.wall_ms + 1, 2**62)) - 1
        key = (h.conn_id, h.worker_id, lst[i][1] if i >= 0 else -1)
        span = tenure.setdefault(key, [h.wall_ms, h.wall_ms])
        span[0], span[1] = min(span[0], h.wall_ms), max(span[1], h.wall_ms)
    by_stream: dict[str, list[tuple[int, int, str, int]]] = defaultdict(list)
    for (stream, worker, no), (lo, hi) in tenure.items():
        by_stream[stream].append((lo, hi, worker, no))
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


def _fault_extension(faults: list[FaultWindow], lo: int, base: int, lease_ms: int) -> int:
    """Extra time allowed after ``lo`` for faults that overlap the period in which the work
    was due (``lo - lease`` to the deadline); a fault starting after the deadline excuses
    nothing. Chains of faults extend the deadline step by step."""
    ext = 0
    changed = True
    while changed:
        changed = False
        for f in faults:
            if f.end_ms >= lo - lease_ms and f.start_ms <= lo + base + ext:
                need = f.end_ms - lo + NUDGE_RETRY_MS
                if need > ext:
                    ext, changed = need, True
    return ext


def check_reown(ev: Evidence, limits: Limits, until_ms: int, verdict: Verdict,
                from_ms: int = 0) -> None:
    """Every STARTED, healthy stream whose lease ended is owned again within the bound (the
    clock starts no earlier than the write that made it STARTED, and no earlier than
    ``from_ms``: the fleet's start-up is not a failover)."""
    base = limits.skew_ms + limits.sweep_ms + limits.scan_ms + limits.slack_ms
    started: dict[str, list[int]] = defaultdict(list)
    for a in ev.actions:
        if a.kind in ("start", "create"):
            started[a.target].append(a.wall_ms)
    by_conn: dict[str, list[Sample]] = defaultdict(list)
    for s in ev.samples:
        if s.conn_id not in ev.expected_bad and s.wall_ms <= until_ms:
            by_conn[s.conn_id].append(s)
    gaps: list[int] = []
    worst: list[tuple[int, int, str, int]] = []  # (gap, allowed, conn, lease ended)
    for conn_id, samples in by_conn.items():
        samples.sort(key=lambda s: s.wall_ms)
        free_since: int | None = None
        held_at = 0  # the last scan that saw it held
        for s in samples:
            if s.state != "STARTED" or s.status in ("BACKOFF", "INVALID"):
                free_since = None
                continue
            if s.live_owner():
                held_at = s.wall_ms
                if free_since is not None:
                    gaps.append(s.wall_ms - free_since)
                    worst.append((s.wall_ms - free_since, _allowed(
                        ev, limits, base, free_since, s.wall_ms), conn_id, free_since))
                    _judge(ev, limits, base, conn_id, free_since=free_since, seen_ms=s.wall_ms,
                           verdict=verdict)
                free_since = None
            elif free_since is None:
                ended = s.expires_ms if s.expires_ms else (s.updated_ms or s.wall_ms)
                if s.owner and s.owner_down_ms is not None:  # stranded: owned, nobody serves it
                    ended = max(s.owner_down_ms, held_at)
                # A scan reads an item up to a scan period after the time it is stamped with.
                made = max((t for t in started[conn_id] if t <= s.wall_ms + limits.scan_ms),
                           default=0)
                free_since = max(min(ended, s.wall_ms), made, from_ms)
        if free_since is not None and samples:
            _judge(ev, limits, base, conn_id, free_since=free_since,
                   seen_ms=samples[-1].wall_ms, verdict=verdict, final=True)
    gaps.sort()
    verdict.stats["reown_gaps_ms"] = {"count": len(gaps), "max": gaps[-1] if gaps else None,
                                      "p50": gaps[len(gaps) // 2] if gaps else None}
    verdict.stats["reown_bound_ms"] = base
    verdict.stats["reown_worst"] = sorted(worst, reverse=True)[:5]


def _allowed(ev: Evidence, limits: Limits, base: int, free_since: int, seen_ms: int) -> int:
    allowed = base + _fault_extension(ev.faults, free_since, base, limits.lease_ms)
    if any(a.kind in ("sigkill", "sigstop", "sigterm") and
           free_since - limits.lease_ms <= a.wall_ms <= seen_ms for a in ev.actions):
        allowed += limits.nudge_visibility_ms
    return allowed


def _judge(ev: Evidence, limits: Limits, base: int, conn_id: str, *, free_since: int,
           seen_ms: int, verdict: Verdict, final: bool = False) -> None:
    allowed = _allowed(ev, limits, base, free_since, seen_ms)
    if seen_ms - free_since > allowed:
        what = "still unowned at the end" if final else "owned again only"
        verdict.violations.append(Violation(
            "slow-reown", conn_id, free_since,
            f"{conn_id}: held by no live owner since {free_since}, {what} "
            f"{seen_ms - free_since} ms later (allowed {allowed} ms)"))


def check_stops(ev: Evidence, limits: Limits, pauses: dict[str, list[tuple[int, int]]],
                verdict: Verdict) -> None:
    starts: dict[str, list[int]] = defaultdict(list)
    for a in ev.actions:
        if a.kind in ("start", "create"):
            starts[a.target].append(a.wall_ms)
    latencies: list[int] = []
    for a in ev.actions:
        if a.kind != "stop":
            continue
        nxt = min((t for t in starts[a.target] if t > a.wall_ms), default=2**62)
        for c in ev.conns:
            if c.stream != a.target or c.open_ms >= nxt:
                continue
            if c.close_ms is not None and c.close_ms <= a.wall_ms:
                continue
            closed = c.close_ms if c.close_ms is not None else 2**62
            deadline = a.wall_ms + limits.heartbeat_ms + limits.slack_ms
            deadline += _fault_extension(ev.faults, a.wall_ms,
                                         limits.heartbeat_ms + limits.slack_ms, 0)
            pause = paused_at(pauses, c.worker, closed, 0) or paused_at(
                pauses, c.worker, a.wall_ms, 0)
            if pause:
                deadline = max(deadline, pause[1] + limits.resume_grace_ms)
            latencies.append(closed - a.wall_ms)
            if closed > deadline:
                verdict.violations.append(Violation(
                    "slow-stop", a.target, a.wall_ms,
                    f"{a.target}: STOPPED at {a.wall_ms}, connection #{c.conn_no} of {c.worker} "
                    f"closed {'never' if closed == 2**62 else closed - a.wall_ms} ms later "
                    f"(allowed {deadline - a.wall_ms} ms)"))
    latencies.sort()
    verdict.stats["stop_close_ms"] = {"count": len(latencies),
                                      "max": latencies[-1] if latencies else None}


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
    check_last_seq(ev.samples, verdict)
    check_reown(ev, limits, until_ms, verdict, from_ms)
    check_stops(ev, limits, pauses, verdict)
    from holdfast.chaos.rebalancing import check_rebalancing  # it builds on this module
    check_rebalancing(ev, limits, until_ms, verdict)
    for worker, code in sorted(ev.exits.items()):
        verdict.violations.append(Violation("worker-crash", None, 0,
                                            f"worker {worker} exited on its own (code {code})"))
    verdict.stats.update(connections=len(ev.conns), faults=len(ev.faults),
                         actions=len(ev.actions))
    return verdict
