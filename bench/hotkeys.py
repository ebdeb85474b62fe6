"""Hot keys at scale: write units per second on the busiest partition key of every table and
index, for the session design and the seed's per-stream heartbeats. Pure functions.

Fed by the per-operation units ``bench/capacity.py`` measured (``units_from_capacity``), or by
``DOCUMENTED`` (AWS's rules: 1 unit per item write up to 1 KB; an index entry whose key moves
costs 2, one deleted and one put; an entry added or removed costs 1), which the measurement
matches. DynamoDB limits each partition to 1,000 write units per second. Every stream item has
its own partition key; the seed index puts every running stream under one partition key value,
``STARTED`` (and, its sort key being ``now + lease``, all new entries land at the same end, so
splitting that value by sort key would not spread the writes either); the owner index has one
key value per worker session; the session table one per worker.

Reads are reported as totals only (no read hot key is close to a limit): the sweeper's scan of
the session table and its index query, at least ``MIN_READ_UNITS`` per call (DynamoDB Local
reports 0 for an empty query; AWS bills an eventually consistent read request 0.5 at least).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from holdfast.core.schema import BACKSTOP_MS

__all__ = [
    "DOCUMENTED",
    "MIN_READ_UNITS",
    "PARTITION_WCU_LIMIT",
    "Design",
    "FailoverResult",
    "Fleet",
    "Load",
    "OpUnits",
    "Units",
    "failover",
    "pace_for_limit",
    "per_connection_hour",
    "steady",
    "units_from_capacity",
]

PARTITION_WCU_LIMIT = 1000.0
MIN_READ_UNITS = 0.5
Design = Literal["sessions", "seed"]


@dataclass(frozen=True, slots=True)
class OpUnits:
    """Write units one item write of an operation costs, per table and index."""

    lease_table: float = 0.0
    seed_index: float = 0.0
    owner_index: float = 0.0
    session_table: float = 0.0

    @property
    def total(self) -> float:
        return self.lease_table + self.seed_index + self.owner_index + self.session_table

    def scaled(self, rate: float) -> OpUnits:
        return OpUnits(*(getattr(self, f.name) * rate for f in fields(self)))

    def plus(self, other: OpUnits) -> OpUnits:
        return OpUnits(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True, slots=True)
class Units:
    """The model's inputs: per-item write units of each operation, read units of the reads."""

    session_heartbeat: OpUnits
    checkpoint: OpUnits
    backstop_refresh: OpUnits
    acquire: OpUnits
    release: OpUnits
    mark_dead: OpUnits
    seed_heartbeat: OpUnits
    scan_per_1000_sessions: float  # read units of one scan of 1,000 session items
    orphan_query: float  # read units of the seed index query (nothing due)
    owner_query: float  # read units of one owner index query (a dead session's streams)


DOCUMENTED = Units(
    session_heartbeat=OpUnits(session_table=1), checkpoint=OpUnits(lease_table=1),
    backstop_refresh=OpUnits(lease_table=1, seed_index=2),
    acquire=OpUnits(lease_table=1, seed_index=2, owner_index=1),
    release=OpUnits(lease_table=1, seed_index=2, owner_index=1),
    mark_dead=OpUnits(session_table=1), seed_heartbeat=OpUnits(lease_table=1, seed_index=2),
    # ~175-byte session items: 1,000 of them are ~43 x 4 KB, half a unit each (eventually
    # consistent); measured on the items SessionStore writes: 21.5.
    scan_per_1000_sessions=21.5, orphan_query=MIN_READ_UNITS,
    # 100 keys-only owner index entries (a stream key and a real ``<worker>#<incarnation>``
    # owner) are over 4 KB: two half units; measured: 1.
    owner_query=2 * MIN_READ_UNITS)

_FROM_CAPACITY = {"session_heartbeat": "session_heartbeat", "checkpoint": "checkpoint",
                  "backstop_refresh": "backstop_refresh", "acquire": "acquire",
                  "release": "release", "mark_dead": "session_mark_dead",
                  "seed_heartbeat": "seed_heartbeat"}


def units_from_capacity(doc: Mapping[str, Any]) -> Units:
    """``Units`` from ``bench/capacity.py``'s JSON (its UpdateItem forms; the batch forms cost
    the same per statement). ``KeyError`` if an operation is missing."""
    ops = doc["ops"]
    writes = {name: OpUnits(**{k: float(v) for k, v in ops[op]["units"].items()
                               if k in OpUnits.__dataclass_fields__})
              for name, op in _FROM_CAPACITY.items()}
    scan = ops["sweeper_scan"]
    per_1000 = float(scan["total"]) * 1000 / max(1, int(scan["items"]))
    return Units(**writes, scan_per_1000_sessions=per_1000,
                 orphan_query=max(MIN_READ_UNITS, float(ops["orphan_query"]["total"])),
                 owner_query=max(MIN_READ_UNITS, float(ops["owner_query"]["total"])))


@dataclass(frozen=True, slots=True)
class Fleet:
    """The fleet and its timings (production defaults)."""

    streams: int = 100_000
    workers: int = 1_000
    heartbeat_s: float = 2.0  # session heartbeat
    checkpoint_s: float = 20.0
    active_share: float = 1.0  # streams whose seq moves between two checkpoints
    backstop_ms: int = BACKSTOP_MS  # refreshed when half is gone
    sweep_s: float = 1.0
    seed_heartbeat_s: float = 5.0
    seed_reconcile_s: float = 60.0  # the seed's per-worker orphan query

    @property
    def per_worker(self) -> float:
        return self.streams / self.workers


