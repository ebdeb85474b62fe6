"""A proxied fleet's wiring: through the counting proxies, or straight to the backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness import BenchFleet
from holdfast.chaos.fleetctl import ProxiedFleet
from holdfast.fleet.procs import Fleet
from holdfast.fleet.timing import FleetTiming

BACKEND = {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1", "HOLDFAST_TABLE": "leases",
           "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:2"}


@pytest.fixture
def runner_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The fleet's children not started: the backend's endpoints are ``BACKEND``, and what the
    runner would have been started with is recorded here."""
    seen: dict[str, str] = {}

    def start_aws(self: Fleet) -> None:
        self.env = dict(BACKEND)

    def start_runner(self: Fleet) -> None:
        seen.update(self.env)

    monkeypatch.setattr(Fleet, "start_aws", start_aws)
    monkeypatch.setattr(Fleet, "start_runner", start_runner)
    monkeypatch.setattr(Fleet, "start_upstream", lambda self: "ws://127.0.0.1:3")
    return seen


def test_without_proxies_every_process_names_the_backend(
        tmp_path: Path, runner_env: dict[str, str]) -> None:
    """``proxied=False``: no proxy started; the runner and the workers name the backend."""
    pf = ProxiedFleet(tmp_path, FleetTiming(), proxied=False).start()
    assert pf.ddb_proxy is None and pf.sqs_proxy is None and pf.runner_proxies == []
    for key in ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"):
        assert pf.fleet.env[key] == runner_env[key] == BACKEND[key]
    assert "AWS_ENDPOINT_URL_DYNAMODB_STREAMS" not in runner_env


def test_with_proxies_the_runner_and_the_workers_each_have_theirs(
        tmp_path: Path, runner_env: dict[str, str]) -> None:
    """By default the workers and the runner go through proxies of their own; the runner
    reads the change stream straight from the backend."""
    pf = ProxiedFleet(tmp_path, FleetTiming()).start()
    try:
        assert pf.ddb_proxy is not None and pf.sqs_proxy is not None
        assert pf.fleet.env["AWS_ENDPOINT_URL_DYNAMODB"] == pf.ddb_proxy.url
        assert pf.fleet.env["AWS_ENDPOINT_URL_SQS"] == pf.sqs_proxy.url
        assert runner_env["AWS_ENDPOINT_URL_DYNAMODB"] == pf.runner_proxies[0].url
        assert runner_env["AWS_ENDPOINT_URL_SQS"] == pf.runner_proxies[1].url
        assert runner_env["AWS_ENDPOINT_URL_DYNAMODB_STREAMS"] == BACKEND[
            "AWS_ENDPOINT_URL_DYNAMODB"]
    finally:
        for p in (pf.ddb_proxy, pf.sqs_proxy, *pf.runner_proxies):
            if p is not None:
                p.close()


def test_a_fleet_without_proxies_meters_nothing(tmp_path: Path) -> None:
    """Metering a bench fleet that runs without proxies is an error, not zero calls."""
    bf = BenchFleet(tmp_path, "ours", FleetTiming(), proxied=False)
    with pytest.raises(RuntimeError, match="without proxies"):
        bf.meter()
