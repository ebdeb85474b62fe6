"""The timeline around a violation: what the soak did, the upstream saw, the table said and the
workers handled, in one list sorted by time (seconds relative to the violation)."""

from __future__ import annotations

from holdfast.chaos.evidence import Evidence
from holdfast.chaos.verdict import Violation

__all__ = ["timeline"]


def timeline(ev: Evidence, v: Violation, before_ms: int = 8000, after_ms: int = 4000,
             limit: int = 60) -> list[str]:
    at = v.at_ms or (max((s.wall_ms for s in ev.samples), default=0))
    lo, hi = at - before_ms, at + after_ms
    rows: list[tuple[int, str]] = []
    for a in ev.actions:
        if lo <= a.wall_ms <= hi and (a.target == v.conn_id or a.kind.startswith("sig")
                                      or a.kind in ("fault", "restart")):
            rows.append((a.wall_ms, f"soak: {a.kind} {a.target} {a.detail}".rstrip()))
    for f in ev.faults:
        if f.start_ms <= hi and f.end_ms >= lo:
            rows.append((f.start_ms, f"dynamodb fault {f.kind} until +{f.end_ms - f.start_ms} ms"))
    for c in ev.conns:
        if c.stream != v.conn_id:
            continue
        if lo <= c.open_ms <= hi:
            rows.append((c.open_ms, f"upstream: #{c.conn_no} opened by {c.worker}"))
        if c.close_ms is not None and lo <= c.close_ms <= hi:
            rows.append((c.close_ms, f"upstream: #{c.conn_no} of {c.worker} closed "
                                     f"(sent {c.first_seq}..{c.last_seq})"))
    runs: list[list[int | str]] = []  # consecutive handled records of one worker
    for h in sorted((h for h in ev.handled if h.conn_id == v.conn_id and lo <= h.wall_ms <= hi),
                    key=lambda h: (h.wall_ms, h.seq)):
        if runs and runs[-1][0] == h.worker_id:
            runs[-1][2], runs[-1][4] = h.wall_ms, h.seq
        else:
            runs.append([h.worker_id, h.wall_ms, h.wall_ms, h.seq, h.seq])
    for worker, t0, t1, s0, s1 in runs:
        rows.append((int(t0), f"handled: {worker} seq {s0}..{s1} until {int(t1) - at:+d} ms"))
    prev: tuple[object, ...] | None = None
    for s in sorted(ev.samples, key=lambda s: s.wall_ms):
        if s.conn_id != v.conn_id or not lo <= s.wall_ms <= hi:
            continue
        key = (s.state, s.live_owner(), s.status, s.epoch)
        if key != prev:
            rows.append((s.wall_ms, f"table: {s.state} owner={s.live_owner()} status={s.status} "
                                    f"epoch={s.epoch} last_seq={s.last_seq}"))
            prev = key
    rows.sort(key=lambda r: r[0])
    return [f"  {(t - at) / 1000:+8.3f} s  {text}" for t, text in rows[-limit:]]
