"""Metrics are emitted as CloudWatch EMF records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from holdfast.core import names
from holdfast.core.store import wall_clock_ms
from holdfast.core.table import create_stream
from holdfast.worker.metrics import WorkerMetrics
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import Recorder, running_worker


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


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.strip().splitlines() if line.startswith("{")]


def _values(record: dict[str, Any], name: str) -> list[float]:
    value = record.get(name, [])
    return value if isinstance(value, list) else [value]


def test_unowned_times_are_emitted_as_millisecond_samples(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each claim's unowned time is one UnownedTime value (Milliseconds) in the EMF record."""
    m = WorkerMetrics()
    m.unowned_time(420)
    m.unowned_time(9_500)
    m.flush()
    record = _records(capsys.readouterr().out)[-1]
    assert sorted(_values(record, names.METRIC_UNOWNED_TIME)) == [420.0, 9_500.0]
    units = {d["Name"]: d["Unit"] for d in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units[names.METRIC_UNOWNED_TIME] == "Milliseconds"
    m.flush()  # samples are per period
    assert not _values(_records(capsys.readouterr().out)[-1], names.METRIC_UNOWNED_TIME)


def test_a_burst_of_unowned_times_is_kept_whole_across_records(
        capsys: pytest.CaptureFixture[str]) -> None:
    """250 claims in one period (a dead worker's streams) are all emitted, 100 per record."""
    m = WorkerMetrics()
    for i in range(250):
        m.unowned_time(float(i))
    m.flush()
    records = _records(capsys.readouterr().out)
    emitted = [v for r in records for v in _values(r, names.METRIC_UNOWNED_TIME)]
    assert sorted(emitted) == [float(i) for i in range(250)]
    assert all(len(_values(r, names.METRIC_UNOWNED_TIME)) <= 100 for r in records)
    assert sum(names.METRIC_CLAIMS in r for r in records) == 1  # counters once, not per record


async def test_a_claim_records_the_time_since_the_stream_was_created(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """An in-process worker claiming a stream created 5 s ago records about 5 s unowned."""
    created = wall_clock_ms() - 5_000
    assert create_stream(fleet.ddb, fleet.table, unique_id, upstream.url(unique_id),
                         created_at_ms=created)
    async with running_worker(fleet, Recorder()) as run:
        fleet.nudge(unique_id)
        await async_wait_until(lambda: unique_id in run.worker.streams, 10, "claimed")
        samples = list(run.worker.metrics.unowned_ms)
    assert len(samples) == 1 and 5_000 <= samples[0] < 5_000 + 10_000
