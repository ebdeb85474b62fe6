"""What a deploy cost each stream: moves, delivery gaps, duplicates and lost seqs (pure).

The ``deploy`` scenario (``holdfast.fleet.deploy_scenario``) replaces every worker with a new
version and reads the files; these functions measure its window ``[start_ms, end_ms]`` (wall
ms) from two sources, with no I/O:

- the workers' "claimed" log lines: who took each stream when. An **owner change** is a claim
  in the window by a worker other than the stream's previous claimer (a claim before the
  window counts as the previous one; a stream's first claim ever is not a change);
- the recorder's handled records ``(conn_id, seq, worker, wall_ms)``: who delivered which seq
  when. A **delivery gap** is, where a stream's deliverer changes (records in time order), the
  time from the last record of the old deliverer to the first of the new one, the new one's
  first in the window. It includes the upstream's spacing (0.1 s at 10 msgs/s), and a holder
  that never delivered merges into one longer gap: there are at most as many gaps as moves.
  The **delay a move added** is its gap less the stream's usual spacing (the median time
  between two deliveries by the same worker): what the move cost beyond the feed's own pace,
  0 for a move the stream's pace hid. Beside it, the **steady gaps**: between two deliveries
  of a stream by the same worker while the moves went on (from the window's first move to its
  last), the pace of the streams not moving then. On one machine that runs the whole fleet,
  the stops' work slows every stream's deliveries, moved or not; this says by how much.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from holdfast.fleet.moves import Claim, percentile
from holdfast.fleet.recorder import Handled

__all__ = ["STYLES", "DeployReport", "Gap", "OwnerChange", "added_delays",
           "delivery_gaps", "deploy_report",
           "duplicate_deliveries", "last_deliverers", "lost_seqs", "moves_per_stream", "onto_old",
           "owner_changes", "steady_gaps", "usual_spacing_ms"]

STYLES = ("one-at-a-time", "new-first")


@dataclass(frozen=True, slots=True)
class OwnerChange:
    """``conn_id`` passed from ``src`` to ``dst``, claimed by ``dst`` at ``wall_ms``."""

    conn_id: str
    src: str
    dst: str
    wall_ms: int


@dataclass(frozen=True, slots=True)
class Gap:
    """Delivery of ``conn_id`` passed from ``src`` (last at ``last_ms``) to ``dst`` (first at
    ``first_ms``)."""

    conn_id: str
    src: str
    dst: str
    last_ms: int
    first_ms: int

    @property
    def seconds(self) -> float:
        """The gap in seconds."""
        return (self.first_ms - self.last_ms) / 1000


def owner_changes(claims: Iterable[Claim], start_ms: int, end_ms: int) -> list[OwnerChange]:
    """Claims in the window by another worker than the stream's previous claimer."""
    last: dict[str, str] = {}
    out: list[OwnerChange] = []
    for c in sorted(claims, key=lambda c: (c.wall_ms, c.conn_id, c.worker)):
        if c.wall_ms > end_ms:
            break
        prev = last.get(c.conn_id)
        if prev is not None and prev != c.worker and c.wall_ms >= start_ms:
            out.append(OwnerChange(c.conn_id, prev, c.worker, c.wall_ms))
        last[c.conn_id] = c.worker
    return out


def moves_per_stream(changes: Iterable[OwnerChange], conn_ids: Iterable[str]) -> dict[str, int]:
    """Owner changes per stream; every one of ``conn_ids`` is present (0: never moved)."""
    out = dict.fromkeys(conn_ids, 0)
    for ch in changes:
        out[ch.conn_id] = out.get(ch.conn_id, 0) + 1
    return out


def onto_old(changes: Iterable[OwnerChange], versions: Mapping[str, str],
             old_version: str) -> list[OwnerChange]:
    """The changes whose new owner runs ``old_version`` (it will stop: the stream moves again)."""
    return [ch for ch in changes if versions.get(ch.dst) == old_version]


