"""Rebalancing (issue 12): scale out from 2 to 4 workers at N = 100 streams.

Two workers take 100 streams and hold them past the cool-down (a stream claimed within it may
not move, so a scale-out right after a start would only measure the cool-down); then two more
start (t0 = both ready). The lease table is polled (owner = ``lease_owner``'s worker, and
``lease_epoch``) until every stream is owned and every worker is within ±max(1, 10 %) of its
fair share (total / workers): the time until balanced. Moves = the epoch increments after the
new workers started (each one acquisition), beside the least that must move (the held
streams above the share at t0). Unowned time per move: the ``unowned_ms`` of the claimers'
"claimed" lines with ``moved_at_ms`` (0 for a warm handoff). Delivery gap per move, and the
delay it added beyond the feed's spacing: ``holdfast.fleet.deploy``'s, from the handled
records between t0 and settled. Seq gap (lost) and duplicates from the handled
records, as in ``scenarios.handover``. Then, once nothing has moved for ``settle_s``, a quiet
period in which nothing may move, and the "never straight back" check: no stream claimed
again by the worker that shed it within the cool-down.

Production variant: ``FleetTiming.production()`` (cool-down 60 s, a decision every 2 s) and
``bench.crash_production``'s production worker settings, quiet 5 min. Scaled: ``FleetTiming()``
(cool-down 10 s, decisions every 1 s), quiet 60 s.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.crash_production import plan_for
from bench.harness import BenchFleet, dist, now_ms
from bench.scenarios import loss
from holdfast.core.model import LeaseItem
from holdfast.core.table import scan_items
from holdfast.fleet.deploy import added_delays, delivery_gaps
from holdfast.fleet.recorder import read_records
from holdfast.fleet.timing import FleetTiming

__all__ = ["BALANCE_TARGET_S", "UNOWNED_TARGET_S", "LogEvent", "Variant", "balanced",
           "claim_counts", "held_by_worker", "max_in_motion", "min_moves", "moved_twice", "moves",
           "parse_log",
           "scale_out", "shares", "straight_back", "variant", "worker_of"]

BALANCE_TARGET_S = 30.0  # t0 -> balanced
UNOWNED_TARGET_S = 1.0  # p99 of a moved stream's unowned time
SHED_MSG = "shedding stream (rebalancing)"
Snap = dict[str, tuple[str | None, int]]  # conn_id -> (owner's worker, epoch)


# -- the pure parts ------------------------------------------------------------------------
def worker_of(owner: str | None) -> str | None:
    """The worker id of a ``lease_owner`` ("<worker>#<incarnation>")."""
    return owner.split("#", 1)[0] if owner else None


def held_by_worker(snap: Snap, workers: Sequence[str]) -> dict[str, int]:
    """Streams each of ``workers`` holds in ``snap`` (0 for those holding none)."""
    held = Counter(w for w, _ in snap.values() if w is not None)
    return {w: held.get(w, 0) for w in workers}


def shares(total: int, workers: Sequence[str]) -> dict[str, float]:
    """Fair share of each worker: the total over the live workers (capacities are large)."""
    return {w: total / len(workers) for w in workers} if workers else {}


def balanced(snap: Snap, workers: Sequence[str]) -> bool:
    """Every stream owned by one of ``workers``, each within ±max(1, 10 %) of its share."""
    if any(w not in workers for w, _ in snap.values()):
        return False  # unowned, or held by a worker that is not counted
    held = held_by_worker(snap, workers)
    return all(abs(held[w] - s) <= max(1.0, 0.1 * s) + 1e-9
               for w, s in shares(len(snap), workers).items())


def min_moves(held: Mapping[str, int], workers: Sequence[str]) -> int:
    """The least streams that must move: the sum of what each worker holds above its share."""
    fair = shares(sum(held.values()), workers)
    return math.ceil(sum(max(0.0, held.get(w, 0) - s) for w, s in fair.items()) - 1e-9)


def claim_counts(events: Iterable[LogEvent], ids: Container[str], t0_ms: int,
                 t1_ms: int) -> dict[str, int]:
    """Acquisitions of each stream in ``ids`` from ``t0_ms`` to ``t1_ms``: the claimers'
    "claimed" lines (an epoch is a clock value now, so its increments count nothing)."""
    return Counter(e.conn_id for e in events if e.msg == "claimed" and e.conn_id is not None
                   and e.conn_id in ids and t0_ms <= e.ms <= t1_ms)


def moves(counts: Mapping[str, int]) -> int:
    """All acquisitions in ``claim_counts``: a stream moved twice counts twice."""
    return sum(counts.values())


def moved_twice(counts: Mapping[str, int]) -> list[str]:
    """Streams acquired more than once."""
    return sorted(c for c, n in counts.items() if n > 1)


@dataclass(frozen=True)
class LogEvent:
    """One worker log line: wall ms, message, worker, stream and the line's other fields."""

    ms: int
    msg: str
    worker: str
    conn_id: str | None
    fields: dict[str, Any] = field(default_factory=dict)


