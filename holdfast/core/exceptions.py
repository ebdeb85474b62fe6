"""Exceptions of Holdfast (``holdfast.core`` and the router); botocore errors never leave the store.

    HoldfastError
    ├── ConfigError            a setting is missing or out of range
    ├── MalformedItem          a lease item (or stream image) that breaks the schema
    ├── UnsafeUrl              a ws_url refused by the URL policy (scheme, address, allow-list)
    ├── SessionConflict        another live process already runs with this worker id
    ├── NudgeNotSent           the router could not nudge (or normalise) for one stream record:
    │                          BatchProcessor reports the record so Lambda retries it
    └── LeaseError
        ├── AcquireFailed      someone else holds it, it is STOPPED, in back-off, or gone
        ├── LeaseLost          a renew/release found another owner, STOPPED, or no item
        ├── SessionLost        the worker's session is DEAD, ended or replaced: stop everything
        └── StoreUnavailable   DynamoDB did not answer decisively (timeout, 5xx, throttling)
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from holdfast.core.schema import SESSION_PREFIX

if TYPE_CHECKING:
    from holdfast.core.model import LeaseItem

__all__ = [
    "AcquireFailed",
    "ConfigError",
    "HoldfastError",
    "LeaseError",
    "LeaseLost",
    "LossReason",
    "MalformedItem",
    "NudgeNotSent",
    "SessionConflict",
    "SessionLost",
    "SessionStillLive",
    "StoreUnavailable",
    "StreamHeld",
    "UnsafeUrl",
]


class LossReason(StrEnum):
    """Why a lease cannot be (or is no longer) used by the caller."""

    HELD = "held"  # another worker owns a live lease
    LOST = "lost"  # another worker took it over (owner or epoch changed)
    STOPPED = "stopped"  # desired_state is STOPPED
    DELETED = "deleted"  # the item is gone
    BACKOFF = "backoff"  # released after upstream errors; not claimable before its retry time
    REGRESSION = "regression"  # the stored checkpoint is ahead of ours (someone edited it)
    # Our holding removed by a write outside the protocol (an app's PutItem of the whole item:
    # no owner, the epoch gone or below ours): ours to write back (``overwrites``), then to
    # stop if the write set STOPPED.
    OVERWRITTEN = "overwritten"
    INVALID = "invalid"  # the item is malformed


class HoldfastError(Exception):
    """Base class of every Holdfast error."""


class ConfigError(HoldfastError):
    """A setting is missing or out of range; the message names it and says what is allowed."""


class MalformedItem(HoldfastError):
    """A lease or session item breaks the schema; it is reported and skipped, never fatal to
    the caller."""

    def __init__(self, key: str, reason: str) -> None:
        what = "session" if key.startswith(SESSION_PREFIX) else "lease"
        super().__init__(f"malformed {what} item {key!r}: {reason}")
        self.key = key
        self.reason = reason


class UnsafeUrl(HoldfastError, ValueError):
    """A ``ws_url`` the URL policy refuses; the message is safe to log (no credentials)."""


class NudgeNotSent(HoldfastError):
    """The nudge of one stream record could not be delivered (or its item not normalised)."""

    def __init__(self, conn_id: str, detail: str) -> None:
        super().__init__(f"nudge for {conn_id!r} not sent: {detail}")
        self.conn_id = conn_id
        self.detail = detail


class LeaseError(HoldfastError):
    """Base class of lease-protocol outcomes that the caller must act on."""


class AcquireFailed(LeaseError):
    """The lease could not be taken; ``current`` is the item as DynamoDB held it (if any)."""

    def __init__(self, conn_id: str, reason: LossReason, current: LeaseItem | None, *,
                 parked: bool = False) -> None:
        holder = f" (held by {current.lease_owner})" if current and current.lease_owner else ""
        super().__init__(f"cannot acquire {conn_id!r}: {reason}{holder}")
        self.conn_id = conn_id
        self.reason = reason
        self.current = current
        self.parked = parked  # INVALID: the item was parked with its reason (else not written)


class LeaseLost(LeaseError):
    """A lease the caller held is no longer its own: stop using it now."""

    def __init__(self, conn_id: str, reason: LossReason, current: LeaseItem | None) -> None:
        super().__init__(f"lease {conn_id!r} lost: {reason}")
        self.conn_id = conn_id
        self.reason = reason
        self.current = current


class StoreUnavailable(LeaseError):
    """DynamoDB gave no decisive answer: the outcome is unknown, not a lost lease."""

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(f"{operation}: DynamoDB unavailable ({detail})")
        self.operation = operation
        self.detail = detail


class SessionConflict(HoldfastError):
    """A live session already uses this worker id: a second process must not share it."""

    def __init__(self, worker_id: str, incarnation: str, expires_in_ms: int) -> None:
        super().__init__(
            f"worker id {worker_id!r} is in use by a live process (incarnation {incarnation}, "
            f"its session expires in {max(0, expires_in_ms)} ms unless renewed): give each "
            "process its own HOLDFAST_WORKER_ID")
        self.worker_id = worker_id
        self.incarnation = incarnation
        self.expires_in_ms = expires_in_ms


class StreamHeld(HoldfastError):
    """A delete refused: the stream is held, and deleting it would free it under its holder."""

    def __init__(self, conn_id: str, owner: str) -> None:
        super().__init__(f"stream {conn_id!r} is held by {owner}: stop it and delete it once "
                         "released")
        self.conn_id = conn_id
        self.owner = owner


class SessionStillLive(HoldfastError):
    """A death report for a session that heartbeated within its TTL, refused without force."""

    def __init__(self, worker_id: str, heartbeat_age_ms: int) -> None:
        super().__init__(
            f"worker {worker_id!r} heartbeated {max(0, heartbeat_age_ms)} ms ago: its process "
            "looks alive. --force declares it dead now anyway; if it is alive, its streams "
            "get a second deliverer until its next heartbeat is refused and it stops (up to "
            "one heartbeat period), so use it only for a process you know is gone")
        self.worker_id = worker_id
        self.heartbeat_age_ms = heartbeat_age_ms


class SessionLost(LeaseError):
    """The worker's session is no longer alive: every stream it owned must stop now."""

    def __init__(self, worker_id: str, incarnation: str, why: str) -> None:
        super().__init__(f"session {worker_id}#{incarnation} lost: {why}")
        self.worker_id = worker_id
        self.incarnation = incarnation
        self.why = why
