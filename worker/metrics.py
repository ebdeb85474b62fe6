"""Worker metrics: counted in memory, emitted as CloudWatch EMF (Powertools) every period.

Counting locally and emitting one sum per period keeps the EMF output to one line per flush
however many messages flow; ``ActiveConnections`` is the fleet's autoscaling signal.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

from holdfast.core import names
from holdfast.worker.logs import service_of

__all__ = ["COUNTERS", "NAMESPACE", "WorkerMetrics"]

NAMESPACE = "Holdfast"
# Every counter the worker emits; ``incr`` refuses any other name, so a counter that the
# dashboard or an alarm watches can never be counted and then silently left out of the EMF.
COUNTERS = (names.METRIC_CLAIMS, names.METRIC_CLAIM_CONFLICTS, names.METRIC_LEASES_LOST,
            names.METRIC_LEASES_FENCED, names.METRIC_HOLDINGS_TAKEN_BACK,
            names.METRIC_RECONNECTS, names.METRIC_HANDLER_ERRORS,
            names.METRIC_MESSAGES_HANDLED, names.METRIC_UPSTREAM_GIVE_UPS,
            names.METRIC_STREAMS_QUARANTINED,
            names.METRIC_POISON_MESSAGES, names.METRIC_RENEW_FAILURES,
            names.METRIC_SESSION_RENEW_FAILURES, names.METRIC_MALFORMED_FRAMES,
            names.METRIC_FRAMES_SKIPPED, names.METRIC_HANDLER_TIMEOUTS,
            names.METRIC_STREAMS_SHED, names.METRIC_CONNECTS_DELAYED,
            names.METRIC_CLAIMS_PAUSED_LAGGING, names.METRIC_NUDGES_HANDED_ON,
            names.METRIC_STREAMS_HANDED_OFF,
            names.METRIC_HANDLER_RETRIES, names.METRIC_HANDLER_FAILURES_PARKED,
            names.METRIC_HANDLER_FAILURES_SENT_TO_QUEUE,
            names.METRIC_DEAD_SESSIONS)  # declared by its reconcile sweep, or its start
_COUNTERS = frozenset(COUNTERS)
_MAX_SAMPLES = 100  # EMF accepts at most 100 values per metric in one record
# Unowned times are not cut at one record: a dead worker's streams are all claimed within
# seconds, and keeping only the first 100 would keep the fastest. Powertools publishes a
# record each time a metric reaches 100 values, so 1,000 is at most ten records per flush.
_MAX_UNOWNED_SAMPLES = 1_000


@dataclass
class WorkerMetrics:
    """Counters, the active-connection gauge, renew latency and unowned time samples of one
    worker.

    The ``service`` dimension and namespace follow Powertools' own variables
    (``POWERTOOLS_SERVICE_NAME``, ``POWERTOOLS_METRICS_NAMESPACE``), which the stack sets to
    what its scaling policy and alarms query.
    """

    service: str = field(default_factory=lambda: service_of(os.environ))
    namespace: str = field(default_factory=lambda: os.environ.get(names.ENV_METRICS_NAMESPACE)
                           or NAMESPACE)
    counts: Counter[str] = field(default_factory=Counter)
    totals: Counter[str] = field(default_factory=Counter)
    active: int = 0
    renew_ms: list[float] = field(default_factory=list)
    unowned_ms: list[float] = field(default_factory=list)

    def incr(self, name: str, n: int = 1) -> None:
        if name not in _COUNTERS:
            raise ValueError(f"not a worker counter (add it to COUNTERS): {name!r}")
        self.counts[name] += n
        self.totals[name] += n

    def renew_latency(self, ms: float) -> None:
        if len(self.renew_ms) < _MAX_SAMPLES:
            self.renew_ms.append(ms)

    def unowned_time(self, ms: float) -> None:
        """One claim's unowned time (``Lease.unowned_ms``)."""
        if len(self.unowned_ms) < _MAX_UNOWNED_SAMPLES:
            self.unowned_ms.append(ms)

    def flush(self) -> None:
        """Print one EMF record with everything counted since the last flush, then reset."""
        provider = AmazonCloudWatchEMFProvider(namespace=self.namespace, service=self.service)
        provider.add_metric(names.METRIC_ACTIVE_CONNECTIONS, MetricUnit.Count, self.active)
        for name in COUNTERS:
            provider.add_metric(name, MetricUnit.Count, self.counts.get(name, 0))
        for ms in self.renew_ms:
            provider.add_metric(names.METRIC_RENEW_LATENCY, MetricUnit.Milliseconds, ms)
        for ms in self.unowned_ms:
            provider.add_metric(names.METRIC_UNOWNED_TIME, MetricUnit.Milliseconds, ms)
        provider.flush_metrics()
        self.counts.clear()
        self.renew_ms.clear()
        self.unowned_ms.clear()
