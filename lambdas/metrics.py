"""Counts split by one dimension (nudges by reason), as EMF lines.

Powertools' module-level ``Metrics`` has one dimension set per flush, so per-reason counts go
out through one ``EphemeralMetrics`` per reason. Unlike ``single_metric`` it honours
``POWERTOOLS_METRICS_DISABLED`` (the local runner turns EMF output off).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

__all__ = ["METRICS_NAMESPACE", "emit_counts_by"]

METRICS_NAMESPACE = "Holdfast"


def emit_counts_by(name: str, dimension: str, counts: Mapping[str, int], *,
                   service: str) -> None:
    """One EMF line per key of ``counts``: metric ``name`` with ``dimension=key``."""
    for key, count in sorted(counts.items()):
        metric = EphemeralMetrics(namespace=METRICS_NAMESPACE, service=service)
        metric.add_dimension(name=dimension, value=key)
        metric.add_metric(name=name, unit=MetricUnit.Count, value=count)
        metric.flush_metrics()
