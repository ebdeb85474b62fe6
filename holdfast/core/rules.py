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

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from holdfast.core import names
from holdfast.core.exceptions import ConfigError, LossReason
from holdfast.core.model import LeaseItem
from holdfast.core.schema import SessionState

__all__ = [
    "DEFAULT_HEARTBEAT_MS",
    "DEFAULT_LEASE_MS",
    "DEFAULT_MARGIN_MS",
    "DEFAULT_SKEW_MS",
    "LeaseTiming",
    "acquire_cutoff_ms",
    "claim_blocker",
    "claimable_at_ms",
    "classify_loss",
    "default_margin_ms",
    "env_flag",
    "env_number",
    "env_required",
    "env_text",
    "fence_deadline_mono_ms",
    "is_expired",
    "next_checkpoint",
    "renew_due_mono_ms",
    "session_action",
]


# The production timings: the one default of each, for the worker, the Lambdas and the stack.
DEFAULT_LEASE_MS: Final = 8_000  # the session TTL: how long a silent worker keeps its streams
DEFAULT_HEARTBEAT_MS: Final = 2_000  # one session heartbeat per worker
DEFAULT_SKEW_MS: Final = 1_000  # clock-skew allowance between hosts


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
        return self.lease_ms - self.skew_ms - self.margin_ms

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LeaseTiming:
        """The timings ``HOLDFAST_LEASE_SECONDS``, ``HOLDFAST_HEARTBEAT_SECONDS``,
        ``HOLDFAST_SKEW_MS`` and ``HOLDFAST_MARGIN_MS`` set in ``env`` (the worker's, the
        Lambdas' and the stack's one reader); ``ConfigError`` names the variable."""
        lease_ms = round(1000 * env_number(env, names.ENV_LEASE_SECONDS, DEFAULT_LEASE_MS / 1000,
                                        lo=0.5, hi=3600))
        heartbeat_ms = round(1000 * env_number(env, names.ENV_HEARTBEAT_SECONDS,
                                            DEFAULT_HEARTBEAT_MS / 1000, lo=0.05, hi=1200))
        skew_ms = int(env_number(env, names.ENV_SKEW_MS, DEFAULT_SKEW_MS, lo=0, hi=60_000,
                              integer=True))
        margin_ms = int(env_number(env, names.ENV_MARGIN_MS, default_margin_ms(lease_ms), lo=0,
                                hi=60_000, integer=True))
        try:
            return cls(lease_ms, heartbeat_ms, skew_ms, margin_ms)
        except ConfigError as exc:
            raise ConfigError(f"{names.ENV_HEARTBEAT_SECONDS} / {names.ENV_LEASE_SECONDS} / "
                              f"{names.ENV_SKEW_MS} / {names.ENV_MARGIN_MS}: {exc}") from None


def env_number(env: Mapping[str, str], name: str, default: float, *, lo: float, hi: float,
               integer: bool = False) -> float:
    """The number ``env[name]`` (``default`` if unset or blank); ``ConfigError`` naming the
    variable if it is not one or out of ``[lo, hi]``. The one reader of numeric settings."""
    text = (env.get(name) or "").strip()
    if not text:
        return default
    try:
        value = float(int(text)) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{name}={text[:40]!r} is not {kind}") from None
    if math.isnan(value) or not lo <= value <= hi:
        raise ConfigError(f"{name}={text[:40]} is out of range: allowed {lo:g} to {hi:g}")
    return value


_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off")


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """The switch ``env[name]`` (``default`` if unset or blank): the one reader of on/off
    settings, so the worker and the Lambdas accept the same words."""
    text = (env.get(name) or "").strip().lower()
    if not text:
        return default
    if text not in _TRUE + _FALSE:
        raise ConfigError(f"{name}={text[:20]!r} must be on or off (true/false, yes/no, 1/0)")
    return text in _TRUE


def env_text(env: Mapping[str, str], name: str) -> str | None:
    """``env[name]`` stripped, None if unset or blank."""
    return (env.get(name) or "").strip() or None


def env_required(env: Mapping[str, str], name: str, what: str) -> str:
    """``env[name]`` stripped; ``ConfigError`` saying what it must name if unset or blank."""
    text = env_text(env, name)
    if text is None:
        raise ConfigError(f"{name} is not set: it must name {what}")
    return text


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


def claim_blocker(item: LeaseItem, now_wall_ms: int, skew_ms: int) -> LossReason | None:
    """Why ``item`` cannot be acquired now, or None if it can (mirrors the store's condition)."""
    if not item.started:
        return LossReason.STOPPED
    if item.lease_owner:
        # Whatever its expiry says: only its holder or the reaper of a dead session frees it.
        return LossReason.HELD
    return None if is_expired(item.lease_expires_at_ms, now_wall_ms, skew_ms) else (
        LossReason.BACKOFF)


def classify_loss(current: LeaseItem | None, owner: str, epoch: int) -> LossReason | None:
    """Why a renew/release by (owner, epoch) failed, given the item as it is; None: still ours."""
    if current is None:
        return LossReason.DELETED
    if current.lease_owner != owner or current.epoch != epoch:
        return LossReason.LOST
    if not current.started:
        return LossReason.STOPPED
    return None


def fence_deadline_mono_ms(renew_sent_mono_ms: int, timing: LeaseTiming) -> int:
    """Monotonic time after which the holder must stop using a lease it last renewed then."""
    return renew_sent_mono_ms + timing.usable_ms


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


def session_action(state: str, expires_at_ms: int, reaped: bool, now_wall_ms: int,
                   skew_ms: int) -> str:
    """What the sweeper does with a session: "declare_dead", "reap", "wait" or "none".

    ALIVE and silent past TTL + skew: declare it dead (then reap). ALIVE otherwise: wait for
    its expiry. DEAD or ENDED and not yet reaped: release what it still owns.
    """
    if state == SessionState.ALIVE:
        return "declare_dead" if is_expired(expires_at_ms, now_wall_ms, skew_ms) else "wait"
    return "none" if reaped else "reap"
