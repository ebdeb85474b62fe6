"""Fleet summaries computed from the lease and session items, as pure functions (no clock,
no boto3).

A stream is *held* only while its ``lease_owner`` names a live session (``owner_liveness``,
the verdict the router and the sweeper's owner audit use): with sessions, an owned item's
``lease_expires_at_ms`` is a one-hour backstop, so an item whose owner is DEAD, ENDED,
replaced, silent past its TTL or unknown is *stranded*, not held, and counts as unowned until
the reaper releases it. Without the session items (none read) the old rule stands: an owner
with an unexpired lease holds it.

``ls`` shows one row per item; ``status`` groups the items by live owner and lists the STARTED
ones nobody holds (stranded ones with their owner and the verdict's reason).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.exceptions import MalformedItem
from holdfast.core.liveness import Liveness, owner_liveness, session_owner
from holdfast.core.model import LeaseItem
from holdfast.core.redact import scrub
from holdfast.core.schema import SessionState, worker_of_session_pk
from holdfast.core.sessions import SessionItem

__all__ = ["FleetStatus", "Holding", "SessionRow", "StrandedRow", "StreamRow", "fleet_status",
           "holding", "session_rows", "sessions_by_worker", "stream_row"]

Sessions = Mapping[str, SessionItem | MalformedItem]  # worker id -> its session item as read


def sessions_by_worker(items: Iterable[SessionItem | MalformedItem]
                       ) -> dict[str, SessionItem | MalformedItem]:
    """The session items keyed by worker id, a malformed one too (its worker's streams are
    stranded until it is fixed or deleted: the sweeper cannot judge it); one whose key names
    no worker is left out."""
    out: dict[str, SessionItem | MalformedItem] = {}
    for i in items:
        if isinstance(i, SessionItem):
            out[i.worker_id] = i
        else:
            with contextlib.suppress(ValueError):
                out[worker_of_session_pk(i.key)] = i
    return out


@dataclass(frozen=True, slots=True)
class Holding:
    """Who holds one item: ``held`` by a live owner, else ``stranded`` (a reason) if it names
    an owner that is not live. ``left_ms``: the holder's time left (its session's, not the
    backstop); ``since_ms``: when its owner stopped being live, when known."""

    held: bool
    stranded: str | None = None
    left_ms: int | None = None
    since_ms: int | None = None
    # ``left_ms`` is the item's own expiry (sessions not read): while a session holds a stream
    # that is a far backstop (an hour, refreshed), not how long a silent holder keeps it.
    backstop: bool = False
    # Stranded with nobody to release it: its owner's session item is malformed (the sweeper
    # cannot judge it, so neither reaps nor audits it away) until it is fixed or deleted.
    stuck: bool = False


def holding(item: LeaseItem, now_ms: int, sessions: Sessions | None,
            skew_ms: int = 0) -> Holding:
    """The holding of ``item`` at ``now_ms``; ``sessions`` None: not read (expiry rule)."""
    owner = item.lease_owner
    if not owner:
        return Holding(False)
    if sessions is None:
        expires = item.lease_expires_at_ms or 0
        return (Holding(True, left_ms=expires - now_ms, backstop=True) if expires > now_ms
                else Holding(False))
    parsed = session_owner(owner)
    session = sessions.get(parsed[0]) if parsed else None
    if isinstance(session, MalformedItem):
        return Holding(False, f"{Liveness.SILENT.value}: session item malformed "
                              f"({session.reason}): fix or delete it", stuck=True)
    verdict, why = owner_liveness(owner, session, now_ms, skew_ms)
    if verdict is Liveness.LIVE and session is not None:
        return Holding(True, left_ms=session.expires_at_ms - now_ms)
    return Holding(False, f"{verdict.value}: {why}", since_ms=_down_since(verdict, session))


def _down_since(verdict: Liveness, session: SessionItem | None) -> int | None:
    if session is None:
        return None  # no session item names it: when it vanished is not in the table
    if verdict is Liveness.SILENT:
        return session.expires_at_ms
    if session.state is SessionState.ALIVE:  # a newer incarnation replaced the owner's
        return session.started_at_ms or None
    return session.ended_at_ms or session.expires_at_ms


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
    version: str = ""  # HOLDFAST_WORKER_VERSION ("": not known)

    def to_json(self) -> dict[str, Any]:
        return {"owner": self.owner, "state": self.state, "held": self.held,
                "capacity": self.capacity, "heartbeat_age_ms": self.heartbeat_age_ms,
                "expires_in_ms": self.expires_in_ms, "reaped": self.reaped,
                "draining": self.draining, "target": self.target,
                "version": self.version or None}


def session_rows(items: list[SessionItem | MalformedItem], now_ms: int, *,
                 skew_ms: int = 0) -> list[SessionRow]:
    """Sessions, live ones first; malformed session items are left out (``status`` notes them,
    the sweeper logs them).
    An ALIVE one silent past its TTL and the skew (``SessionItem.live``, the test every other
    reader applies: its streams are listed as held until then) shows as SILENT."""
    rows = []
    for item in items:
        if isinstance(item, MalformedItem):
            continue
        state = item.state.value
        if item.state is SessionState.ALIVE and not item.live(now_ms, skew_ms):
            state = "SILENT"
        target = item.directive.share if item.directive is not None and item.directive.live(
            now_ms) else None
        rows.append(SessionRow(item.owner, state, item.held, item.capacity,
                               now_ms - item.heartbeat_at_ms, item.expires_at_ms - now_ms,
                               item.reaped, item.draining, target, item.version))
    return sorted(rows, key=lambda r: (r.state != "ALIVE", r.owner))


@dataclass(frozen=True, slots=True)
class StreamRow:
    """One line of ``holdfast ls``."""

    conn_id: str
    desired_state: str
    owner: str | None  # the item's lease_owner, live or not (``stranded`` says which)
    lease_left_ms: int | None  # the holder's session time left; None: nobody holds it
    last_seq: int | None
    status: str | None
    last_error: str | None
    epoch: int
    stranded: str | None = None  # owned by a session that is not live: the verdict's reason
    backstop: bool = False  # lease_left_ms is the item's backstop expiry (sessions not read)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.conn_id, "desired_state": self.desired_state, "owner": self.owner,
                "lease_left_ms": self.lease_left_ms, "last_seq": self.last_seq,
                "status": self.status, "last_error": self.last_error, "epoch": self.epoch,
                "held": self.lease_left_ms is not None, "stranded": self.stranded,
                "lease_left_is_backstop": self.backstop}


def stream_row(item: LeaseItem, now_ms: int, *, log_paths: bool = False,
               sessions: Sessions | None = None, skew_ms: int = 0) -> StreamRow:
    """The ``ls`` row of one item at wall time ``now_ms``.

    ``last_error`` is scrubbed of the item's ``ws_url`` secrets: older workers and other
    writers may have stored them there.
    """
    h = holding(item, now_ms, sessions, skew_ms)
    owner = item.lease_owner if h.held or h.stranded else None
    return StreamRow(
        conn_id=item.conn_id, desired_state=item.desired_state, owner=owner,
        lease_left_ms=h.left_ms, last_seq=item.last_seq, status=item.status,
        last_error=item.last_error and scrub(item.last_error, item.ws_url, paths=log_paths),
        epoch=item.epoch, stranded=h.stranded, backstop=h.backstop)


@dataclass(frozen=True, slots=True)
class StrandedRow:
    """A STARTED stream owned by a session that is not live: the reaper releases it."""

    conn_id: str
    owner: str
    reason: str  # "<verdict>: <why>" (``owner_liveness``)
    age_ms: int | None  # since its owner stopped being live, when the table says
    stuck: bool = False  # nobody releases it (``Holding.stuck``)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.conn_id, "owner": self.owner, "reason": self.reason,
                "age_ms": self.age_ms, "stuck": self.stuck}


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """What ``holdfast status`` reports."""

    workers: dict[str, int]  # live owner -> streams it holds
    streams: int
    started: int
    stopped: int
    unowned_started: list[str]  # nobody holds them: unowned, or stranded (listed apart too)
    backoff: list[str]
    malformed: list[str]
    # Parked as INVALID by a claim (the item breaks the schema), until their quarantine ends;
    # released to a named successor that has not taken them yet (its hold, seconds).
    quarantined: list[str] = field(default_factory=list)
    handing_over: list[str] = field(default_factory=list)
    queue_depth: int | None = None
    dlq_depth: int | None = None
    oldest_unowned_ms: int | None = None
    notes: list[str] = field(default_factory=list)
    sessions: list[SessionRow] = field(default_factory=list)
    stranded: list[StrandedRow] = field(default_factory=list)

    def versions(self) -> dict[str, tuple[int, int]]:
        """What the live workers run: version -> (workers, streams they hold); "" is not
        known. Two or more versions at once: a deploy (or a rollback) is under way."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.sessions:
            if r.state == "ALIVE":
                workers, held = out.get(r.version, (0, 0))
                out[r.version] = (workers + 1, held + r.held)
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {"sessions": [r.to_json() for r in self.sessions],
                "versions": {v or "unknown": {"workers": w, "streams": n}
                             for v, (w, n) in self.versions().items()},
                "workers": self.workers,
                "streams": self.streams, "started": self.started,
                "stopped": self.stopped, "unowned_started": self.unowned_started,
                "stranded": [r.to_json() for r in self.stranded],
                "oldest_unowned_ms": self.oldest_unowned_ms, "backoff": self.backoff,
                "quarantined": self.quarantined, "handing_over": self.handing_over,
                "malformed": self.malformed, "queue_depth": self.queue_depth,
                "dlq_depth": self.dlq_depth, "notes": self.notes}


