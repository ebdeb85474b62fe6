"""What a ``LocalFleet`` starts: ``FleetOptions``, its default timings (``FAST_TIMING``) and the
type of its ``setup`` hook.

Apart from the harness (``holdfast.testing.harness``), which runs the processes: options are
plain values a user's ``conftest.py`` and the ``holdfast_options`` fixture build and compare
(equal options share one fleet), and importing them starts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from holdfast.fleet.timing import FleetTiming
from holdfast.localaws.stack import Backend

__all__ = ["FAST_TIMING", "FleetOptions", "Setup"]

# Short timings so that a SIGKILL failover takes ~4 s: session TTL 3 s, skew 300 ms, sweep
# every 500 ms; checkpoints every 0.5 s keep the replay after a crash short.
FAST_TIMING = FleetTiming(lease_s=3.0, heartbeat_s=0.5, checkpoint_s=0.5, skew_ms=300,
                          margin_ms=300, sweep_interval_ms=500, rate=20.0, shutdown_s=6.0,
                          cooldown_s=5.0, balance_interval_ms=500)

# Called once the local AWS is up, before any worker starts, with the fleet's environment
# (endpoints, credentials, table names); returns extra environment for the workers (or None).
Setup = Callable[[Mapping[str, str]], Mapping[str, str] | None]


@dataclass(frozen=True, kw_only=True)  # by name only: a field added later shifts nobody's
class FleetOptions:
    """What to start. Equal options share one fleet (``holdfast_fleet`` reuses it)."""

    handler: str | None = None  # "package.module:function"; None: the recorder alone
    workers: int = 2
    timing: FleetTiming = FAST_TIMING
    pythonpath: tuple[Path, ...] = ()  # where the workers import the handler from
    worker_env: Mapping[str, str] = field(default_factory=dict)
    setup: Setup | None = None
    backend: Backend = "auto"  # "dynamodb-local" (needs Java), "moto", or auto

    def __post_init__(self) -> None:
        # Here, not once the fleet starts: "Moto" or "dynamodb_local" was run as DynamoDB
        # Local, and failed saying Java was missing.
        if self.backend not in get_args(Backend):
            raise ValueError(f"FleetOptions.backend={self.backend!r}: one of "
                             f"{', '.join(get_args(Backend))}")
