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

