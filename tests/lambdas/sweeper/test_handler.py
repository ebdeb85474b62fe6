"""The sweeper Lambda entry point, configured from the environment."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from holdfast.core import names
from holdfast.core.exceptions import StoreUnavailable
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper import handler, loop
from holdfast.lambdas.sweeper.results import SweepStats
from holdfast.localaws import LocalAws
from holdfast.runner.context import LocalContext
from tests.conftest import own_tables
from tests.lambdas.helpers import receive_nudges


@pytest.fixture
def sweeper_env(aws_env: dict[str, str], table: str, queue_url: str,
                monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"HOLDFAST_TABLE": table, "HOLDFAST_QUEUE_URL": queue_url,
           "HOLDFAST_SKEW_MS": "100", "HOLDFAST_SWEEP_INTERVAL_MS": "200",
           "HOLDFAST_SWEEP_MAX_RUN_MS": "1500", "HOLDFAST_SWEEP_MARGIN_MS": "1000"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    handler.configure(None)
    yield env  # type: ignore[misc]
    handler.configure(None)


def test_invocation_sweeps_until_its_run_time_ends(
        sweeper_env: dict[str, str], ddb: Any, ddb_local: LocalAws, sqs: Any, queue_url: str,
        unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One invocation loops for HOLDFAST_SWEEP_MAX_RUN_MS, nudging a dead holder's lease."""
    # Tables of its own: the shared session table holds the dead sessions other tests left,
    # and declaring them all dead made one loaded fresh-clone run's first sweep last the whole
    # run (1 sweep; 2 in another).
    table, sessions = own_tables(ddb_local)
    monkeypatch.setenv("HOLDFAST_TABLE", table)
    monkeypatch.setenv("HOLDFAST_SESSION_TABLE", sessions)
    handler.configure(None)
    create_stream(ddb, table, unique_id, "wss://feeds.example.test/")
    LeaseStore(ddb, table, lease_ms=300, skew_ms=100).acquire(unique_id, "dead")
    started = time.monotonic()
    summary = handler.lambda_handler({"source": "aws.events"},
                                     LocalContext("holdfast-sweeper", timeout_ms=60_000))
    assert 1.4 <= time.monotonic() - started < 10
    assert summary["nudged"] == {"expired": 1}
    # More than one sweep, and the run lasted its whole time: it loops.
    assert summary["sweeps"] >= 2 and summary["errors"] == 0
    assert receive_nudges(sqs, queue_url, expect=1)[0]["conn_id"] == unique_id


