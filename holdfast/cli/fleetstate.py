"""Fleet summaries computed from the lease items, as pure functions (no clock, no boto3).

``ls`` shows one row per item; ``status`` groups the items by lease owner: the owners of live
leases *are* the workers (there is no other registry), and STARTED items nobody holds are the
streams waiting for a claim.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.exceptions import MalformedItem
from holdfast.core.model import LeaseItem
from holdfast.core.redact import scrub
from holdfast.core.sessions import SessionItem

__all__ = ["FleetStatus", "SessionRow", "StreamRow", "fleet_status", "session_rows",
           "stream_row"]


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One worker session in ``holdfast status``: who is alive, and who died recently."""

    owner: str
    state: str  # ALIVE, ENDED, DEAD; "SILENT" for an ALIVE one past its expiry (not yet swept)
    held: int
    capacity: int
    heartbeat_age_ms: int
    expires_in_ms: int
    reaped: bool
    draining: bool = False  # ``holdfast drain``: shedding everything, claiming nothing
    target: float | None = None  # a live rebalancing target: the share it is aimed at

    def to_json(self) -> dict[str, Any]:
        return {"owner": self.owner, "state": self.state, "held": self.held,
                "capacity": self.capacity, "heartbeat_age_ms": self.heartbeat_age_ms,
                "expires_in_ms": self.expires_in_ms, "reaped": self.reaped,
                "draining": self.draining, "target": self.target}


def session_rows(items: list[SessionItem | MalformedItem], now_ms: int) -> list[SessionRow]:
    """Sessions, live ones first; malformed session items are left out (the sweeper logs them)."""
    rows = []
    for item in items:
        if isinstance(item, MalformedItem):
            continue
        state = item.state.value
        if state == "ALIVE" and item.expires_at_ms <= now_ms:
            state = "SILENT"
        target = item.directive.share if item.directive is not None and item.directive.live(
            now_ms) else None
        rows.append(SessionRow(item.owner, state, item.held, item.capacity,
                               now_ms - item.heartbeat_at_ms, item.expires_at_ms - now_ms,
                               item.reaped, item.draining, target))
    return sorted(rows, key=lambda r: (r.state != "ALIVE", r.owner))


@dataclass(frozen=True, slots=True)
class StreamRow:
    """One line of ``holdfast ls``."""

    conn_id: str
    desired_state: str
    owner: str | None
    lease_left_ms: int | None  # None: nobody holds a live lease
    last_seq: int | None
    status: str | None
    last_error: str | None
    epoch: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.conn_id, "desired_state": self.desired_state, "owner": self.owner,
                "lease_left_ms": self.lease_left_ms, "last_seq": self.last_seq,
                "status": self.status, "last_error": self.last_error, "epoch": self.epoch}


def _live(item: LeaseItem, now_ms: int) -> bool:
    return bool(item.lease_owner) and (item.lease_expires_at_ms or 0) > now_ms


def stream_row(item: LeaseItem, now_ms: int, *, log_paths: bool = False) -> StreamRow:
    """The ``ls`` row of one item at wall time ``now_ms``.

    ``last_error`` is scrubbed of the item's ``ws_url`` secrets: older workers and other
    writers may have stored them there.
    """
    live = _live(item, now_ms)
    return StreamRow(
        conn_id=item.conn_id, desired_state=item.desired_state,
        owner=item.lease_owner if live else None,
        lease_left_ms=(item.lease_expires_at_ms or 0) - now_ms if live else None,
        last_seq=item.last_seq, status=item.status,
        last_error=item.last_error and scrub(item.last_error, item.ws_url, paths=log_paths),
        epoch=item.epoch)


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """What ``holdfast status`` reports."""

    workers: dict[str, int]  # owner -> live leases
    streams: int
    started: int
    stopped: int
    unowned_started: list[str]
    backoff: list[str]
    malformed: list[str]
    queue_depth: int | None = None
    dlq_depth: int | None = None
    oldest_unowned_ms: int | None = None
    notes: list[str] = field(default_factory=list)
    sessions: list[SessionRow] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"sessions": [r.to_json() for r in self.sessions], "workers": self.workers,
                "streams": self.streams, "started": self.started,
                "stopped": self.stopped, "unowned_started": self.unowned_started,
                "oldest_unowned_ms": self.oldest_unowned_ms, "backoff": self.backoff,
                "malformed": self.malformed, "queue_depth": self.queue_depth,
                "dlq_depth": self.dlq_depth, "notes": self.notes}


def fleet_status(items: list[LeaseItem | MalformedItem], now_ms: int,
                 updated_ms: dict[str, int] | None = None) -> FleetStatus:
    """Group the items by owner; list the STARTED ones nobody holds (BACKOFF ones apart).

    An unowned stream's age counts from its lease expiry, or, for a released or never-claimed
    one (expiry 0), from its last write (``updated_ms``, from ``updated_at_ms``) when known.
    """
    updated_ms = updated_ms or {}
    workers: Counter[str] = Counter()
    unowned: list[str] = []
    backoff: list[str] = []
    malformed: list[str] = []
    oldest: int | None = None
    started = stopped = 0
    for item in items:
        if isinstance(item, MalformedItem):
            malformed.append(item.key)
            continue
        if item.started:
            started += 1
        else:
            stopped += 1
        if _live(item, now_ms):
            workers[str(item.lease_owner)] += 1
            continue
        if not item.started:
            continue
        expires = item.lease_expires_at_ms or 0
        if item.status == "BACKOFF" and expires > now_ms:
            backoff.append(item.conn_id)  # waiting for its retry time on purpose
            continue
        unowned.append(item.conn_id)
        since = expires if expires > 0 else updated_ms.get(item.conn_id, 0)
        if since > 0:
            age = max(0, now_ms - since)
            oldest = age if oldest is None else max(oldest, age)
    return FleetStatus(workers=dict(sorted(workers.items())), streams=started + stopped,
                       started=started, stopped=stopped, unowned_started=sorted(unowned),
                       backoff=sorted(backoff), malformed=sorted(malformed),
                       oldest_unowned_ms=oldest)