def fleet_status(items: list[LeaseItem | MalformedItem], now_ms: int,
                 updated_ms: dict[str, int] | None = None, *,
                 sessions: Sessions | None = None, skew_ms: int = 0) -> FleetStatus:
    """Group the items by live owner; list the STARTED ones nobody holds (those waiting on
    purpose apart: BACKOFF, quarantined INVALID, or held for a named successor).

    An unowned stream's age counts from its lease expiry, or, for a released or never-claimed
    one (expiry 0), from its last write (``updated_ms``, from ``updated_at_ms``) when known. A
    stranded one's counts from when its owner stopped being live (``holding``), or, for an
    owner no session item names, from its last write (an upper bound).
    """
    updated_ms = updated_ms or {}
    workers: Counter[str] = Counter()
    unowned: list[str] = []
    stranded: list[StrandedRow] = []
    backoff: list[str] = []
    malformed: list[str] = []
    # Waiting on purpose until their expiry: the list each goes to, by status (a release that
    # named a successor is RELEASED with the successor recorded).
    waiting: dict[str, list[str]] = {"BACKOFF": backoff, "INVALID": [], "successor": []}
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
        h = holding(item, now_ms, sessions, skew_ms)
        if h.held:
            workers[str(item.lease_owner)] += 1
            continue
        if not item.started:
            continue
        expires = item.lease_expires_at_ms or 0
        if h.stranded:
            since = h.since_ms or updated_ms.get(item.conn_id, 0)
        elif expires > now_ms and (item.status in ("BACKOFF", "INVALID") or item.successor):
            # Waiting for its retry time, its quarantine's end or its successor, on purpose.
            waiting[item.status if item.status in waiting else "successor"].append(item.conn_id)
            continue
        else:
            since = expires if expires > 0 else updated_ms.get(item.conn_id, 0)
        unowned.append(item.conn_id)
        age = max(0, now_ms - since) if since > 0 else None
        if h.stranded:
            stranded.append(StrandedRow(item.conn_id, str(item.lease_owner), h.stranded, age,
                                        h.stuck))
        if age is not None:
            oldest = age if oldest is None else max(oldest, age)
    return FleetStatus(workers=dict(sorted(workers.items())), streams=started + stopped,
                       started=started, stopped=stopped, unowned_started=sorted(unowned),
                       backoff=sorted(backoff), malformed=sorted(malformed),
                       quarantined=sorted(waiting["INVALID"]),
                       handing_over=sorted(waiting["successor"]),
                       oldest_unowned_ms=oldest,
                       stranded=sorted(stranded, key=lambda r: r.conn_id))