def _by_stream(records: Iterable[Handled]) -> dict[str, list[Handled]]:
    """Each stream's records in time order (then seq, then worker)."""
    out: dict[str, list[Handled]] = {}
    for r in records:
        out.setdefault(r.conn_id, []).append(r)
    for recs in out.values():
        recs.sort(key=lambda r: (r.wall_ms, r.seq, r.worker_id))
    return out


def delivery_gaps(records: Iterable[Handled], start_ms: int, end_ms: int) -> list[Gap]:
    """Per change of deliverer whose new side first delivered within the window: the gap."""
    out: list[Gap] = []
    for conn, recs in _by_stream(records).items():
        for prev, r in pairwise(recs):
            if r.worker_id != prev.worker_id and start_ms <= r.wall_ms <= end_ms:
                out.append(Gap(conn, prev.worker_id, r.worker_id, prev.wall_ms, r.wall_ms))
    return sorted(out, key=lambda g: (g.first_ms, g.conn_id))


def usual_spacing_ms(records: Iterable[Handled]) -> dict[str, float]:
    """Per stream, the median time between two consecutive deliveries by the same worker."""
    out: dict[str, float] = {}
    for conn, recs in _by_stream(records).items():
        steps = [b.wall_ms - a.wall_ms for a, b in pairwise(recs) if a.worker_id == b.worker_id]
        if steps:
            out[conn] = statistics.median(steps)
    return out


def added_delays(records: list[Handled], start_ms: int, end_ms: int) -> list[float]:
    """Per delivery gap in the window: seconds beyond its stream's usual spacing (>= 0)."""
    spacing = usual_spacing_ms(records)
    return [max(0.0, g.seconds - spacing.get(g.conn_id, 0.0) / 1000)
            for g in delivery_gaps(records, start_ms, end_ms)]


def steady_gaps(records: list[Handled], start_ms: int, end_ms: int) -> list[float]:
    """Seconds between two deliveries of a stream by the same worker, the second one between
    the first and the last delivery gap of the window (none if it has no gap)."""
    moved = [g.first_ms for g in delivery_gaps(records, start_ms, end_ms)]
    if not moved:
        return []
    lo, hi = min(moved), max(moved)
    return [(b.wall_ms - a.wall_ms) / 1000 for recs in _by_stream(records).values()
            for a, b in pairwise(recs) if a.worker_id == b.worker_id and lo <= b.wall_ms <= hi]


def duplicate_deliveries(records: Iterable[Handled], start_ms: int, end_ms: int) -> int:
    """Deliveries in the window of a seq of the same stream already delivered (by anyone)."""
    dups = 0
    for recs in _by_stream(records).values():
        seen: set[int] = set()
        for r in recs:
            if r.wall_ms > end_ms:
                break
            if r.seq in seen and r.wall_ms >= start_ms:
                dups += 1
            seen.add(r.seq)
    return dups


def lost_seqs(records: Iterable[Handled], start_ms: int, end_ms: int) -> dict[str, list[int]]:
    """Per stream, the seqs never delivered between its last one before the window and its
    last one in it (only streams that lost any)."""
    out: dict[str, list[int]] = {}
    for conn, recs in _by_stream(records).items():
        before = [r.seq for r in recs if r.wall_ms < start_ms]
        inside = [r.seq for r in recs if start_ms <= r.wall_ms <= end_ms]
        if not inside:
            continue
        lo = max(before) + 1 if before else min(inside)
        delivered = {r.seq for r in recs}
        lost = [s for s in range(lo, max(inside) + 1) if s not in delivered]
        if lost:
            out[conn] = lost
    return out


def last_deliverers(records: Iterable[Handled]) -> dict[str, str]:
    """Each stream's latest deliverer."""
    return {conn: recs[-1].worker_id for conn, recs in _by_stream(records).items()}


