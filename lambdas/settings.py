"""Settings of the router and the sweeper, read from environment variables.

Every value is checked once, at first use, and a bad one is a ``ConfigError`` naming the
variable and the allowed range — not a ``ValueError`` deep inside an invocation. Names, units,
defaults and limits are in ``holdfast.core.settings`` (docs/reference/settings.md); the lease
timings are the workers' own (``LeaseTiming.from_env``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from holdfast.core import settings as S
from holdfast.core.exceptions import ConfigError
from holdfast.core.rules import DEFAULT_LEASE_MS, DEFAULT_SKEW_MS, LeaseTiming

if TYPE_CHECKING:  # only the type: the infra synth reads these defaults without boto3
    from holdfast.core.batch import RenewMode

__all__ = ["Settings"]

_UNSET: Final[Mapping[str, str]] = {}  # an empty environment reads as every default


@dataclass(frozen=True, slots=True)
class Settings:
    table: str
    queue_url: str
    session_table: str | None = None
    skew_ms: int = DEFAULT_SKEW_MS
    lease_ms: int = DEFAULT_LEASE_MS  # the session TTL
    send_attempts: int = S.NUDGE_SEND_ATTEMPTS.read(_UNSET)
    sweep_interval_ms: int = S.SWEEP_INTERVAL_MS.read(_UNSET)
    renudge_ms: int = S.SWEEP_RENUDGE_MS.read(_UNSET)
    renudge_max_ms: int = S.SWEEP_RENUDGE_MAX_MS.read(_UNSET)
    unclaimed_grace_ms: int = S.SWEEP_UNCLAIMED_GRACE_MS.read(_UNSET)
    sweep_margin_ms: int = S.SWEEP_MARGIN_MS.read(_UNSET)
    sweep_max_run_ms: int = S.SWEEP_MAX_RUN_MS.read(_UNSET)
    unindexed_scan_ms: int = S.SWEEP_UNINDEXED_SCAN_MS.read(_UNSET)
    orders_queue_prefix: str | None = None
    balance: bool = S.BALANCE.read(_UNSET)
    balance_interval_ms: int = S.BALANCE_INTERVAL_MS.read(_UNSET)
    balance_band: float = S.BALANCE_BAND.read(_UNSET)
    balance_band_min: float = S.BALANCE_BAND_MIN.read(_UNSET)
    balance_motion: float = S.BALANCE_MOTION.read(_UNSET)
    balance_target_ttl_ms: int = S.BALANCE_TARGET_TTL_MS.read(_UNSET)
    # How a dead session's streams are released (``SessionStore.reap_mode``); batch on AWS.
    renew_mode: RenewMode = field(default_factory=lambda: _renew_mode(_UNSET))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        interval, ttl = _balance_timing(e)
        timing = LeaseTiming.from_env(e)
        return cls(
            table=S.TABLE.read(e), queue_url=S.QUEUE_URL.read(e),
            session_table=S.SESSION_TABLE.get(e),
            skew_ms=timing.skew_ms,
            lease_ms=timing.lease_ms,
            send_attempts=S.NUDGE_SEND_ATTEMPTS.read(e),
            sweep_interval_ms=S.SWEEP_INTERVAL_MS.read(e),
            renudge_ms=S.SWEEP_RENUDGE_MS.read(e),
            renudge_max_ms=S.SWEEP_RENUDGE_MAX_MS.read(e),
            unclaimed_grace_ms=S.SWEEP_UNCLAIMED_GRACE_MS.read(e),
            sweep_margin_ms=S.SWEEP_MARGIN_MS.read(e),
            sweep_max_run_ms=S.SWEEP_MAX_RUN_MS.read(e),
            unindexed_scan_ms=S.SWEEP_UNINDEXED_SCAN_MS.read(e),
            orders_queue_prefix=S.ORDERS_QUEUE_PREFIX.get(e),
            balance=S.BALANCE.read(e),
            balance_interval_ms=interval,
            balance_band=S.BALANCE_BAND.read(e),
            balance_band_min=S.BALANCE_BAND_MIN.read(e),
            balance_motion=S.BALANCE_MOTION.read(e),
            balance_target_ttl_ms=ttl,
            renew_mode=_renew_mode(e),
        )


def _renew_mode(e: Mapping[str, str]) -> RenewMode:
    """``HOLDFAST_RENEW_MODE`` (its schema's default if unset), typed."""
    return "single" if S.RENEW_MODE.read(e) == "single" else "batch"


def _balance_timing(e: Mapping[str, str]) -> tuple[int, int]:
    interval, ttl = S.BALANCE_INTERVAL_MS.read(e), S.BALANCE_TARGET_TTL_MS.read(e)
    # A target unchanged is refreshed once half its TTL is gone, at the next decision: with
    # a TTL of twice the interval or less it would lapse before that decision came.
    if ttl <= 2 * interval:
        raise ConfigError(f"{S.BALANCE_TARGET_TTL_MS.name}={ttl} must be more than twice "
                          f"{S.BALANCE_INTERVAL_MS.name}={interval}, or targets lapse "
                          "between two decisions")
    return interval, ttl
