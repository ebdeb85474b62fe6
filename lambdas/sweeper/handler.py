"""The sweeper Lambda: invoked every minute by an EventBridge schedule, it sweeps every ~second.

A killed worker writes nothing, so its expired leases make no stream record; the sweeper finds
them (and released or never-claimed leases whose nudge was lost) through the GSI and nudges
them. It loops until ``HOLDFAST_SWEEP_MAX_RUN_MS`` (59.5 s) has passed or the invocation's
remaining time drops under ``HOLDFAST_SWEEP_MARGIN_MS``, whichever is first, and begins no
sweep that, as long as its longest so far, would end within that margin. Ending just before
the next one-minute tick lets the next run start on time even with a reserved concurrency of
one (an overlapping run would be throttled and retried later), so the sweep pauses for about
half a second per minute. ``NudgeMemory`` is module state, so a warm container keeps
remembering what it nudged across invocations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from holdfast.core import names, tracing
from holdfast.core.aws import client_config, dynamodb_client, sqs_client
from holdfast.core.store import wall_clock_ms
from holdfast.lambdas.metrics import (
    METRICS_NAMESPACE,
    emit_counts_by,
    metrics_enabled,
    service_name,
)
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.dedup import NudgeMemory
from holdfast.lambdas.sweeper.loop import SweepDeps, memory_for, run_sweeps, session_store_for
from holdfast.lambdas.sweeper.results import SweepStats

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["configure", "lambda_handler", "run_ms_for", "sweep_for"]

SERVICE = service_name("holdfast-sweeper")
logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)
tracing.setup(SERVICE)

# Warm invocations reuse the clients and the memory of recent nudges.
_state: dict[str, tuple[SweepDeps, NudgeMemory]] = {}


def configure(deps: SweepDeps | None, memory: NudgeMemory | None = None) -> None:
    """Use ``deps`` (and ``memory``) from now on; None rebuilds from the environment on use."""
    _state.clear()
    if deps is not None:
        _state["warm"] = (deps, memory or memory_for(deps.settings))


def _current() -> tuple[SweepDeps, NudgeMemory]:
    if "warm" not in _state:
        settings = Settings.from_env()
        ddb = dynamodb_client(client_config(read_timeout=2.0))
        deps = SweepDeps(ddb, sqs_client(client_config(read_timeout=5.0)), settings, log=logger,
                         sessions=session_store_for(ddb, settings))
        configure(deps)
    return _state["warm"]


def sweep_for(run_ms: int, remaining_ms: Callable[[], int] | None = None) -> SweepStats:
    """Sweep for at most ``run_ms`` (and until ``remaining_ms() <`` margin, if given), starting
    no sweep that, as long as the longest so far, would end within the margin."""
    deps, memory = _current()
    margin = deps.settings.sweep_margin_ms
    end = time.monotonic() + run_ms / 1000
    stats = SweepStats()

    def should_stop() -> bool:
        # A slow table makes slow sweeps (a throttled call retries for up to ~15 s): one begun
        # 3 s before the timeout would be killed by it, and the invocation's metrics and summary
        # line with it, just when they would tell what is wrong.
        # (Only the timeout's kill: a sweep running past ``end`` delays the next tick's run,
        # no more than stopping that much early would.)
        if remaining_ms is not None and remaining_ms() < margin + stats.longest_ms:
            return True
        return time.monotonic() >= end

    return run_sweeps(deps, memory, should_stop=should_stop, stats=stats,
                      pause_left_s=None if remaining_ms is None
                      else lambda: (remaining_ms() - margin) / 1000)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (EventBridge schedule, every minute)."""
    try:
        return _invoke(event, context)
    finally:
        tracing.flush()  # a frozen sandbox exports nothing until its next invocation


def run_ms_for(event: object, max_run_ms: int, now_ms: int) -> int:
    """How long this invocation sweeps: ``max_run_ms`` from its schedule's tick (the event's
    ``time``), not from now. Counted from now, a cold start or a run that began late (a
    throttled retry of a tick) ran into the next tick's, which reserved concurrency 1 throttles
    and retries later still: the runs drift, and an event older than its maximum age is
    dropped (a minute without sweeps). Without a usable ``time``: ``max_run_ms``."""
    stamp = event.get("time") if isinstance(event, dict) else None
    try:
        tick_ms = round(datetime.fromisoformat(str(stamp)).timestamp() * 1000)
    except ValueError:
        return max_run_ms
    return max(0, min(max_run_ms, tick_ms + max_run_ms - now_ms))


def _invoke(event: object, context: LambdaContext) -> dict[str, Any]:
    deps, _ = _current()
    run_ms = run_ms_for(event, deps.settings.sweep_max_run_ms, wall_clock_ms())
    stats = sweep_for(run_ms, context.get_remaining_time_in_millis)
    if metrics_enabled():
        _emit(stats)
    summary = {"sweeps": stats.sweeps, "errors": stats.errors, "nudged": stats.nudged,
               "failed": stats.failed, "oldest_orphan_age_ms": stats.oldest_age_ms,
               "dead_sessions": stats.dead_sessions, "streams_reaped": stats.reaped,
               "malformed_sessions": stats.malformed_sessions, "normalised": stats.normalised,
               "balance_targets": stats.balance_targets, "imbalance": stats.imbalance,
               "stranded": stats.stranded, "stranded_released": stats.stranded_released,
               "item_errors": stats.item_errors}
    logger.info("sweeper invocation done", extra=summary)
    return summary


def _emit(stats: SweepStats) -> None:
    values: dict[str, float] = {
        names.METRIC_SWEEPS: stats.sweeps, names.METRIC_SWEEP_ERRORS: stats.errors,
        names.METRIC_NUDGES_FAILED: stats.failed,
        names.METRIC_STRANDED_STREAMS: stats.stranded,
        names.METRIC_STRANDED_RELEASED: stats.stranded_released,
        names.METRIC_ITEM_ERRORS: stats.item_errors,
        names.METRIC_DEAD_SESSIONS: stats.dead_sessions,
        names.METRIC_STREAMS_REAPED: stats.reaped, names.METRIC_NORMALISED: stats.normalised,
        names.METRIC_BALANCE_TARGETS: stats.balance_targets}
    if stats.sweeps:
        # A stream stranded with a non-live owner is as unowned as an orphan: one age, one
        # alarm. Measured only by a sweep that completed: a run whose sweeps all failed saw
        # nothing, and a 0 would read as "none unowned" (the SweepsFailing alarm says it).
        values[names.METRIC_OLDEST_ORPHAN_AGE] = max(stats.oldest_age_ms,
                                                     stats.oldest_stranded_ms)
    if stats.balance_rounds:  # no decision (turned off, no sessions): no imbalance to report
        values[names.METRIC_IMBALANCE] = stats.imbalance
    for name, value in values.items():
        metrics.add_metric(name=name, value=value, unit=MetricUnit.Milliseconds
                           if name == names.METRIC_OLDEST_ORPHAN_AGE else MetricUnit.Count)
    emit_counts_by(names.METRIC_NUDGES, names.DIMENSION_REASON, stats.nudged, service=SERVICE)
