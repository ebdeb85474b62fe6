"""The local fleet's platform report: a SIGKILLed worker's streams move without its TTL."""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path

import pytest

from holdfast.fleet.platform import PlatformReporter, exited_unexpectedly
from holdfast.testing import FAST_TIMING, FleetOptions, LocalFleet
from tests.conftest import TIMEOUT_SCALE

pytestmark = pytest.mark.slow

LEASE_S = 30.0  # a TTL far longer than the test waits: only the report can free the streams


def test_a_reported_crash_frees_every_stream_long_before_the_ttl(tmp_path: Path) -> None:
    """SIGKILL a worker holding streams, report it: all are claimed again within seconds; a
    SIGSTOPped worker is not reported (its TTL is the only witness of a hang)."""
    timing = dataclasses.replace(FAST_TIMING, lease_s=LEASE_S)
    with LocalFleet(FleetOptions(workers=1, timing=timing), tmp_path / "run",
                    timeout_scale=TIMEOUT_SCALE) as fleet:
        conns = [fleet.start_stream() for _ in range(6)]
        assert {fleet.wait_owned(c) for c in conns} == {"w1"}
        survivor = fleet.start_worker()
        reporter = PlatformReporter(fleet.fleet)
        reporter.warm_up()
        survivor_proc = fleet.fleet.workers[survivor]
        survivor_proc.signal(signal.SIGSTOP)
        try:
            assert reporter.check() == [] and not exited_unexpectedly(survivor_proc)
        finally:
            survivor_proc.signal(signal.SIGCONT)
        assert fleet.kill_worker("w1", hard=True) == -9
        t0 = time.monotonic()
        (report,) = reporter.check()
        assert report.ok and report.worker_id == "w1" and report.exit_code == -9
        # The sweeper reaps a DEAD session too: it may release some of the six in parallel
        # with the report (each stream once, conditional on the owner), so no count here.
        assert "session declared dead" in report.text, report.text
        for c in conns:
            fleet.wait_owned(c, not_by="w1", timeout_s=10)
        assert time.monotonic() - t0 < LEASE_S / 3
        assert reporter.check() == []  # each exit is reported once
