"""Metrics are emitted as CloudWatch EMF records."""

from __future__ import annotations

import json

import pytest

from worker.metrics import WorkerMetrics


def test_flush_prints_one_emf_record(capsys: pytest.CaptureFixture[str]) -> None:
    """One flush prints one EMF JSON line with the gauge, the counters and renew latency."""
    m = WorkerMetrics()
    m.active = 7
    m.incr("Claims", 3)
    m.incr("HandlerErrors")
    m.renew_latency(12.5)
    m.flush()
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    names = {d["Name"] for d in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"ActiveConnections", "Claims", "RenewLatency", "LeasesLost"} <= names
    assert record["ActiveConnections"] in (7.0, [7.0]) and record["Claims"] in (3.0, [3.0])
    assert record["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Holdfast"
    m.flush()  # counters reset per period; totals do not
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["Claims"] in (0.0, [0.0]) and m.totals["Claims"] == 3


def test_service_and_namespace_follow_powertools_variables(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack's POWERTOOLS_SERVICE_NAME / _METRICS_NAMESPACE become the EMF dimension."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "fleet-a-worker")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Custom")
    WorkerMetrics().flush()
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["service"] == "fleet-a-worker"
    assert record["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Custom"
