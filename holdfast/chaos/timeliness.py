"""The soak's timing invariants: a stream that lost its owner is owned again, and a STOPPED
stream's connections close, within their bounds (the tolerances and why: the docstring of
``holdfast.chaos.invariants``). From evidence only: no clock, no I/O."""

from __future__ import annotations

from collections import defaultdict

from holdfast.chaos.evidence import Evidence, Sample
from holdfast.chaos.pauses import paused_at
from holdfast.chaos.proxy import FaultWindow
from holdfast.chaos.verdict import Limits, Verdict, Violation
from holdfast.core.schema import STARTED

__all__ = ["NUDGE_RETRY_MS", "check_reown", "check_stops", "fault_extension"]

# A nudge refused as "DynamoDB unavailable" comes back within 4 s (worker.backoff.claim_retry_s).
NUDGE_RETRY_MS = 4000


def fault_extension(faults: list[FaultWindow], lo: int, base: int, lease_ms: int) -> int:
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
            if s.state != STARTED or s.waiting():
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
                # Released to a named successor: its lease ends for anyone else at the hold's
                # end (the expiry written, ``rules.HANDOFF_HOLD_MS``), which a successor that
                # died meanwhile costs the stream.
                held_for_successor = not s.owner and ended > s.wall_ms
                free_since = max(ended if held_for_successor else min(ended, s.wall_ms), made,
                                 from_ms)
        if free_since is not None and samples:
            _judge(ev, limits, base, conn_id, free_since=free_since,
                   seen_ms=samples[-1].wall_ms, verdict=verdict, final=True)
    gaps.sort()
    verdict.stats["reown_gaps_ms"] = {"count": len(gaps), "max": gaps[-1] if gaps else None,
                                      "p50": gaps[len(gaps) // 2] if gaps else None}
    verdict.stats["reown_bound_ms"] = base
    verdict.stats["reown_worst"] = sorted(worst, reverse=True)[:5]


def _allowed(ev: Evidence, limits: Limits, base: int, free_since: int, seen_ms: int) -> int:
    allowed = base + fault_extension(ev.faults, free_since, base, limits.lease_ms)
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
            deadline += fault_extension(ev.faults, a.wall_ms,
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
