"""The taskstopped handler on DynamoDB Local: a reported stop frees a worker's streams at once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from holdfast.core.exceptions import ConfigError
from holdfast.core.schema import BACKSTOP_MS, SessionState
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.core.table import create_stream
from holdfast.lambdas.taskstopped import handler
from holdfast.lambdas.taskstopped.events import task_stopped_event
from holdfast.lambdas.taskstopped.handler import TaskStoppedDeps, deps_for_env, handle
from holdfast.localaws import LocalAws
from holdfast.runner.context import LocalContext
from tests.conftest import client_for

TTL_MS = 60_000  # long: nothing here may be released by a TTL running out


@pytest.fixture
def deps(ddb_local: LocalAws) -> TaskStoppedDeps:
    return deps_for_env(ddb_local.env())


def _worker(deps: TaskStoppedDeps, worker_id: str, streams: int) -> tuple[Any, list[str]]:
    store = SessionStore(deps.sessions.client, deps.sessions.table, deps.sessions.lease_table,
                         ttl_ms=TTL_MS, skew_ms=1_000)
    session = store.start(worker_id, capacity=streams)
    leases = LeaseStore(store.client, store.lease_table, lease_ms=BACKSTOP_MS, skew_ms=1_000)
    ids = [f"{worker_id}-{i}" for i in range(streams)]
    for conn in ids:
        assert create_stream(store.client, store.lease_table, conn, f"ws://127.0.0.1:9/{conn}")
        leases.acquire(conn, session.owner)
    return session, ids


def _owners(deps: TaskStoppedDeps, ids: list[str]) -> list[str | None]:
    leases = LeaseStore(deps.sessions.client, deps.sessions.lease_table, lease_ms=BACKSTOP_MS,
                        skew_ms=1_000)
    return [item.lease_owner if (item := leases.get(c)) else "<gone>" for c in ids]


def test_a_stopped_task_releases_its_streams_and_a_repeat_does_nothing(
        deps: TaskStoppedDeps, unique_id: str) -> None:
    """STOPPED: session DEAD, every stream released; the same event again is a duplicate."""
    _, ids = _worker(deps, unique_id, 4)
    event = task_stopped_event(unique_id, stopped_at_ms=wall_clock_ms(), reason="OOM")
    out = handle(event, deps)
    assert (out.worker_id, out.declared_dead, out.released, out.skipped) == (
        unique_id, True, 4, None)
    assert _owners(deps, ids) == [None] * 4
    item = deps.sessions.get(unique_id)
    assert item is not None and item.state is SessionState.DEAD
    again = handle(event, deps)
    assert again.duplicate and again.released == 0
    fresh = handle(event, deps_for_env({**_env(deps)}))  # a cold container: conditional writes
    assert not fresh.declared_dead and fresh.released == 0 and not fresh.duplicate


def _env(deps: TaskStoppedDeps) -> dict[str, str]:
    client = deps.sessions.client
    return {"HOLDFAST_TABLE": deps.sessions.lease_table,
            "HOLDFAST_SESSION_TABLE": deps.sessions.table,
            "AWS_ENDPOINT_URL_DYNAMODB": client.meta.endpoint_url, "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


def test_a_stopping_task_is_left_to_its_graceful_stop(deps: TaskStoppedDeps,
                                                      unique_id: str) -> None:
    """STOPPING: nothing is written; the session stays ALIVE and keeps its streams."""
    session, ids = _worker(deps, unique_id, 2)
    out = handle(task_stopped_event(unique_id, stopped_at_ms=wall_clock_ms(),
                                    last_status="STOPPING"), deps)
    assert out.skipped and "STOPPING" in out.skipped and not out.malformed
    assert _owners(deps, ids) == [session.owner] * 2


def test_a_late_stop_of_an_older_task_spares_the_new_process(deps: TaskStoppedDeps,
                                                            unique_id: str) -> None:
    """An event for a stop before the session started (a reused id) changes nothing."""
    stopped_at = wall_clock_ms() - 10_000
    session, ids = _worker(deps, unique_id, 2)
    out = handle(task_stopped_event(unique_id, stopped_at_ms=stopped_at), deps)
    assert not out.declared_dead and "started after the task stopped" in (out.skipped or "")
    assert _owners(deps, ids) == [session.owner] * 2


def test_malformed_event_is_logged_and_skipped(deps: TaskStoppedDeps,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """A broken event neither raises nor writes; it is logged as an error."""
    out = handle({"detail-type": "ECS Task State Change", "detail": {"lastStatus": "STOPPED",
                                                                     "taskArn": 42}}, deps)
    assert out.malformed and out.worker_id is None
    assert any("malformed task event" in r.getMessage() for r in caplog.records)


def test_a_stop_of_a_worker_whose_session_item_is_broken_is_logged_and_skipped(
        deps: TaskStoppedDeps, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Its session item without an expiry (edited by hand): the report cannot judge it, so it
    is logged as an error with the fix and skipped, not raised (Lambda retried it into the
    DLQ, though no retry could mend it)."""
    _worker(deps, unique_id, 1)
    deps.sessions.client.update_item(TableName=deps.sessions.table,
                                     Key=deps.sessions._key(unique_id),
                                     UpdateExpression="REMOVE session_expires_at_ms")
    out = handle(task_stopped_event(unique_id, stopped_at_ms=wall_clock_ms()), deps)
    assert out.malformed and out.skipped and "session item malformed" in out.skipped
    assert any("fix or delete it" in r.getMessage() for r in caplog.records)


