"""Table samples for the checker: a thread scanning the lease table straight from the backend
(never through the fault proxy, so the checker keeps its eyes during an injected outage).

With a session table it scans that too, after the lease table (an owner in a lease scan wrote
its session item before, so the session scan sees it), and stamps each owned sample with
``owner_down_ms``: when its owner stopped being a live session, if it is not one now. The
rule is written here again on purpose, from the raw items (the checker does not take the
product's verdict on trust):
- ALIVE, that incarnation, not past its expiry + skew: live;
- ALIVE but silent past expiry + skew: down since its expiry (its fence had passed);
- DEAD or ENDED: down since the earlier of its end and its expiry (a session declared dead
  for silence was not live after its expiry; a goodbye or a report ends it at once);
- replaced by another incarnation: down since the new one started (it starts only once the
  old one is dead or ended), or since first seen so if that is not recorded;
- no session item names it (deleted, never a session): down since the sampler first saw it so.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from holdfast.chaos.evidence import Sample, dump_samples
from holdfast.core.schema import SESSION

__all__ = ["Sampler", "SessionSeen", "owner_down_ms", "sample_items", "session_items"]


def _n(raw: dict[str, Any], name: str) -> int | None:
    value = raw.get(name, {}).get("N") if isinstance(raw.get(name), dict) else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _s(raw: dict[str, Any], name: str) -> str | None:
    value = raw.get(name)
    return value.get("S") if isinstance(value, dict) else None


def sample_items(items: list[dict[str, Any]], wall_ms: int) -> list[Sample]:
    """Lenient parse: a hostile item yields a sample with None for what it lacks."""
    out = []
    for raw in items:
        pk = _s(raw, "Pk") or ""
        out.append(Sample(wall_ms, pk.removeprefix("CONN#"), _s(raw, "desired_state"),
                          _s(raw, "lease_owner"), _n(raw, "lease_expires_at_ms"),
                          _n(raw, "last_seq"), _s(raw, "status"), _n(raw, "lease_epoch"),
                          _n(raw, "updated_at_ms")))
    return out


@dataclass(frozen=True, slots=True)
class SessionSeen:
    """The fields of one session item the checker's liveness rule reads (None: absent)."""

    incarnation: str | None
    state: str | None
    expires_ms: int | None
    ended_ms: int | None
    started_ms: int | None


def session_items(items: list[dict[str, Any]]) -> dict[str, SessionSeen]:
    """Worker id -> its session item, leniently parsed (the key is ``WORKER#<id>``)."""
    out = {}
    for raw in items:
        pk = _s(raw, SESSION.pk) or ""
        if pk.startswith("WORKER#"):
            out[pk.removeprefix("WORKER#")] = SessionSeen(
                _s(raw, SESSION.incarnation), _s(raw, SESSION.state),
                _n(raw, SESSION.expires_at_ms), _n(raw, SESSION.ended_at_ms),
                _n(raw, SESSION.started_at_ms))
    return out


def owner_down_ms(owner: str, session: SessionSeen | None, wall_ms: int, skew_ms: int,
                  missing_since_ms: int) -> int | None:
    """When ``owner`` stopped being a live session (module docstring); None: it is live.
    ``missing_since_ms``: when the sampler first saw it not live (used when the session
    item cannot say: none names it, or it records no time)."""
    incarnation = owner.partition("#")[2]
    if session is None or not incarnation:
        return missing_since_ms
    if session.incarnation != incarnation:
        return session.started_ms or missing_since_ms
    if session.state == "ALIVE":
        expires = session.expires_ms or 0
        return expires if wall_ms > expires + skew_ms else None
    ends = [t for t in (session.ended_ms, session.expires_ms) if t]
    return min(ends) if ends else missing_since_ms


class Sampler:
    """Scan every ``period_s``; samples go to memory and to ``path`` (JSONL). With
    ``session_table`` each owned sample says whether its owner is a live session."""

    def __init__(self, client: Any, table: str, path: Path, period_s: float = 0.25, *,
                 session_table: str | None = None, skew_ms: int = 0) -> None:
        self.client, self.table, self.path, self.period_s = client, table, path, period_s
        self.session_table, self.skew_ms = session_table, skew_ms
        self.missing_since: dict[str, int] = {}  # owner -> first scan it was not live
        self.samples: list[Sample] = []
        self.latest: dict[str, Sample] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _scan(self, table: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        while True:
            resp = self.client.scan(**kwargs)
            items.extend(resp.get("Items", []))
            if not resp.get("LastEvaluatedKey"):
                return items
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def scan_once(self) -> list[Sample]:
        wall = time.time_ns() // 10**6
        got = sample_items(self._scan(self.table), wall)
        if self.session_table:  # after the leases: every owner seen has written its session
            got = self.judge_owners(got, session_items(self._scan(self.session_table)), wall)
        self.samples.extend(got)
        self.latest = {s.conn_id: s for s in got}
        dump_samples(got, self.path)
        return got

    def judge_owners(self, got: list[Sample], sessions: dict[str, SessionSeen],
                     wall_ms: int) -> list[Sample]:
        """``got`` with ``owner_down_ms`` set for owners that are not live sessions."""
        out, missing = [], {}
        for s in got:
            down = None
            if s.owner:
                first = self.missing_since.get(s.owner, wall_ms)
                down = owner_down_ms(s.owner, sessions.get(s.owner.partition("#")[0]),
                                     wall_ms, self.skew_ms, first)
                if down is not None:
                    missing[s.owner] = first
            out.append(s if down is None else replace(s, owner_down_ms=down))
        self.missing_since = missing
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.scan_once()
            except Exception:  # a failed scan is a gap in samples, not a verdict
                self.errors += 1
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))