@dataclass(frozen=True, slots=True)
class Load:
    """Write units per second on the busiest partition key of each table and index, the
    totals, and read units per second."""

    lease_key: float  # one stream item
    started_key: float  # seed index, partition STARTED
    owner_key: float  # owner index, the busiest owner
    session_key: float  # session table, the busiest worker
    total_wcu_s: float
    total_rcu_s: float

    def hot(self, limit: float = PARTITION_WCU_LIMIT) -> list[str]:
        """Names of the keys over ``limit``."""
        return [n for n in ("lease_key", "started_key", "owner_key", "session_key")
                if getattr(self, n) > limit * (1 + 1e-9)]


def _per_stream(design: Design, f: Fleet, u: Units) -> OpUnits:
    """Write units per second of one held stream in steady state."""
    if design == "seed":
        return u.seed_heartbeat.scaled(1 / f.seed_heartbeat_s)
    backstops = 1 / (f.backstop_ms / 2000)
    # An active stream's backstop refresh is one of its checkpoints with the expiry added.
    plain = max(0.0, f.active_share / f.checkpoint_s - f.active_share * backstops)
    return u.checkpoint.scaled(plain).plus(u.backstop_refresh.scaled(backstops))


def _reads(design: Design, f: Fleet, u: Units) -> float:
    if design == "seed":
        return f.workers * u.orphan_query / f.seed_reconcile_s
    return (u.scan_per_1000_sessions * f.workers / 1000 + u.orphan_query) / f.sweep_s


def steady(design: Design, f: Fleet, u: Units = DOCUMENTED) -> Load:
    """Every stream held, nothing moving."""
    one = _per_stream(design, f, u)
    heartbeat = u.session_heartbeat.scaled(1 / f.heartbeat_s if design == "sessions" else 0.0)
    return Load(lease_key=one.lease_table, started_key=one.seed_index * f.streams,
                owner_key=one.owner_index * f.per_worker, session_key=heartbeat.session_table,
                total_wcu_s=one.total * f.streams + heartbeat.total * f.workers,
                total_rcu_s=_reads(design, f, u))


def per_connection_hour(design: Design, f: Fleet, u: Units = DOCUMENTED) -> dict[str, float]:
    """Steady-state write units per connection-hour by table and index, ``total``, and the
    read units (``reads``)."""
    one = _per_stream(design, f, u).scaled(3600)
    beats = u.session_heartbeat.scaled(
        3600 / f.heartbeat_s / f.per_worker if design == "sessions" else 0.0)
    both = one.plus(beats)
    out = {fl.name: round(getattr(both, fl.name), 3) for fl in fields(both)}
    out["total"] = round(both.total, 3)
    out["reads"] = round(_reads(design, f, u) * 3600 / f.streams, 3)
    return out


@dataclass(frozen=True, slots=True)
class FailoverResult:
    """``share`` of the workers died; their ``moved`` streams are released by the sweeper at
    ``releases_s`` and claimed by the survivors at ``claims_s``. The seed design is given the
    same release + claim writes (it has no release: an expired lease is claimed directly, so
    this overstates it by one release per stream; it changes no verdict), no sessions."""

    design: Design
    share: float
    moved: int
    releases_s: float
    claims_s: float
    load: Load
    duration_s: float  # first release to last claim (detection not included)
    within_limit: bool


def failover(design: Design, f: Fleet, releases_s: float, claims_s: float, *,
             share: float = 0.1, u: Units = DOCUMENTED,
             limit: float = PARTITION_WCU_LIMIT) -> FailoverResult:
    """Load while the streams of ``share`` of the workers move. Background is the steady
    state of every stream (conservative: the dead workers' own writes have stopped). Claims
    cannot outpace releases; the sweeper releases one dead session at a time (so its owner
    key takes every release) and claims spread evenly over the survivors."""
    base = steady(design, f, u)
    dead = round(f.workers * share) if design == "sessions" else 0  # sessions marked DEAD
    moved = round(f.streams * share)
    claims = min(claims_s, releases_s)
    duration = moved / claims if claims > 0 else float("inf")
    per_s = 1 / duration if duration and duration != float("inf") else 0.0
    survivors = max(1, f.workers - round(f.workers * share))
    move = u.release.scaled(releases_s).plus(u.acquire.scaled(claims))
    owner = max(u.release.owner_index * releases_s, u.acquire.owner_index * claims / survivors)
    load = Load(
        lease_key=base.lease_key + u.release.lease_table + u.acquire.lease_table,
        started_key=base.started_key + move.seed_index,
        owner_key=base.owner_key + owner,
        session_key=base.session_key + (u.mark_dead.session_table if dead else 0.0),
        total_wcu_s=base.total_wcu_s + move.total + u.mark_dead.total * dead * per_s,
        total_rcu_s=base.total_rcu_s + u.owner_query * dead * per_s)
    return FailoverResult(design, share, moved, releases_s, claims, load, duration,
                          not load.hot(limit))


def pace_for_limit(design: Design, f: Fleet, *, share: float = 0.1, u: Units = DOCUMENTED,
                   limit: float = PARTITION_WCU_LIMIT, headroom: float = 1.0
                   ) -> FailoverResult | None:
    """The fastest failover (releases/s = claims/s) that keeps the ``STARTED`` partition
    within ``headroom`` x ``limit``; None if the steady state alone is over it."""
    spare = limit * headroom - steady(design, f, u).started_key
    per_move = u.release.seed_index + u.acquire.seed_index
    if spare <= 0 or per_move <= 0:
        return None
    rate = spare / per_move
    return failover(design, f, rate, rate, share=share, u=u, limit=limit)
