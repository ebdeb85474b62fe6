"""What a ``LocalFleet`` starts: the defaults, and equal options meaning one shared fleet."""

from __future__ import annotations

import dataclasses

from holdfast.testing.options import FAST_TIMING, FleetOptions


def test_the_defaults_are_two_recorder_workers_on_fast_timings() -> None:
    """No options given: the recorder alone on two workers, the fast timings, any backend."""
    options = FleetOptions()
    assert (options.handler, options.workers, options.backend) == (None, 2, "auto")
    assert options.timing is FAST_TIMING and options.setup is None and not options.worker_env


def test_options_are_equal_by_value() -> None:
    """Options with the same values are equal (they share a fleet); another env is not."""
    a = FleetOptions(handler="m:h", worker_env={"A": "1"})
    assert a == FleetOptions(handler="m:h", worker_env={"A": "1"})
    assert a != dataclasses.replace(a, worker_env={"A": "2"})



def test_a_backend_or_timing_the_fleet_would_refuse_is_refused_when_built() -> None:
    """A misspelled backend ("Moto" ran DynamoDB Local and failed saying Java was missing) and
    timings the workers would refuse (a heartbeat longer than half the lease) fail where they
    are written, before a fleet is started on them."""
    import dataclasses

    import pytest

    from holdfast.core.exceptions import ConfigError

    with pytest.raises(ValueError, match="backend='Moto': one of auto, dynamodb-local, moto"):
        FleetOptions(backend="Moto")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="too long for lease"):
        dataclasses.replace(FAST_TIMING, lease_s=1.0, heartbeat_s=2.0)
    assert FleetOptions(backend="moto").backend == "moto"
