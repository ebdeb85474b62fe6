"""Is a stream's owner a live session? The one verdict, and the audit that finds strays.

Every stream item that names a ``lease_owner`` is held by that session while the session is
live (``docs/concepts/protocol.md``). ``owner_liveness`` is the pure verdict on one owner given its
session item as read; the sweeper's owner audit uses it and frees a stream of a gone owner with
the one release of the reaper (``Reaper.release_owned``, conditional on that owner).

The audit is the catch-all that makes "no stranded stream" hold whatever the cause: an acquire
that landed after its session was reaped, a session restarted over a predecessor whose last
acquisitions the owner index had not shown yet, an owner written by hand or by another system.
Once per ``interval_ms`` it reads the owner index whole (keys only, paginated) and looks up
every owner that is not among the sessions the sweep saw alive:

- LIVE (ALIVE, that incarnation, within TTL + skew): nothing to do;
- SILENT (ALIVE but past TTL + skew): left to ``Reaper.mark_dead``, the one write that declares
  death (``docs/concepts/protocol.md`` names who calls it: the session sweep, a successor
  incarnation, a platform report), never the audit's;
- GONE because the session is DEAD, ENDED or replaced by a newer incarnation: released now
  (nothing of that incarnation can still deliver: it was declared dead past its TTL, said
  goodbye, or was replaced only after it was dead);
- GONE because no session item names it (deleted by hand, or not a session owner at all):
  released once it has been seen so for TTL + skew, the longest a holder whose session item
  vanished can go on delivering before its own heartbeat fails and its fence stops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from holdfast.core.aws import pages
from holdfast.core.exceptions import HoldfastError, MalformedItem, StoreUnavailable
from holdfast.core.model import validate_worker_id
from holdfast.core.schema import (
    ATTR,
    OWNER_INDEX_NAME,
    SessionState,
    conn_id_from_pk,
    session_of_owner,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from holdfast.core.sessions import SessionItem, SessionStore

__all__ = [
    "AUDIT_INTERVAL_MS",
    "AuditResult",
    "Liveness",
    "OwnerAudit",
    "owned_streams",
    "owner_liveness",
    "session_owner",
]

# One audit pass every 2 s: a stranded stream is released within 2 s of becoming stranded
# (DEAD, ENDED or replaced owners), or within TTL + skew + 2 s (an UNKNOWN owner: the pass that
# first sees it schedules the one that releases it). A pass reads the
# owner index whole: about 0.5 read units per 4 KB of ~100-byte entries, so ~13 units a pass
# per 1,000 owned streams (arithmetic, not measured).
AUDIT_INTERVAL_MS = 2_000


class Liveness(StrEnum):
    """What a stream owner's session says about its streams (``owner_liveness``)."""

    LIVE = "live"  # ALIVE, that incarnation, within TTL + skew: it keeps the stream
    SILENT = "silent"  # ALIVE but silent past TTL + skew: left to ``Reaper.mark_dead``
    GONE = "gone"  # DEAD, ENDED or replaced: nobody serves the stream
    UNKNOWN = "unknown"  # no session item names it: gone once seen so for TTL + skew


def session_owner(owner: str) -> tuple[str, str] | None:
    """(worker id, incarnation) if ``owner`` can name a worker session, else None."""
    parsed = session_of_owner(owner)
    if parsed is None:
        return None
    try:
        validate_worker_id(parsed[0])
    except ValueError:
        return None
    return parsed


def owner_liveness(owner: str, session: SessionItem | None, now_ms: int,
                   skew_ms: int) -> tuple[Liveness, str]:
    """Whether the session ``owner`` still holds its streams, given its session item as read
    (None: there is none, or ``owner`` cannot name a session)."""
    parsed = session_owner(owner)
    if parsed is None:
        return Liveness.UNKNOWN, "not a session owner"
    if session is None:
        return Liveness.UNKNOWN, "no session item"
    if session.incarnation != parsed[1]:
        return Liveness.GONE, f"replaced by incarnation {session.incarnation[:64]}"
    if session.live(now_ms, skew_ms):
        return Liveness.LIVE, "session alive"
    if session.state is not SessionState.ALIVE:
        return Liveness.GONE, f"session {session.state.value}"
    return Liveness.SILENT, (f"silent {now_ms - session.expires_at_ms} ms past its TTL; "
                             "the sweeper declares it dead and reaps it")


