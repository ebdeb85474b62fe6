"""Rebalancing as the demo sees it: the moves (from the workers' logs) and whether the fleet is
balanced (from the table's holdings). Pure functions: the scenario reads the files.

A **move** is a stream one worker shed (its "shedding stream (rebalancing)" or "(draining)"
log line) and another worker claimed next (its "claimed" line, which carries ``unowned_ms``,
the time from the release to that claim, and ``moved_at_ms``, the release's move stamp). The
logs are what both sides write at the moment it happens; the lease item keeps only the latest
``moved_at_ms``, and a scan every 300 ms can miss a move's two writes in between. A move is
**completed** when the shedding worker logged that it let the stream go ("handed over" or
"released") before it claimed that stream again; one whose holder crashed or hung mid-move was
finished by failover, and its unowned time and replays are that failure's, not rebalancing's.

**Balanced**: every live worker within ±max(1, 10 %) of its fair share, the decider's own
shares and band (``holdfast.core.balance``; equal capacities: the streams / live workers,
rounded to whole streams, the odd ones to who holds more).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from holdfast.core.balance import BalancePolicy, Member, fair_shares
from holdfast.fleet.recorder import Handled

__all__ = ["Balance", "Claim", "Move", "balance_of", "claims_from_logs", "cut_short",
           "cut_short_note", "duplicates_across", "json_records", "log_wall_ms",
           "logged_unowned_s", "moves_from_logs", "percentile", "unowned_stats"]

SHED_MESSAGE = "shedding stream"
CLAIMED_MESSAGE = "claimed"
# The holder's own word that it let a stream go: a warm transfer, or a (named) release.
LET_GO_MESSAGES = frozenset({"handed over", "released"})


@dataclass(slots=True)
class Move:
    """``conn_id`` shed by ``src`` at ``shed_ms`` and claimed by ``dst`` at ``claimed_ms``."""

    conn_id: str
    src: str
    dst: str
    reason: str  # rebalancing / draining
    shed_ms: int
    claimed_ms: int
    unowned_ms: int | None
    moved_at_ms: int | None
    duplicates: int | None = None  # seqs both sides handled (None: not counted)
    completed: bool = True  # False: the holder never let go (it died mid-move; failover did)
    t: float = 0.0  # seconds since the run started, of the claim (for the timeline)


@dataclass(frozen=True, slots=True)
class Balance:
    """Streams held per live worker against the fair share and its band."""

    holdings: dict[str, int]
    shares: dict[str, float]
    share: float  # the mean share
    band: float  # of the mean share (each worker's own: ``policy.band(shares[w])``)
    unowned: int = 0
    policy: BalancePolicy = field(default_factory=BalancePolicy)

    @property
    def out_of_band(self) -> dict[str, int]:
        return {w: n for w, n in self.holdings.items()
                if abs(n - self.shares[w]) > self.policy.band(self.shares[w]) + 1e-9}

    @property
    def balanced(self) -> bool:
        return bool(self.holdings) and not self.out_of_band and not self.unowned

    def describe(self) -> str:
        held = ", ".join(f"{w}={n}" for w, n in sorted(self.holdings.items()))
        return (f"{held} (share {self.share:g} ± {self.band:g}"
                + (f", {self.unowned} unowned" if self.unowned else "") + ")")


def balance_of(loads: Mapping[str, int], live: Iterable[str], unowned: int = 0,
               policy: BalancePolicy | None = None) -> Balance:
    """The balance of the ``live`` workers holding ``loads`` (a worker absent holds 0)."""
    policy = policy or BalancePolicy()
    workers = sorted(set(live))
    holdings = {w: loads.get(w, 0) for w in workers}
    total = sum(holdings.values()) + unowned
    shares = fair_shares([Member(w, n, n, 10**6) for w, n in holdings.items()], total)
    share = total / len(workers) if workers else 0.0
    return Balance(holdings, shares, share, policy.band(share), unowned, policy)


def log_wall_ms(stamp: object) -> int | None:
    """Powertools' ``2026-12-01 22:36:40,774+0000`` as epoch ms."""
    if not isinstance(stamp, str):
        return None
    try:
        return round(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f%z").timestamp() * 1000)
    except ValueError:
        return None


def json_records(lines: Iterable[str], needle: str) -> Iterator[dict[str, Any]]:
    """The JSON objects among ``lines`` that contain ``needle`` (a cheap text test first);
    torn or foreign lines are skipped."""
    for line in lines:
        if needle not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Claim:
    """``worker`` claimed ``conn_id`` at ``wall_ms`` (its "claimed" log line), the stream
    unowned ``unowned_ms`` before (from its release; 0 for a warm handoff)."""

    conn_id: str
    worker: str
    wall_ms: int
    unowned_ms: int | None = None
    moved_at_ms: int | None = None


def _parse(lines: Iterable[str]) -> tuple[list[tuple[int, str, str, str]], list[Claim],
                                          dict[str, list[tuple[int, str]]]]:
    """(sheds as (ms, worker, conn, reason), claims in time order, let-go lines by stream)."""
    sheds: list[tuple[int, str, str, str]] = []
    claims: list[Claim] = []
    let_go: dict[str, list[tuple[int, str]]] = {}  # conn -> (ms, worker)
    for rec in json_records(lines, '"message"'):
        msg, conn, worker = rec.get("message"), rec.get("conn_id"), rec.get("worker_id")
        at = log_wall_ms(rec.get("timestamp"))
        if not isinstance(msg, str) or not isinstance(conn, str) or not isinstance(
                worker, str) or at is None:
            continue
        if msg.startswith(SHED_MESSAGE):
            reason = "draining" if "draining" in msg else "rebalancing"
            sheds.append((at, worker, conn, reason))
        elif msg == CLAIMED_MESSAGE:
            claims.append(Claim(conn, worker, at, _opt_int(rec.get("unowned_ms")),
                                _opt_int(rec.get("moved_at_ms"))))
        elif msg in LET_GO_MESSAGES:
            let_go.setdefault(conn, []).append((at, worker))
    claims.sort(key=lambda c: (c.wall_ms, c.conn_id, c.worker))
    return sheds, claims, let_go


def claims_from_logs(lines: Iterable[str]) -> list[Claim]:
    """The "claimed" lines among the workers' JSON log lines, in time order."""
    return _parse(lines)[1]


def logged_unowned_s(claims: Iterable[Claim], conn_id: str, *, not_by: str,
                     since_ms: int) -> float | None:
    """Seconds ``conn_id`` was unowned before its first claim at or after ``since_ms`` by a
    worker other than ``not_by``, as that claim logged it (release to claim: 0 for a warm
    handoff); None if no such claim logged it."""
    taken = [c for c in claims if c.conn_id == conn_id and c.worker != not_by
             and c.wall_ms >= since_ms]
    first = min(taken, key=lambda c: c.wall_ms, default=None)
    return None if first is None or first.unowned_ms is None else first.unowned_ms / 1000


def moves_from_logs(lines: Iterable[str]) -> list[Move]:
    """The moves in the workers' JSON log lines (any order, any mix of workers)."""
    sheds, claims, let_go = _parse(lines)
    by_conn: dict[str, list[Claim]] = {}
    for c in claims:
        by_conn.setdefault(c.conn_id, []).append(c)
    moves: list[Move] = []
    for at, worker, conn, reason in sorted(sheds):
        later = [c for c in by_conn.get(conn, []) if c.wall_ms >= at]
        if not later or later[0].worker == worker:
            continue  # never claimed again (yet), or it came back: not a move
        first = later[0]
        # The holder's let-go may be logged after the successor's claim (its write returns
        # later), but not after the holder claims the stream again (a later holding's).
        back = min((c.wall_ms for c in later if c.worker == worker), default=None)
        completed = any(w == worker and t >= at and (back is None or t < back)
                        for t, w in let_go.get(conn, []))
        moves.append(Move(conn, worker, first.worker, reason, at, first.wall_ms,
                          first.unowned_ms, first.moved_at_ms, completed=completed))
    return moves


def cut_short(moves: Iterable[Move]) -> list[str]:
    """The streams whose move a failure cut short (the holder never let go), sorted."""
    return sorted({m.conn_id for m in moves if not m.completed})


def cut_short_note(moves: Iterable[Move]) -> str:
    """What a summary says of the moves a failure cut short ("" if none)."""
    cut = cut_short(moves)
    return (f"{len(cut)} more cut short by a failure (the holder never let go; failover "
            f"claimed the stream): {', '.join(cut)}") if cut else ""


def duplicates_across(move: Move, records: Iterable[Handled]) -> int:
    """Seqs of the moved stream handled both by ``src`` before the claim and by ``dst`` after
    the shed: a graceful move hands on the final checkpoint, so this should be 0."""
    before: set[int] = set()
    after: set[int] = set()
    for r in records:
        if r.conn_id != move.conn_id:
            continue
        if r.worker_id == move.src and r.wall_ms <= move.claimed_ms:
            before.add(r.seq)
        elif r.worker_id == move.dst and r.wall_ms >= move.shed_ms:
            after.add(r.seq)
    return len(before & after)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def unowned_stats(moves: list[Move]) -> dict[str, float | None]:
    """p50 / p99 / max seconds unowned per move (the claims' ``unowned_ms``, else claim minus
    release stamp)."""
    gaps = [(m.unowned_ms if m.unowned_ms is not None else m.claimed_ms - (
        m.moved_at_ms or m.shed_ms)) / 1000 for m in moves]
    return {"p50": statistics.median(gaps) if gaps else None,
            "p99": percentile(gaps, 0.99), "max": max(gaps) if gaps else None}