@dataclass(slots=True)
class DeployReport:
    """What one deploy cost: the figures of the summary (and of a benchmark row)."""

    style: str
    workers: int  # workers replaced (old ones stopped; as many new ones started)
    streams: int
    window_s: float
    moves: int
    moves_mean: float
    moves_max: int
    moved_more_than_once: int
    never_moved: int
    moves_onto_old: int
    streams_onto_old: int
    moves_after_last_stop: int  # among the new workers, after the last old one stopped
    gaps: int
    gap_p50_s: float | None
    gap_p99_s: float | None
    gap_max_s: float | None
    duplicates: int
    lost: int
    added_p50_s: float | None = None  # the delay a move added (the gap less the spacing)
    added_p99_s: float | None = None
    added_max_s: float | None = None
    # between two deliveries by the same worker while the moves went on (``steady_gaps``)
    steady_p99_s: float | None = None
    steady_max_s: float | None = None
    unowned_at_end: list[str] = field(default_factory=list)
    lost_by_stream: dict[str, list[int]] = field(default_factory=dict)
    moves_by_stream: dict[str, int] = field(default_factory=dict)
    note: str = ""

    def failures(self) -> list[str]:
        """Why the deploy failed (lost seqs, duplicates, streams unowned); moves do not fail."""
        out: list[str] = []
        if self.lost:
            first = {c: s[:5] for c, s in sorted(self.lost_by_stream.items())[:3]}
            out.append(f"deploy: {self.lost} seqs lost ({first})")
        if self.duplicates:
            out.append(f"deploy: {self.duplicates} seqs delivered twice")
        if self.unowned_at_end:
            out.append(f"deploy: unowned at the end: {', '.join(self.unowned_at_end)}")
        return out

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON-ready values."""
        return asdict(self)


def deploy_report(*, style: str, conn_ids: list[str], versions: Mapping[str, str],
                  old_version: str, claims: list[Claim], records: list[Handled],
                  start_ms: int, end_ms: int, last_stop_ms: int,
                  unowned_at_end: list[str], note: str = "") -> DeployReport:
    """The figures of the window ``[start_ms, end_ms]`` (the last old worker stopped at
    ``last_stop_ms``); ``versions``: worker id -> version."""
    changes = owner_changes(claims, start_ms, end_ms)
    per = moves_per_stream(changes, conn_ids)
    old = onto_old(changes, versions, old_version)
    gaps = [g.seconds for g in delivery_gaps(records, start_ms, end_ms)]
    added = added_delays(records, start_ms, end_ms)
    steady = steady_gaps(records, start_ms, end_ms)
    lost = lost_seqs(records, start_ms, end_ms)
    return DeployReport(
        style=style, workers=sum(1 for v in versions.values() if v == old_version),
        streams=len(per), window_s=(end_ms - start_ms) / 1000, moves=len(changes),
        moves_mean=statistics.fmean(per.values()) if per else 0.0,
        moves_max=max(per.values(), default=0),
        moved_more_than_once=sum(1 for n in per.values() if n > 1),
        never_moved=sum(1 for n in per.values() if n == 0),
        moves_onto_old=len(old), streams_onto_old=len({ch.conn_id for ch in old}),
        moves_after_last_stop=sum(1 for ch in changes if ch.wall_ms > last_stop_ms),
        gaps=len(gaps), gap_p50_s=statistics.median(gaps) if gaps else None,
        gap_p99_s=percentile(gaps, 0.99), gap_max_s=max(gaps) if gaps else None,
        added_p50_s=statistics.median(added) if added else None,
        added_p99_s=percentile(added, 0.99), added_max_s=max(added) if added else None,
        steady_p99_s=percentile(steady, 0.99), steady_max_s=max(steady) if steady else None,
        duplicates=duplicate_deliveries(records, start_ms, end_ms),
        lost=sum(len(s) for s in lost.values()), unowned_at_end=sorted(unowned_at_end),
        lost_by_stream=lost, moves_by_stream=per, note=note)