def owned_streams(client: DynamoDBClient, table: str) -> Iterator[tuple[str, str]]:
    """(conn id, owner) of every owned item, from the owner index (keys only, paginated)."""
    for resp in pages("audit_owners", client.scan, TableName=table, IndexName=OWNER_INDEX_NAME):
        for raw in resp.get("Items", []):
            try:
                yield conn_id_from_pk(raw[ATTR.pk]["S"]), raw[ATTR.lease_owner]["S"]
            except (KeyError, TypeError, ValueError):
                continue  # not a stream item: nothing this audit may release


@dataclass
class AuditResult:
    """One audit pass: streams released (by owner verdict), waiting, and errors per item."""

    released: list[tuple[str, str, str]] = field(default_factory=list)  # conn, owner, why
    stranded: int = 0  # owned by a non-live session and not released yet (SILENT, UNKNOWN)
    oldest_stranded_ms: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # conn id, error


@dataclass
class OwnerAudit:
    """The sweeper's owner audit (module docstring); ``first_seen`` is its only memory."""

    interval_ms: int
    ttl_ms: int
    skew_ms: int
    next_ms: int = 0
    first_seen: dict[tuple[str, str], int] = field(default_factory=dict)

    def due(self, now_ms: int) -> bool:
        return now_ms >= self.next_ms

    def run(self, sessions: SessionStore, alive: set[str], now_ms: int) -> AuditResult:
        """One pass: every owner not in ``alive`` (owners the sweep saw live) is judged."""
        self.next_ms = now_ms + self.interval_ms
        out = AuditResult()
        verdicts: dict[str, tuple[Liveness, str]] = {}
        seen: set[tuple[str, str]] = set()
        refused = False
        for conn_id, owner in owned_streams(sessions.client, sessions.lease_table):
            if owner in alive:
                continue
            if owner not in verdicts:
                verdicts[owner] = self._judge(sessions, owner, now_ms)
            verdict, why = verdicts[owner]
            if verdict is Liveness.LIVE:
                continue
            key = (conn_id, owner)
            seen.add(key)
            since = self.first_seen.setdefault(key, now_ms)
            if verdict is Liveness.UNKNOWN and now_ms - since < self.ttl_ms + self.skew_ms:
                # Not yet: its holder may still be fencing itself. The next pass comes exactly
                # when it may go, not up to an interval later.
                self.next_ms = min(self.next_ms, since + self.ttl_ms + self.skew_ms)
                verdict = Liveness.SILENT
            if verdict is not Liveness.GONE and verdict is not Liveness.UNKNOWN:
                out.stranded += 1
                out.oldest_stranded_ms = max(out.oldest_stranded_ms, now_ms - since)
                continue
            try:
                if sessions.release_owned(conn_id, owner, f"owner {owner}: {why}",
                                          unowned_since_ms=since):
                    out.released.append((conn_id, owner, why))
            except StoreUnavailable as exc:
                # The table refuses (throttled) or does not answer: each further release would
                # retry for seconds, one stream after another, holding the sweep (and its
                # timeout's margin) for minutes. The rest waits for the next pass.
                out.errors.append((conn_id, str(exc)[:300]))
                refused = True
                break
            except HoldfastError as exc:  # this item's trouble, never the pass's
                out.errors.append((conn_id, str(exc)[:300]))
        # Cut short: the streams not looked at keep when they were first seen.
        self.first_seen = {k: v for k, v in self.first_seen.items() if refused or k in seen}
        return out

    def _judge(self, sessions: SessionStore, owner: str, now_ms: int) -> tuple[Liveness, str]:
        parsed = session_owner(owner)
        session = None
        if parsed is not None:
            try:
                session = sessions.get(parsed[0])
            except MalformedItem as bad:
                return Liveness.SILENT, f"session item malformed: {bad.reason}"[:300]
            except HoldfastError as exc:
                # Not read (throttled): judged again next pass, released by none now; one
                # owner's failed read used to end the pass for every other owner.
                return Liveness.SILENT, f"session not read: {exc}"[:300]
        return owner_liveness(owner, session, now_ms, self.skew_ms)
