"""The lease rules as pure functions: no clock, no I/O, every time passed in by the caller.

Times are integer milliseconds. Wall-clock values (``*_wall_ms``) are compared across hosts, so
they carry a clock-skew allowance; monotonic values (``*_mono_ms``) are only compared with the
same host's monotonic clock and drive self-fencing.

Safety argument (why two workers never use one lease at once): the holder writes
``expires = wall_at_send + lease``; a challenger only acquires once its own wall clock passes
``expires + skew``; the holder stops using the lease at ``mono_at_send + lease - skew - margin``.
With every clock within ``skew`` of true time the holder has stopped before anyone can take over.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from holdfast.core import names, settings
from holdfast.core.exceptions import ConfigError, LossReason
from holdfast.core.model import LeaseItem, int_attr, str_attr
from holdfast.core.schema import ATTR, STARTED

__all__ = [
    "DEFAULT_HEARTBEAT_MS",
    "DEFAULT_LEASE_MS",
    "DEFAULT_MARGIN_MS",
    "DEFAULT_SKEW_MS",
    "OUTAGE_TOLERANCE_MS",
    "STILL_STARTED",
    "Condition",
    "LeaseTiming",
    "ReleaseFound",
    "acquire_cutoff_ms",
    "checkpoint_slice",
    "checkpoint_slices",
    "claim_blocker",
    "claimable_at_ms",
    "classify_loss",
    "default_margin_ms",
    "fence_deadline_mono_ms",
    "fencing_pair",
    "held_by",
    "is_expired",
    "meets",
    "next_checkpoint",
    "next_epoch",
    "release_found",
    "renew_due_mono_ms",
    "throttled_heartbeat_ms",
    "tolerated_outage_ms",
    "written_over",
]


# The production timings, in ms, for the worker, the Lambdas and the stack: the settings
# schema holds the one default of each.
DEFAULT_LEASE_MS: Final = round(1000 * settings.LEASE_SECONDS.read({}))
DEFAULT_HEARTBEAT_MS: Final = round(1000 * settings.HEARTBEAT_SECONDS.read({}))
DEFAULT_SKEW_MS: Final = settings.SKEW_MS.read({})


def default_margin_ms(lease_ms: int) -> int:
    """The fence's allowance for a late timer: a tenth of the lease, at most 1 s."""
    return min(1_000, lease_ms // 10)


DEFAULT_MARGIN_MS: Final = default_margin_ms(DEFAULT_LEASE_MS)


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """Lease timings in milliseconds, validated so that self-fencing is possible at all.

    With sessions ``lease_ms`` is the session's TTL and ``heartbeat_ms`` its heartbeat."""

    lease_ms: int = DEFAULT_LEASE_MS
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    skew_ms: int = DEFAULT_SKEW_MS
    margin_ms: int = DEFAULT_MARGIN_MS

    def __post_init__(self) -> None:
        if self.lease_ms <= 0 or self.heartbeat_ms <= 0 or self.skew_ms < 0 or self.margin_ms < 0:
            raise ConfigError("lease and heartbeat must be positive; skew and margin not negative")
        usable = self.lease_ms - self.skew_ms - self.margin_ms
        # Two heartbeats must fit in the usable window, or one slow renewal fences a healthy holder.
        if 2 * self.heartbeat_ms > usable:
            raise ConfigError(
                f"heartbeat {self.heartbeat_ms} ms is too long for lease {self.lease_ms} ms: "
                f"2 x heartbeat must be <= lease - skew - margin ({usable} ms)"
            )

    @property
    def usable_ms(self) -> int:
        """How long after sending a renewal the holder may keep using the lease."""
        return self.usable_for(self.lease_ms)

    def usable_for(self, length_ms: int) -> int:
        """How long after sending a write of an expiry ``length_ms`` ahead the holder may
        keep using what it holds: that less the skew and the margin."""
        return length_ms - self.skew_ms - self.margin_ms

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LeaseTiming:
        """The timings ``HOLDFAST_LEASE_SECONDS``, ``HOLDFAST_HEARTBEAT_SECONDS``,
        ``HOLDFAST_SKEW_MS`` and ``HOLDFAST_MARGIN_MS`` set in ``env`` (the worker's, the
        Lambdas' and the stack's one reader); ``ConfigError`` names the variable."""
        lease_ms = round(1000 * settings.LEASE_SECONDS.read(env))
        heartbeat_ms = round(1000 * settings.HEARTBEAT_SECONDS.read(env))
        skew_ms = settings.SKEW_MS.read(env)
        margin_ms = settings.MARGIN_MS.get(env)
        margin_ms = default_margin_ms(lease_ms) if margin_ms is None else margin_ms
        try:
            return cls(lease_ms, heartbeat_ms, skew_ms, margin_ms)
        except ConfigError as exc:
            raise ConfigError(f"{names.ENV_HEARTBEAT_SECONDS} / {names.ENV_LEASE_SECONDS} / "
                              f"{names.ENV_SKEW_MS} / {names.ENV_MARGIN_MS}: {exc}") from None


def acquire_cutoff_ms(now_wall_ms: int, skew_ms: int) -> int:
    """Leases expiring at or before this wall time are free for a challenger to take."""
    return now_wall_ms - skew_ms


def claimable_at_ms(expires_at_ms: int, skew_ms: int) -> int:
    """The wall time from which a challenger may acquire a lease (or declare a session dead)
    that expires at ``expires_at_ms``: the other side of ``acquire_cutoff_ms``."""
    return expires_at_ms + skew_ms


def is_expired(expires_at_ms: int | None, now_wall_ms: int, skew_ms: int) -> bool:
    """True when a lease with this expiry is free to take (None: never claimed)."""
    return expires_at_ms is None or expires_at_ms <= acquire_cutoff_ms(now_wall_ms, skew_ms)


def claim_blocker(item: LeaseItem, now_wall_ms: int, skew_ms: int,
                  claimer: str | None = None) -> LossReason | None:
    """Why ``item`` cannot be acquired now by ``claimer``, or None if it can (mirrors the
    store's condition: a handoff's hold does not block the successor it names)."""
    if not item.started:
        return LossReason.STOPPED
    if item.lease_owner:
        # Whatever its expiry says: only its holder or the reaper of a dead session frees it.
        return LossReason.HELD
    if claimer is not None and item.successor == claimer:
        return None
    return None if is_expired(item.lease_expires_at_ms, now_wall_ms, skew_ms) else (
        LossReason.BACKOFF)


def classify_loss(raw: Mapping[str, Any] | None, owner: str,
                  epoch: int) -> LossReason | None:
    """Why a renew/release by (owner, epoch) failed, given the item ``raw`` as it is (a failed
    condition's old item, or read back): what each of the holder's conditions found; None:
    still ours."""
    if raw is None:
        return LossReason.DELETED
    if not meets(raw, fencing_pair(owner, epoch)):
        return LossReason.OVERWRITTEN if written_over(raw, epoch) else LossReason.LOST
    if not meets(raw, (STILL_STARTED,)):
        return LossReason.STOPPED
    return None


class ReleaseFound(Enum):
    """What the item says of a release whose write was refused or whose answer was lost."""

    LANDED = "landed"  # no owner (or no item), or the successor it named holds it already
    STILL_OURS = "still ours"  # the releasing owner and epoch: not released
    LOST = "lost"  # another owner or epoch: not ours to release any more


def release_found(raw: Mapping[str, Any] | None, owner: str, epoch: int,
                  successor: str | None) -> ReleaseFound:
    """What ``raw`` (the item as a release's condition found it, or as read after a release
    whose answer was lost) says of the release by (``owner``, ``epoch``) naming
    ``successor``: the one judgement of a lone release and of a batch's statements. A
    botocore retry of a release that landed finds no owner, or the named successor's lease
    (it acquires within a second of a handoff's release); one still ours was not written;
    one with no owner and our epoch gone or lowered was written over outside the protocol
    (``written_over``: lost, so its holder can take it back for its checkpoint)."""
    if not raw:
        return ReleaseFound.LANDED  # nothing left to hold
    if held_by(raw, owner, epoch):
        # First: a release naming its own holder (no handoff) still ours is not landed; a
        # successor's lease always has a newer epoch.
        return ReleaseFound.STILL_OURS
    holder = str_attr(raw, ATTR.lease_owner)
    if (holder is None and not written_over(raw, epoch)) or (
            successor is not None and holder == successor):
        return ReleaseFound.LANDED
    return ReleaseFound.LOST


# One condition of a holder's write, (attribute, value): the one definition of what DynamoDB
# checks (``expressions`` turns these into the write's condition) and of the same judged on an
# item read back (``meets``), so the two cannot drift apart.
Condition = tuple[str, str | int]

# The stream is still wanted: a holder's renew and transfer are conditional on it (a release is
# not: a stopped stream is released all the same).
STILL_STARTED: Final[Condition] = (ATTR.desired_state, STARTED)


def fencing_pair(owner: str, epoch: int) -> tuple[Condition, Condition]:
    """The fencing pair: every write a holder makes is conditional on the item naming it as
    owner under this epoch (a take-over by anyone else bumps the epoch)."""
    return ((ATTR.lease_owner, owner), (ATTR.epoch, epoch))


def meets(raw: Mapping[str, Any], conditions: tuple[Condition, ...]) -> bool:
    """Whether the item ``raw`` has each (attribute, value) of ``conditions``."""
    return all((str_attr(raw, a) if isinstance(v, str) else int_attr(raw, a)) == v
               for a, v in conditions)


def written_over(raw: Mapping[str, Any], epoch: int) -> bool:
    """Whether the item ``raw`` lost a holding under ``epoch`` to a write outside the
    protocol: no owner and its epoch gone or lower. No writer of the protocol removes or
    lowers the epoch (a release and a reap keep it, an acquire and a transfer raise it), so
    only a write of the whole item (an app's PutItem) leaves it so (``core.overwrites``)."""
    return str_attr(raw, ATTR.lease_owner) is None and (int_attr(raw, ATTR.epoch) or 0) < epoch


def held_by(raw: Mapping[str, Any], owner: str, epoch: int) -> bool:
    """Whether the item ``raw`` is still held by ``owner`` under ``epoch``."""
    return meets(raw, fencing_pair(owner, epoch))


def fence_deadline_mono_ms(renew_sent_mono_ms: int, timing: LeaseTiming, *,
                           length_ms: int | None = None) -> int:
    """Monotonic time after which the holder must stop using a lease it last renewed then:
    the lease's length (``timing.lease_ms``, or ``length_ms``: a stream's backstop expiry)
    less the skew and the margin."""
    return renew_sent_mono_ms + timing.usable_for(
        timing.lease_ms if length_ms is None else length_ms)


# How long a handoff's release keeps a stream for the successor it names: the router's record,
# one message on the successor's order queue and its acquire take well under a second; a
# successor that died or is full costs the stream this much (plus the skew) before anyone may
# take it. Short against the session TTL, so a handoff is never slower than a failover.
HANDOFF_HOLD_MS: Final = 3_000


# A full DynamoDB outage (every call throttled) this long, after a wave of refusals, must fence
# no healthy worker: the throttle scenario's 2 s (``holdfast.chaos.throttle``).
OUTAGE_TOLERANCE_MS: Final = 2_000


def throttled_heartbeat_ms(timing: LeaseTiming) -> int:
    """The session heartbeat period for two periods after a refused attempt.

    The last renewal before a full outage may be a period old and the first attempt after it
    half a period late (a retry pause), so the outage that fences nothing is ``usable - 1.5 x
    heartbeat``. Where that is under ``OUTAGE_TOLERANCE_MS`` the period halves while refusals
    come (one more write per worker and period, only then); a window wide enough keeps it."""
    if timing.usable_ms - timing.heartbeat_ms * 3 // 2 >= OUTAGE_TOLERANCE_MS:
        return timing.heartbeat_ms
    return timing.heartbeat_ms // 2


def tolerated_outage_ms(timing: LeaseTiming, *, after_refusals: bool) -> int:
    """The longest full outage that fences nothing: the usable window less the last renewal's
    age (a period; ``throttled_heartbeat_ms`` when refusals came first) and a retry pause."""
    age = throttled_heartbeat_ms(timing) if after_refusals else timing.heartbeat_ms
    return timing.usable_ms - age - timing.heartbeat_ms // 2


def renew_due_mono_ms(last_renew_sent_mono_ms: int, timing: LeaseTiming) -> int:
    """Monotonic time of the next heartbeat for a lease renewed at the given time."""
    return last_renew_sent_mono_ms + timing.heartbeat_ms


def next_checkpoint(stored: int | None, handled: int | None) -> int | None:
    """The checkpoint to write: ``handled`` if it moves forward, else None (nothing to write)."""
    if handled is None:
        return None
    if stored is not None and handled <= stored:
        return None
    return handled


# A checkpoint round is cut into slices of at least 2 s each, at most 10: at the default 20 s a
# worker writes a tenth of its streams every 2 s instead of all of them in one burst.
_SLICE_MIN_MS: Final = 2_000
_SLICES_MAX: Final = 10


def checkpoint_slices(checkpoint_ms: int) -> int:
    """How many slices a checkpoint period is written in: one every ``checkpoint_ms / n``.
    Periods under 4 s keep one slice (every stream at once, each period)."""
    return max(1, min(_SLICES_MAX, checkpoint_ms // _SLICE_MIN_MS))


def checkpoint_slice(conn_id: str, slices: int) -> int:
    """The slice (0 to ``slices - 1``) a stream's checkpoint is written in.

    A stable hash, not a position in a sorted list: a stream keeps its slice while others come
    and go, so it is written exactly once every ``slices`` ticks (a position would shift and
    could skip a stream for a round or write it twice). crc32, not ``hash()``: the latter is
    salted per process. Each slice holds about a ``1/slices`` share of the streams."""
    return zlib.crc32(conn_id.encode()) % slices


def next_epoch(now_ms: int, *stored: int) -> int:
    """The epoch of a new holding, the acquire's and the transfer's: ``max(stored + 1, now)``
    over every stored epoch seen. Above them, so it only goes up; the clock the floor, so a
    deleted and re-created item or a restored table does not start again low."""
    return max((now_ms, *(epoch + 1 for epoch in stored)))
