"""The local fleet's timings: short leases so a failover shows in seconds, or production's
defaults for the benchmarks, as the environment the workers and the local runner get."""

from __future__ import annotations

from dataclasses import dataclass

from holdfast.core import names, settings
from holdfast.core.rules import LeaseTiming, default_margin_ms

__all__ = ["FleetTiming"]


@dataclass(frozen=True, slots=True, kw_only=True)  # by name only, as Settings
class FleetTiming:
    """Short lease timings so that a failover shows in seconds (the worker validates them)."""

    lease_s: float = 4.0
    heartbeat_s: float = 1.0
    # Checkpoints (and so the replay window after a crash) every 2 s, scaled like the lease.
    checkpoint_s: float = 2.0
    skew_ms: int = 500
    margin_ms: int = 400
    sweep_interval_ms: int = 500
    rate: float = 10.0  # upstream messages per second per stream
    shutdown_s: float = 8.0
    # Rebalancing: a moved stream's cool-down, and how often the sweeper decides.
    cooldown_s: float = 10.0
    balance_interval_ms: int = 1000

    @classmethod
    def production(cls, *, lease_s: float | None = None, heartbeat_s: float | None = None,
                   checkpoint_s: float | None = None, skew_ms: int | None = None,
                   sweep_interval_ms: int = 1000, cooldown_s: float = 60.0,
                   balance_interval_ms: int = 2000) -> FleetTiming:
        """The worker's and the sweeper's production defaults (lease, heartbeat, checkpoint
        and skew from ``holdfast.core.settings``, margin min(1 s, lease / 10), sweep every
        1 s, cool-down 60 s, a balancing decision every 2 s); the rest (upstream rate,
        shutdown) as the defaults. The seed's: ``production(lease_s=20, heartbeat_s=5,
        skew_ms=1000)``."""
        lease_s = settings.LEASE_SECONDS.read({}) if lease_s is None else lease_s
        return cls(lease_s=lease_s,
                   heartbeat_s=settings.HEARTBEAT_SECONDS.read({}) if heartbeat_s is None
                   else heartbeat_s,
                   checkpoint_s=settings.CHECKPOINT_SECONDS.read({}) if checkpoint_s is None
                   else checkpoint_s,
                   skew_ms=settings.SKEW_MS.read({}) if skew_ms is None else skew_ms,
                   margin_ms=default_margin_ms(round(lease_s * 1000)),
                   sweep_interval_ms=sweep_interval_ms, cooldown_s=cooldown_s,
                   balance_interval_ms=balance_interval_ms)

    def __post_init__(self) -> None:
        # Checked as the workers will check them, before a fleet is started on them (a lease
        # shorter than its heartbeat was found only once the local AWS was up).
        self.lease_timing()

    def lease_timing(self) -> LeaseTiming:
        """These timings as the worker validates and uses them."""
        return LeaseTiming(round(self.lease_s * 1000), round(self.heartbeat_s * 1000),
                           self.skew_ms, self.margin_ms)

    def timing_env(self) -> dict[str, str]:
        """The timing variables the workers and the Lambdas share (``LeaseTiming.from_env``)."""
        return {names.ENV_LEASE_SECONDS: f"{self.lease_s:g}",
                names.ENV_HEARTBEAT_SECONDS: f"{self.heartbeat_s:g}",
                names.ENV_SKEW_MS: str(self.skew_ms), names.ENV_MARGIN_MS: str(self.margin_ms)}

    def worker_env(self) -> dict[str, str]:
        return {
            **self.timing_env(),
            "HOLDFAST_CHECKPOINT_SECONDS": f"{self.checkpoint_s:g}",
            "HOLDFAST_SHUTDOWN_SECONDS": f"{self.shutdown_s:g}",
            names.ENV_REBALANCE_COOLDOWN_SECONDS: f"{self.cooldown_s:g}",
            # Short polls and drains: a stopping demo worker should not idle in a long poll.
            "HOLDFAST_POLL_SECONDS": "2", "HOLDFAST_POLL_DRAIN_SECONDS": "1",
            "HOLDFAST_NUDGE_VISIBILITY_SECONDS": "2", "HOLDFAST_RECONCILE_SECONDS": "15",
            "HOLDFAST_RECONNECT_BASE_SECONDS": "0.2", "HOLDFAST_RECONNECT_CAP_SECONDS": "2",
            "HOLDFAST_HEALTH_PORT": "0", "HOLDFAST_METRICS_SECONDS": "3600",
            # The upstream's connection log (the chaos checker) tells workers apart by it.
            "HOLDFAST_SEND_WORKER_ID": "true",
        }

    def runner_env(self) -> dict[str, str]:
        return {
            **self.timing_env(),
            "HOLDFAST_SWEEP_INTERVAL_MS": str(self.sweep_interval_ms),
            "HOLDFAST_SWEEP_RENUDGE_MS": "2000",
            "HOLDFAST_SWEEP_UNCLAIMED_GRACE_MS": "1000",
            names.ENV_BALANCE_INTERVAL_MS: str(self.balance_interval_ms),
        }
