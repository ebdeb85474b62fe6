"""Test your own handler on the local fleet: the ``holdfast_fleet`` pytest fixture.

Installed with Holdfast as a pytest plugin (entry point ``pytest11``); see
``holdfast.testing.plugin`` for its settings and ``LocalFleet`` for what a test can do.
"""

from __future__ import annotations

from holdfast.fleet.timing import FleetTiming
from holdfast.testing.harness import LocalFleet
from holdfast.testing.options import FAST_TIMING, FleetOptions, Setup

__all__ = ["FAST_TIMING", "FleetOptions", "FleetTiming", "LocalFleet", "Setup"]