def test_invocation_stops_before_the_lambda_timeout(
        sweeper_env: dict[str, str], ddb_local: LocalAws, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop ends when the remaining time drops under the margin, before max run time:
    with 1.3 s left and a 1 s margin, at most the sweeps of its first 0.3 s (one every 0.2 s;
    none if a loaded machine took that long to start), not the 1.5 s run's six. Counted, not
    timed: a loaded machine only sweeps fewer."""
    # Tables of its own: other tests' sessions falling due make the loop sweep sooner than
    # its interval (``next_due_ms``), three sweeps in 0.3 s in one CI run.
    table, sessions = own_tables(ddb_local)
    monkeypatch.setenv("HOLDFAST_TABLE", table)
    monkeypatch.setenv("HOLDFAST_SESSION_TABLE", sessions)
    handler.configure(None)
    summary = handler.lambda_handler({}, LocalContext("holdfast-sweeper", timeout_ms=1_300))
    assert summary["sweeps"] <= 2, summary


@pytest.mark.parametrize("sweep_s", [5.0, 6.0, 8.0])
def test_failing_sweeps_back_off_no_further_than_the_margin(
        sweep_s: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps failing slowly (a throttled table) on a 70 s timeout, on a fake clock: the loop
    returns with at least the margin left for the metrics' flush. The back-off after failures
    (up to 5 s, past the 3 s margin) was slept whole, and the timeout killed the invocation."""
    now = {"s": 0.0}

    def advance(seconds: float) -> None:
        now["s"] += seconds

    settings = Settings(table="t", queue_url="http://127.0.0.1:9/q")
    deps = loop.SweepDeps(None, None, settings, clock=lambda: int(now["s"] * 1000),  # type: ignore[arg-type]
                          sleep=advance)

    def slow_failure(_deps: Any, _memory: Any) -> Any:
        advance(sweep_s)
        raise StoreUnavailable("query", "ProvisionedThroughputExceededException")

    monkeypatch.setattr(loop, "sweep_once", slow_failure)
    monkeypatch.setattr(handler.time, "monotonic", lambda: now["s"])
    handler.configure(deps)
    try:
        stats = handler.sweep_for(settings.sweep_max_run_ms,
                                  lambda: int((70.0 - now["s"]) * 1000))
    finally:
        handler.configure(None)
    assert stats.errors >= 3
    assert 70.0 - now["s"] >= settings.sweep_margin_ms / 1000, now["s"]


# Raised before any sweep, so nothing is measured: Powertools says so when it flushes.
@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_bad_setting_is_a_clear_error(aws_env: dict[str, str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed setting names the variable instead of failing deep inside a sweep."""
    from holdfast.core.exceptions import ConfigError

    monkeypatch.setenv("HOLDFAST_SWEEP_INTERVAL_MS", "fast")
    handler.configure(None)
    with pytest.raises(ConfigError, match="HOLDFAST_SWEEP_INTERVAL_MS"):
        handler.lambda_handler({}, LocalContext("holdfast-sweeper"))
    handler.configure(None)


def test_no_orphan_age_is_reported_without_a_completed_sweep() -> None:
    """A run whose sweeps all failed reports no OldestOrphanAge (a 0 would read as "none
    unowned" while the sweeper was blind), only its failures; a completed sweep reports it."""
    handler.metrics.clear_metrics()
    try:
        handler._emit(SweepStats(errors=3))
        emitted = handler.metrics.metric_set
        assert names.METRIC_OLDEST_ORPHAN_AGE not in emitted
        assert emitted[names.METRIC_SWEEP_ERRORS]["Value"] == [3.0]
        handler.metrics.clear_metrics()
        handler._emit(SweepStats(sweeps=1, oldest_age_ms=50, oldest_stranded_ms=70))
        assert handler.metrics.metric_set[names.METRIC_OLDEST_ORPHAN_AGE]["Value"] == [70.0]
    finally:
        handler.metrics.clear_metrics()


def test_no_sweep_is_begun_that_would_outlast_the_invocation(
        sweeper_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """After a slow sweep (a throttled table's, 4 s) the loop starts no sweep that, as long,
    would end past the timeout less the margin: every sweep ends within the invocation."""
    from holdfast.core.exceptions import StoreUnavailable
    from holdfast.lambdas.settings import Settings
    from holdfast.lambdas.sweeper import loop
    from holdfast.lambdas.sweeper.dedup import NudgeMemory

    now = [1_000_000]
    ends: list[int] = []

    def slow_failing_sweep(deps: Any, memory: Any) -> Any:
        now[0] += 4_000
        ends.append(now[0] - 1_000_000)
        raise StoreUnavailable("Query", "throttled")

    monkeypatch.setattr(loop, "sweep_once", slow_failing_sweep)
    settings = Settings.from_env()
    deps = loop.SweepDeps(None, None, settings, clock=lambda: now[0],  # type: ignore[arg-type]
                          sleep=lambda s: now.__setitem__(0, now[0] + round(s * 1000)))
    handler.configure(deps, NudgeMemory())
    stats = handler.sweep_for(600_000, lambda: 20_000 - (now[0] - 1_000_000))
    assert stats.errors == len(ends) == 4 and stats.longest_ms == 4_000
    assert max(ends) <= 20_000 - settings.sweep_margin_ms


def test_an_invocation_sweeps_until_its_ticks_run_time_ends_not_its_own() -> None:
    """A run that began 10 s after its schedule's tick (a cold start, a throttled retry)
    sweeps 49.5 s, so it ends before the next tick; past the tick's whole run time, not at
    all; an event without a usable time, the full run time."""
    tick = "2026-12-07T05:40:00Z"
    tick_ms = 1_796_622_000_000
    assert handler.run_ms_for({"time": tick}, 59_500, tick_ms + 10_000) == 49_500
    assert handler.run_ms_for({"time": tick}, 59_500, tick_ms + 70_000) == 0
    assert handler.run_ms_for({"time": tick}, 59_500, tick_ms - 1_000) == 59_500
    assert handler.run_ms_for({}, 59_500, tick_ms) == 59_500
    assert handler.run_ms_for({"time": "soon"}, 59_500, tick_ms) == 59_500


def test_an_invocation_whose_tick_has_passed_its_run_time_ends_at_once(
        sweeper_env: dict[str, str]) -> None:
    """Invoked for a tick older than its run time (1.5 s here): it ends without sweeping,
    however much of its timeout is left (the next tick's run is under way)."""
    tick = datetime.fromtimestamp(time.time() - 5, tz=UTC).isoformat()
    summary = handler.lambda_handler({"source": "aws.events", "time": tick},
                                     LocalContext("holdfast-sweeper", timeout_ms=60_000))
    assert summary["sweeps"] == 0, summary
