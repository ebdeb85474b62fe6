"""The metric names the stack watches are the ones the worker and the Lambdas emit."""

from __future__ import annotations

from pathlib import Path

import pytest

from holdfast.core import names
from tests.infra.conftest import REPO

WORKER_METRICS = (names.METRIC_ACTIVE_CONNECTIONS, names.METRIC_CLAIMS,
                  names.METRIC_CLAIM_CONFLICTS, names.METRIC_LEASES_LOST,
                  names.METRIC_LEASES_FENCED, names.METRIC_RENEW_FAILURES,
                  names.METRIC_RENEW_LATENCY, names.METRIC_RECONNECTS,
                  names.METRIC_HANDLER_ERRORS, names.METRIC_UPSTREAM_GIVE_UPS)
LAMBDA_METRICS = (names.METRIC_NUDGES, names.METRIC_NUDGES_FAILED,
                  names.METRIC_MALFORMED_RECORDS, names.METRIC_NORMALISED, names.METRIC_SWEEPS,
                  names.METRIC_SWEEP_ERRORS, names.METRIC_OLDEST_ORPHAN_AGE)
# Watched since the session change; worker/ and lambdas/ emit them once that change lands.
SESSION_METRICS = {"worker": (names.METRIC_SESSION_RENEW_FAILURES,),
                   "lambdas": (names.METRIC_DEAD_SESSIONS, names.METRIC_STREAMS_REAPED)}


def source_of(folder: str) -> str:
    files = sorted((REPO / folder).rglob("*.py"))
    if not files:
        pytest.skip(f"{folder}/ is not written yet")
    return "\n".join(Path(f).read_text() for f in files)


def test_worker_emits_every_metric_the_stack_uses() -> None:
    """Each worker metric on the dashboard or in scaling appears in the worker's code."""
    source = source_of("worker")
    missing = [m for m in WORKER_METRICS if f'"{m}"' not in source]
    assert missing == []


def test_lambdas_emit_every_metric_the_stack_uses() -> None:
    """Each router/sweeper metric on the dashboard or in an alarm appears in lambdas/."""
    source = source_of("lambdas")
    missing = [m for m in LAMBDA_METRICS if f'"{m}"' not in source]
    assert missing == []


# strict: once the code emits them this XPASSes and fails, so the marker cannot outlive its
# reason (remove it and fold SESSION_METRICS into the two lists above).
@pytest.mark.xfail(strict=True, reason="the session metrics are not emitted by worker/ and "
                   "lambdas/ yet (the lead's change)")
@pytest.mark.parametrize("folder", sorted(SESSION_METRICS))
def test_session_metrics_the_stack_watches_are_emitted(folder: str) -> None:
    """DeadSessions/StreamsReaped (sweeper) and SessionRenewFailures (worker) are emitted."""
    source = source_of(folder)
    missing = [m for m in SESSION_METRICS[folder] if f'"{m}"' not in source]
    assert missing == []


def test_namespace_is_shared() -> None:
    """Worker and Lambdas publish to the namespace the stack reads."""
    for folder in ("worker", "lambdas"):
        assert f'"{names.NAMESPACE}"' in source_of(folder)


def test_service_names_carry_the_fleet_name() -> None:
    """Two fleets in one account get distinct service dimensions."""
    assert names.service_names("holdfast")["worker"] == "holdfast-worker"
    assert names.service_names("staging")["router"] == "staging-router"
