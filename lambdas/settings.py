"""Settings of the router and the sweeper, read from environment variables.

Every value is checked once, at first use, and a bad one is a ``ConfigError`` naming the
variable and the allowed range — not a ``ValueError`` deep inside an invocation.

    HOLDFAST_TABLE                 lease table name (required)
    HOLDFAST_QUEUE_URL             nudge queue URL (required)
    HOLDFAST_SESSION_TABLE         worker session table (unset: no session sweep / orders)
    HOLDFAST_ORDERS_QUEUE_PREFIX   start of the per-session order queues' names (unset: the
                                   router gives stop orders through session items only)
    HOLDFAST_LEASE_SECONDS, HOLDFAST_HEARTBEAT_SECONDS, HOLDFAST_SKEW_MS, HOLDFAST_MARGIN_MS
                                   the workers' timings, read and checked as they read them
                                   (``LeaseTiming.from_env``: 8 s, 2 s, 1000, min(1000, lease/10))
    HOLDFAST_NUDGE_SEND_ATTEMPTS   SendMessageBatch rounds per invocation            (3)
    HOLDFAST_SWEEP_INTERVAL_MS     longest pause between two sweeps                 (1000)
    HOLDFAST_SWEEP_RENUDGE_MS      first re-nudge of a still-orphaned lease after    (5000)
    HOLDFAST_SWEEP_RENUDGE_MAX_MS  re-nudges back off up to                          (300000)
    HOLDFAST_SWEEP_UNCLAIMED_GRACE_MS  released/never-claimed: the router's turn first  (1000)
    HOLDFAST_SWEEP_MARGIN_MS       stop looping this long before the Lambda timeout  (3000)
    HOLDFAST_SWEEP_MAX_RUN_MS      and after at most this long (< the schedule)     (59500)
    HOLDFAST_SWEEP_UNINDEXED_SCAN_MS  a pass for items without an expiry, every (0: off) (300000)
    HOLDFAST_BALANCE               rebalancing by the sweeper: on or off              (on)
    HOLDFAST_BALANCE_INTERVAL_MS   at most one rebalancing decision per               (2000)
    HOLDFAST_BALANCE_BAND          balanced while within this fraction of a share...  (0.10)
    HOLDFAST_BALANCE_BAND_MIN      ...or this many streams, whichever is more         (1)
    HOLDFAST_BALANCE_MOTION        fraction of the streams that may move at once      (0.10)
    HOLDFAST_BALANCE_TARGET_TTL_MS a target lapses this long after it was written     (15000)
                                   (more than twice the interval: refreshed in time)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from holdfast.core import names, rules
from holdfast.core.exceptions import ConfigError
from holdfast.core.orders import validate_prefix
from holdfast.core.rules import DEFAULT_LEASE_MS, DEFAULT_SKEW_MS, LeaseTiming, env_number

__all__ = ["Settings", "env_float", "env_int"]


def env_int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """An integer setting from ``env``, or ``default``; ``ConfigError`` if out of [lo, hi]."""
    return int(env_number(env, name, default, lo=lo, hi=hi, integer=True))


def env_float(env: Mapping[str, str], name: str, default: float, lo: float,
              hi: float) -> float:
    """A number setting from ``env``, or ``default``; ``ConfigError`` if out of [lo, hi]."""
    return env_number(env, name, default, lo=lo, hi=hi)


def _orders_prefix(env: Mapping[str, str]) -> str | None:
    raw = rules.env_text(env, names.ENV_ORDERS_QUEUE_PREFIX)
    if raw is None:
        return None
    try:
        return validate_prefix(raw)
    except ValueError as exc:
        raise ConfigError(f"{names.ENV_ORDERS_QUEUE_PREFIX}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Settings:
    table: str
    queue_url: str
    session_table: str | None = None
    skew_ms: int = DEFAULT_SKEW_MS
    lease_ms: int = DEFAULT_LEASE_MS  # the session TTL
    send_attempts: int = 3
    sweep_interval_ms: int = 1_000
    renudge_ms: int = 5_000
    renudge_max_ms: int = 300_000
    unclaimed_grace_ms: int = 1_000
    sweep_margin_ms: int = 3_000
    sweep_max_run_ms: int = 59_500
    unindexed_scan_ms: int = 300_000
    orders_queue_prefix: str | None = None
    balance: bool = True
    balance_interval_ms: int = 2_000
    balance_band: float = 0.10
    balance_band_min: float = 1.0
    balance_motion: float = 0.10
    balance_target_ttl_ms: int = 15_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        interval, ttl = _balance_timing(e)
        timing = LeaseTiming.from_env(e)
        return cls(
            table=rules.env_required(e, names.ENV_TABLE, "the DynamoDB lease table"),
            queue_url=rules.env_required(e, names.ENV_QUEUE_URL, "the SQS nudge queue URL"),
            session_table=rules.env_text(e, names.ENV_SESSION_TABLE),
            skew_ms=timing.skew_ms,
            lease_ms=timing.lease_ms,
            send_attempts=env_int(e, "HOLDFAST_NUDGE_SEND_ATTEMPTS", 3, 1, 10),
            sweep_interval_ms=env_int(e, "HOLDFAST_SWEEP_INTERVAL_MS", 1_000, 10, 60_000),
            renudge_ms=env_int(e, "HOLDFAST_SWEEP_RENUDGE_MS", 5_000, 100, 3_600_000),
            renudge_max_ms=env_int(e, "HOLDFAST_SWEEP_RENUDGE_MAX_MS", 300_000, 100, 86_400_000),
            unclaimed_grace_ms=env_int(e, "HOLDFAST_SWEEP_UNCLAIMED_GRACE_MS", 1_000, 0,
                                       3_600_000),
            sweep_margin_ms=env_int(e, "HOLDFAST_SWEEP_MARGIN_MS", 3_000, 0, 600_000),
            sweep_max_run_ms=env_int(e, "HOLDFAST_SWEEP_MAX_RUN_MS", 59_500, 0, 900_000),
            unindexed_scan_ms=env_int(e, "HOLDFAST_SWEEP_UNINDEXED_SCAN_MS", 300_000, 0,
                                      86_400_000),
            orders_queue_prefix=_orders_prefix(e),
            balance=rules.env_flag(e, names.ENV_BALANCE, True),
            balance_interval_ms=interval,
            balance_band=env_float(e, names.ENV_BALANCE_BAND, 0.10, 0.0, 1.0),
            balance_band_min=env_float(e, names.ENV_BALANCE_BAND_MIN, 1.0, 0.0, 1_000_000.0),
            balance_motion=env_float(e, names.ENV_BALANCE_MOTION, 0.10, 0.0, 1.0),
            balance_target_ttl_ms=ttl,
        )


def _balance_timing(e: Mapping[str, str]) -> tuple[int, int]:
    interval = env_int(e, names.ENV_BALANCE_INTERVAL_MS, 2_000, 100, 600_000)
    ttl = env_int(e, names.ENV_BALANCE_TARGET_TTL_MS, 15_000, 1_000, 3_600_000)
    # A target unchanged is refreshed once half its TTL is gone, at the next decision: with
    # a TTL of twice the interval or less it would lapse before that decision came.
    if ttl <= 2 * interval:
        raise ConfigError(f"{names.ENV_BALANCE_TARGET_TTL_MS}={ttl} must be more than twice "
                          f"{names.ENV_BALANCE_INTERVAL_MS}={interval}, or targets lapse "
                          "between two decisions")
    return interval, ttl
