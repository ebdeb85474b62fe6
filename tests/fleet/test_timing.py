"""The local fleet's timings and the environment they give the workers and the runner."""

from __future__ import annotations

from holdfast.core import names
from holdfast.core.rules import LeaseTiming
from holdfast.fleet.timing import FleetTiming


def test_production_timing_leaves_the_defaults_alone() -> None:
    """``FleetTiming.production()`` has the worker's defaults; ``FleetTiming()`` is unchanged."""
    p = FleetTiming.production()
    assert (p.lease_s, p.heartbeat_s, p.checkpoint_s, p.skew_ms, p.margin_ms,
            p.sweep_interval_ms) == (4.0, 1.0, 20.0, 250, 400, 1000)
    assert p.rate == FleetTiming().rate and FleetTiming().lease_s == 4.0
    assert FleetTiming.production(lease_s=20.0, heartbeat_s=5.0).margin_ms == 1000
    assert FleetTiming.production(lease_s=20.0, heartbeat_s=5.0, skew_ms=1000).skew_ms == 1000


def test_workers_and_runner_share_the_timing_variables() -> None:
    """Both environments carry the lease timings the worker validates (``LeaseTiming``)."""
    timing = FleetTiming(lease_s=3.0, heartbeat_s=0.5, skew_ms=300, margin_ms=300)
    for env in (timing.worker_env(), timing.runner_env()):
        assert LeaseTiming.from_env(env) == timing.lease_timing()
    assert timing.worker_env()[names.ENV_LEASE_SECONDS] == "3"
    assert timing.runner_env()[names.ENV_BALANCE_INTERVAL_MS] == "1000"