def test_lambda_entry_point_reads_its_tables_from_the_environment(
        ddb_local: LocalAws, unique_id: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """lambda_handler builds its clients from the environment and emits its metrics."""
    for key, value in ddb_local.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    handler.configure(None)
    try:
        deps = deps_for_env()
        _, ids = _worker(deps, unique_id, 1)
        summary = handler.lambda_handler(task_stopped_event(unique_id,
                                                            stopped_at_ms=wall_clock_ms()),
                                         LocalContext("holdfast-taskstopped"))  # type: ignore[arg-type]
    finally:
        handler.configure(None)
    assert summary == {"worker_id": unique_id, "declared_dead": True, "released": 1,
                       "skipped": None}
    assert _owners(deps, ids) == [None]
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines()
           if line.startswith("{") and "_aws" in line]
    assert any(m.get("ReportedDeadSessions") == [1.0] and m.get("StreamsReaped") == [1.0]
               for m in emf), emf


def test_each_released_stream_is_nudged_by_the_report_too(ddb_local: LocalAws,
                                                           unique_id: str) -> None:
    """With a nudge queue, the report nudges every stream it released, now and a second later
    (the dead worker's pending polls may swallow the first nudges)."""
    env = ddb_local.env()
    sqs = client_for(ddb_local, "sqs")
    queue_url = sqs.create_queue(QueueName=f"ts-{unique_id}")["QueueUrl"]
    deps = deps_for_env({**env, "HOLDFAST_QUEUE_URL": queue_url})
    _, ids = _worker(deps, unique_id, 3)
    out = handle(task_stopped_event(unique_id, stopped_at_ms=wall_clock_ms()), deps)
    assert out.released == 3
    nudged: list[str] = []
    for _ in range(8):
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        nudged += [json.loads(m["Body"])["conn_id"] for m in got.get("Messages", [])]
        if len(nudged) >= 2 * len(ids):
            break
    # Once now and once a second later, when the dead worker's polls have surely returned.
    assert sorted(nudged) == sorted(ids * 2)


def test_the_session_ttl_comes_from_the_workers_lease_seconds(ddb_local: LocalAws) -> None:
    """The TTL and skew are read as the worker reads them: HOLDFAST_LEASE_SECONDS (default 4 s),
    not the old HOLDFAST_LEASE_MS; a bad value is a ConfigError naming the variable."""
    env = ddb_local.env()
    assert deps_for_env({**env, "HOLDFAST_LEASE_MS": "20000"}).sessions.ttl_ms == 4_000
    tuned = deps_for_env({**env, "HOLDFAST_LEASE_SECONDS": "3", "HOLDFAST_HEARTBEAT_SECONDS": "0.5",
                          "HOLDFAST_SKEW_MS": "300"}).sessions
    assert (tuned.ttl_ms, tuned.skew_ms) == (3_000, 300)
    with pytest.raises(ConfigError, match="HOLDFAST_LEASE_SECONDS"):
        deps_for_env({**env, "HOLDFAST_LEASE_SECONDS": "soon"})


def test_streams_the_report_could_not_release_are_said(
        deps: TaskStoppedDeps, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Releases refused by the table (throttled) are logged as an error with how many were
    left to the sweeper, not dropped without a trace; the session is DEAD all the same."""
    _, ids = _worker(deps, unique_id, 3)
    client, lease_table = deps.sessions.client, deps.sessions.lease_table

    def refuse_lease_writes(params: dict[str, Any], **_: Any) -> None:
        statements = params.get("Statements") or [{}]
        if params.get("TableName") == lease_table or any(
                lease_table in s.get("Statement", "") for s in statements):
            raise EndpointConnectionError(endpoint_url="http://throttled")

    writes = [f"provide-client-params.dynamodb.{op}" for op in ("UpdateItem",
                                                                "BatchExecuteStatement")]
    for event in writes:
        client.meta.events.register(event, refuse_lease_writes)
    try:
        out = handle(task_stopped_event(unique_id, stopped_at_ms=wall_clock_ms()), deps)
    finally:
        for event in writes:
            client.meta.events.unregister(event, refuse_lease_writes)
    assert out.declared_dead and out.released == 0
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("3 of its streams not released, left to the sweeper" in m for m in said)
    owners = _owners(deps, ids)  # still the dead session's: the sweeper's to release
    assert len(set(owners)) == 1 and owners[0] not in (None, "<gone>")