def _ms(stamp: str) -> int:
    return int(dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f%z").timestamp() * 1000)


def parse_log(lines: Iterable[str]) -> list[LogEvent]:
    """The JSON lines of a worker log (Powertools' format) as events; others are skipped."""
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
            out.append(LogEvent(_ms(rec["timestamp"]), str(rec["message"]),
                                str(rec.get("worker_id", "")), rec.get("conn_id"), rec))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def max_in_motion(claims: Sequence[LogEvent]) -> int:
    """The most moved streams unowned at once: each from its claim's ``ms - unowned_ms`` to
    its claim (the claimers' "claimed" lines with ``moved_at_ms``)."""
    edges = sorted(edge for e in claims if e.fields.get("moved_at_ms") is not None
                   and isinstance(e.fields.get("unowned_ms"), int)
                   for edge in ((e.ms - e.fields["unowned_ms"], 1), (e.ms, -1)))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def straight_back(events: Sequence[LogEvent], cooldown_ms: int) -> list[str]:
    """Streams claimed again by the worker that shed them within ``cooldown_ms`` of the shed."""
    sheds = [(e.worker, e.conn_id, e.ms) for e in events if e.msg == SHED_MSG]
    claims = [(e.worker, e.conn_id, e.ms) for e in events if e.msg == "claimed"]
    return sorted({c for w, c, t in sheds for w2, c2, t2 in claims
                   if c and c2 == c and w2 == w and t < t2 < t + cooldown_ms})


# -- the run ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str
    timing: FleetTiming
    quiet_s: float
    balance_timeout_s: float
    worker_env: dict[str, str] = field(default_factory=dict)
    runner_env: dict[str, str] = field(default_factory=dict)


def variant(production: bool, quiet_s: float | None = None) -> Variant:
    """The production variant (5 min quiet) or the scaled one (``FleetTiming()``, 60 s)."""
    if production:
        p = plan_for("ours", 1)
        return Variant("production", FleetTiming.production(), 300.0 if quiet_s is None
                       else quiet_s, 120.0, dict(p.worker_env), dict(p.runner_env))
    return Variant("scaled", FleetTiming(), 60.0 if quiet_s is None else quiet_s, 60.0)


def _snap(bf: BenchFleet, ids: set[str]) -> Snap:
    return {i.conn_id: (worker_of(i.lease_owner), i.epoch) for i in scan_items(bf.ddb, bf.pf.table)
            if isinstance(i, LeaseItem) and i.conn_id in ids}


@dataclass
class _Watch:
    """Polls the table; keeps the last snapshot and when any stream last changed owner."""

    bf: BenchFleet
    ids: set[str]
    snap: Snap = field(default_factory=dict)
    changed_ms: int = 0
    changes: int = 0  # owner changes seen between polls (a lower bound of the moves)

    def poll(self) -> Snap:
        new = _snap(self.bf, self.ids)
        diff = sum(1 for c, v in new.items() if self.snap.get(c, (None, 0)) != v)
        if diff:
            self.changed_ms, self.changes = now_ms(), self.changes + diff
        self.snap = new
        return new

    def until(self, pred: Callable[[Snap], bool], timeout_s: float, poll_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.bf.handled.poll()
            if pred(self.poll()):
                return True
            time.sleep(poll_s)
        return False

    def quiet_for(self, seconds: float) -> Callable[[Snap], bool]:
        return lambda _s: now_ms() - self.changed_ms >= seconds * 1000


def _events(bf: BenchFleet) -> list[LogEvent]:
    out: list[LogEvent] = []
    for path in sorted(bf.pf.fleet.run_dir.glob("worker-*.log")):
        out += parse_log(path.read_text(errors="replace").splitlines())
    return out


def _hold_still(bf: BenchFleet, w: _Watch, ids: list[str], first: list[str],
                t: FleetTiming) -> None:
    """``first`` take every stream, balanced among them, and hold them past the cool-down."""
    for name in first:
        bf.worker(name)
    t_ins = now_ms()
    bf.create(ids)
    limit = 3 * t.cooldown_s + 60
    if not w.until(lambda s: len(s) == len(ids) and balanced(s, first) and all(
            bf.handled.first_after(c, t_ins) for c in ids), limit, 0.25):
        raise RuntimeError(f"{first} did not take {len(ids)} streams: "
                           f"{held_by_worker(w.snap, first)}")
    if not w.until(w.quiet_for(t.cooldown_s + 2), limit, 0.5):
        raise RuntimeError(f"{first} never held their streams still")


def _from_logs(out: dict[str, Any], bf: BenchFleet, w: _Watch, base_ms: int, *,
               quiet: tuple[int, int], cooldown_ms: int) -> None:
    """The claimers' unowned times, the sheds, and the claims and sheds in the quiet period."""
    q0, q1 = quiet
    after = [e for e in _events(bf) if e.ms >= base_ms and e.conn_id in w.ids]
    claims = [e for e in after if e.msg == "claimed"]
    moved = [e for e in claims if e.fields.get("moved_at_ms") is not None]
    out["claims_logged"] = len(claims)
    out["moved_claims_logged"] = len(moved)
    out["max_unowned_at_once"] = max_in_motion(moved)
    out["unowned_s"] = dist([e.fields["unowned_ms"] / 1000 for e in moved
                             if e.fields.get("unowned_ms") is not None])
    out["sheds_logged"] = sum(1 for e in after if e.msg == SHED_MSG)
    out["quiet_sheds_logged"] = sum(1 for e in after if e.msg == SHED_MSG and q0 <= e.ms <= q1)
    out["quiet_claims_logged"] = sum(1 for e in claims if q0 <= e.ms <= q1)
    out["straight_back"] = straight_back(after, cooldown_ms)


def _scale(out: dict[str, Any], bf: BenchFleet, w: _Watch, ids: list[str], v: Variant, *,
           say: Callable[[str], None]) -> None:
    t, tag = v.timing, f"[rebalance, {v.name}]"
    first, everyone = ["rb-a", "rb-b"], ["rb-a", "rb-b", "rb-c", "rb-d"]
    _hold_still(bf, w, ids, first, t)
    base, base_ms = w.poll(), now_ms()
    out["held_before"] = held_by_worker(base, everyone)
    out["min_moves"] = min_moves(out["held_before"], everyone)
    say(f"{tag} held {out['held_before']} past the cool-down; starting 2 more workers")
    procs = [bf.pf.start_worker(n) for n in everyone[2:]]
    for p in procs:
        bf.wait_started(p)
    t0 = now_ms()
    out["workers_ready_s"] = round((t0 - base_ms) / 1000, 3)
    out["base_ms"], out["t0_ms"] = base_ms, t0
    ok = w.until(lambda s: balanced(s, everyone), v.balance_timeout_s, 0.2)
    out["balanced_s"] = round((now_ms() - t0) / 1000, 3) if ok else None
    out["held_at_balanced"] = held_by_worker(w.snap, everyone)
    say(f"{tag} balanced after {out['balanced_s']} s: {out['held_at_balanced']}")
    w.until(w.quiet_for(max(10.0, 5 * t.balance_interval_ms / 1000)), 120, 0.25)
    settled, settled_ms = w.snap, now_ms()
    out["last_move_s"] = round((w.changed_ms - t0) / 1000, 3)
    counts = claim_counts(_events(bf), w.ids, base_ms, settled_ms)
    out["moves"] = moves(counts)
    out["moved_twice"] = moved_twice(counts)
    out["held_settled"] = held_by_worker(settled, everyone)
    out["balanced_settled"] = balanced(settled, everyone)
    say(f"{tag} settled: {out['held_settled']}, {out['moves']} moves; quiet {v.quiet_s:g} s")
    q0, changes0 = now_ms(), w.changes
    w.until(lambda _s: False, v.quiet_s, 1.0)
    q1 = now_ms()
    w.poll()
    out["quiet_moves"] = moves(claim_counts(_events(bf), w.ids, q0, q1))
    out["quiet_owner_changes_seen"] = w.changes - changes0
    bf.handled.poll()
    out["stalled"] = sorted(c for c in ids if not bf.handled.first_after(c, q1 - 3000))
    out["seq_gap"], out["duplicates"] = loss(bf, ids)
    # Unowned time says nothing of a warm handoff (never unowned): the delivery gap does.
    records = [r for r in read_records(bf.pf.fleet.record_dir) if r.conn_id in w.ids]
    out["gap_per_move_s"] = dist([g.seconds for g in delivery_gaps(records, t0, settled_ms)])
    out["added_per_move_s"] = dist(added_delays(records, t0, settled_ms))
    _from_logs(out, bf, w, base_ms, quiet=(q0, q1), cooldown_ms=round(t.cooldown_s * 1000))
    say(f"{tag} moves {out['moves']} (min {out['min_moves']}), unowned {out['unowned_s']}, "
        f"quiet moves {out['quiet_moves']}, gap {out['seq_gap']}, dups {out['duplicates']}")


def scale_out(run_dir: Path, *, production: bool = True, streams: int = 100,
              quiet_s: float | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the scenario on a fleet of its own; every figure of the report section."""
    v = variant(production, quiet_s)
    t = v.timing
    out: dict[str, Any] = {"variant": v.name, "streams": streams, "quiet_s": v.quiet_s,
                           "cooldown_s": t.cooldown_s, "lease_s": t.lease_s,
                           "heartbeat_s": t.heartbeat_s,
                           "balance_interval_ms": t.balance_interval_ms,
                           "target_balanced_s": BALANCE_TARGET_S,
                           "target_unowned_p99_s": UNOWNED_TARGET_S,
                           "motion_bound": max(1, streams // 10)}
    bf = BenchFleet(run_dir, "ours", t, worker_env=v.worker_env, runner_env=v.runner_env,
                    name=f"rebalance-{v.name}").start()
    ids = [f"rb-{i:03d}" for i in range(streams)]
    w = _Watch(bf, set(ids))
    try:
        _scale(out, bf, w, ids, v, say=say)
    except Exception as exc:  # report what failed with what was measured
        out["error"] = f"{type(exc).__name__}: {exc}"
        say(f"[rebalance, {v.name}] failed: {out['error']}")
    finally:
        out["close"] = bf.close()
        out["shed_counted"] = sum(int(e.fields.get("shed", 0)) for e in _events(bf)
                                  if e.msg == "worker stopped")
        out["logs"] = str(bf.pf.fleet.run_dir)
    return out
