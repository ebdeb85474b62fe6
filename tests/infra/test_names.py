"""The metrics the stack watches (dashboard, alarms, scaling) are the ones the code emits.

Both sides are read from what they really produce: the synthesized template's metric
references, and the EMF records the worker, the router and the sweeper print when they flush.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from holdfast.core import names

SERVICE = names.service_names("holdfast")
_DASHBOARD_METRIC = re.compile(r'\["' + re.escape(names.NAMESPACE)
                               + r'","([A-Za-z]+)"((?:,"[^"]*")*)')


def watched(template: Any) -> set[tuple[str, str]]:
    """(service, metric) of every reference to our namespace in the template."""
    found: set[tuple[str, str]] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("Namespace") == names.NAMESPACE and "MetricName" in node:
                dims = {d["Name"]: d["Value"] for d in node.get("Dimensions", [])}
                found.add((dims.get("service", "?"), node["MetricName"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):  # the dashboard body: JSON text inside an Fn::Join
            for m in _DASHBOARD_METRIC.finditer(node):
                rest = re.findall(r'"([^"]*)"', m.group(2))
                dims = dict(zip(rest[::2], rest[1::2], strict=False))
                found.add((dims.get("service", "?"), m.group(1)))

    walk(template)
    return found


def emf_names(out: str) -> dict[str, set[str]]:
    """service -> metric names of the EMF records in ``out``."""
    emitted: dict[str, set[str]] = {}
    for line in out.splitlines():
        if '"_aws"' not in line:
            continue
        record = json.loads(line)
        for directive in record["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == names.NAMESPACE, record
            emitted.setdefault(record.get("service", "?"), set()).update(
                m["Name"] for m in directive["Metrics"])
    return emitted


@pytest.fixture
def emitted(capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """What each component prints when it flushes its metrics (with nothing counted yet)."""
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)
    from holdfast.lambdas.router import handler as router
    from holdfast.lambdas.sweeper import handler as sweeper
    from holdfast.lambdas.sweeper.results import SweepStats
    from holdfast.lambdas.taskstopped import handler as taskstopped
    from holdfast.worker.metrics import WorkerMetrics

    capsys.readouterr()
    worker = WorkerMetrics(service=SERVICE["worker"], namespace=names.NAMESPACE)
    worker.renew_latency(12.5)  # samples are emitted only when there are some
    worker.unowned_time(250.0)
    worker.flush()
    router.metrics.clear_metrics()
    router._emit_metrics(router._Plan(), 0)
    router.metrics.flush_metrics()
    sweeper.metrics.clear_metrics()
    sweeper._emit(SweepStats(sweeps=1, nudged={"expired": 0}))
    sweeper.metrics.flush_metrics()
    taskstopped.metrics.clear_metrics()
    taskstopped._emit(taskstopped.Outcome("w1", declared_dead=True))
    taskstopped.metrics.flush_metrics()
    return emf_names(capsys.readouterr().out)


def test_every_watched_metric_is_emitted_by_its_service(
        template_json: dict[str, Any], emitted: dict[str, set[str]]) -> None:
    """Each metric a graph, an alarm or the scaling policy reads is in its service's EMF."""
    refs = watched(template_json)
    assert {s for s, _ in refs} <= set(SERVICE.values())
    assert (SERVICE["worker"], names.METRIC_ACTIVE_CONNECTIONS) in refs  # the scaling signal
    missing = sorted((s, m) for s, m in refs if m not in emitted.get(s, set()))
    assert missing == [], f"watched but never emitted: {missing}"


def test_the_worker_refuses_a_counter_it_would_not_emit() -> None:
    """A misspelt or unregistered counter fails loudly instead of vanishing from the EMF."""
    from holdfast.worker.metrics import WorkerMetrics

    with pytest.raises(ValueError, match="not a worker counter"):
        WorkerMetrics().incr("SessionRenewFailure")


def test_service_names_carry_the_fleet_name() -> None:
    """Two fleets in one account get distinct service dimensions."""
    assert names.service_names("holdfast")["worker"] == "holdfast-worker"
    assert names.service_names("staging")["router"] == "staging-router"
    assert names.service_names("staging")[names.TASKSTOPPED_SERVICE] == "staging-taskstopped"
