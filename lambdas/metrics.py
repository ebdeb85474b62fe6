"""Counts split by one dimension (nudges by reason), as EMF lines.

Powertools' module-level ``Metrics`` has one dimension set per flush, so per-reason counts go
out through one ``EphemeralMetrics`` per reason. Unlike ``single_metric`` it honours
``POWERTOOLS_METRICS_DISABLED`` (the local runner turns EMF output off).

With metrics disabled Powertools keeps what was added and never clears it, then prints it
anyway once a metric holds 100 values; so callers add nothing when ``metrics_enabled()`` is
False, which also keeps a long-running local process from accumulating them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from holdfast.core import names

__all__ = ["METRICS_NAMESPACE", "emit_counts_by", "metrics_enabled", "service_name"]

# The stack sets POWERTOOLS_METRICS_NAMESPACE and POWERTOOLS_SERVICE_NAME (its dashboards and
# alarms select on them); these defaults apply where it does not (tests, the local runner).
METRICS_NAMESPACE = os.environ.get(names.ENV_METRICS_NAMESPACE) or "Holdfast"


def service_name(default: str) -> str:
    """The ``service`` (log field and metric dimension): the environment's, else ``default``."""
    return os.environ.get(names.ENV_SERVICE_NAME) or default


def metrics_enabled() -> bool:
    """False when POWERTOOLS_METRICS_DISABLED (or Powertools dev mode) turns EMF output off."""
    return not is_metrics_disabled()


def emit_counts_by(name: str, dimension: str, counts: Mapping[str, int], *,
                   service: str) -> None:
    """One EMF line per key of ``counts``: metric ``name`` with ``dimension=key``."""
    for key, count in sorted(counts.items()):
        metric = EphemeralMetrics(namespace=METRICS_NAMESPACE, service=service)
        metric.add_dimension(name=dimension, value=key)
        metric.add_metric(name=name, unit=MetricUnit.Count, value=count)
        metric.flush_metrics()
