"""Test your own handler on the local fleet: the ``holdfast_fleet`` pytest fixture.

Installed with Holdfast as a pytest plugin (entry point ``pytest11``); see
``holdfast.testing.plugin`` for its settings and ``LocalFleet`` for what a test can do.
"""

from __future__ import annotations

from holdfast.fleet.procs import FleetError
from holdfast.fleet.recorder import Handled
from holdfast.fleet.report import SeqCheck
from holdfast.fleet.timing import FleetTiming
from holdfast.localaws.stack import LocalAwsError
from holdfast.testing.harness import LocalFleet
from holdfast.testing.options import FAST_TIMING, FleetOptions, Setup

# What a test touches: the fleet and its options, what its methods return (``Handled`` per
# handler call, ``SeqCheck`` per stream) and what they raise when a part cannot start.
__all__ = ["FAST_TIMING", "FleetError", "FleetOptions", "FleetTiming", "Handled", "LocalAwsError",
           "LocalFleet", "SeqCheck", "Setup"]
