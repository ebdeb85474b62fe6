"""The router Lambda on real-shaped stream events, with DynamoDB Local and moto's SQS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from holdfast.core.aws import InvalidRequest
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.lambdas.router import handler
from holdfast.lambdas.router.handler import RouterDeps, route
from holdfast.lambdas.settings import Settings
from holdfast.localaws import LocalAws
from holdfast.runner.context import LocalContext
from tests.lambdas.helpers import receive_nudges
from tests.lambdas.records import event, image, record


def make_deps(aws: LocalAws, ddb: Any, sqs: Any, queue_url: str,
              table: str | None = None) -> RouterDeps:
    settings = Settings(table=table or aws.table, queue_url=queue_url)
    store = LeaseStore(ddb, settings.table, lease_ms=20_000, skew_ms=1_000)
    return RouterDeps(sqs, store, settings, sleep=lambda _s: None)


@pytest.fixture
def deps(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str) -> RouterDeps:
    return make_deps(ddb_local, ddb, sqs, queue_url)


def held(conn_id: str) -> dict[str, Any]:
    return image(conn_id, owner="w1", expires=wall_clock_ms() + 20_000, epoch=2,
                 status="RUNNING")


def test_insert_is_nudged(deps: RouterDeps, sqs: Any, queue_url: str, unique_id: str) -> None:
    """An INSERT of a STARTED item puts one nudge on the queue, with the item's URL (the worker
    connects before claiming without reading it), and reports no failure."""
    item = image(unique_id, expires=0)
    resp = route(event(record("INSERT", None, item)), None, deps)
    assert resp == {"batchItemFailures": []}
    assert receive_nudges(sqs, queue_url, expect=1) == [
        {"conn_id": unique_id, "reason": "inserted", "epoch": 0,
         "ws_url": item["ws_url"]["S"]}]


def test_a_retried_insert_record_is_nudged_without_its_url(
        deps: RouterDeps, sqs: Any, queue_url: str, unique_id: str) -> None:
    """The same INSERT delivered again ten minutes on (a batch retried behind a failure): one
    nudge, without the URL, so no worker connects before claiming a stream perhaps held."""
    late = record("INSERT", None, image(unique_id, expires=0))
    late["dynamodb"]["ApproximateCreationDateTime"] -= 600
    assert route(event(late), None, deps) == {"batchItemFailures": []}
    assert receive_nudges(sqs, queue_url, expect=1) == [
        {"conn_id": unique_id, "reason": "inserted", "epoch": 0}]


@pytest.mark.parametrize("created", [float("inf"), float("nan"), "soon", True])
def test_a_record_of_no_real_age_is_routed_as_one_of_unknown_age(
        deps: RouterDeps, sqs: Any, queue_url: str, unique_id: str, created: Any) -> None:
    """An ``ApproximateCreationDateTime`` that is no finite number (a hand-built or corrupted
    record): the record is decided as one of unknown age (as ``decide`` takes those: fresh,
    nudged with its URL), not the whole batch failed (``inf`` raised OverflowError and
    blocked the shard)."""
    item = image(unique_id, expires=0)
    odd = record("INSERT", None, item)
    odd["dynamodb"]["ApproximateCreationDateTime"] = created
    assert route(event(odd), None, deps) == {"batchItemFailures": []}
    assert receive_nudges(sqs, queue_url, expect=1) == [
        {"conn_id": unique_id, "reason": "inserted", "epoch": 0, "ws_url": item["ws_url"]["S"]}]


def test_mixed_batch_nudges_only_what_needs_it(deps: RouterDeps, sqs: Any, queue_url: str,
                                               unique_id: str) -> None:
    """Heartbeats, stops, deletes, TTL deletes and malformed records send nothing."""
    a, b, c = (f"{unique_id}-{x}" for x in "abc")
    records = [
        record("MODIFY", held(c), held(c)),
        record("INSERT", None, image(a)),
        record("MODIFY", held(c), image(c, state="STOPPED", owner="w1", expires=1)),
        record("REMOVE", held(c), None),
        record("REMOVE", held(c), None, ttl=True),
        record("INSERT", None, image(c, ws_url="")),
        record("MODIFY", held(b), image(b, expires=0, epoch=2, status="RELEASED")),
    ]
    assert route(event(*records), None, deps) == {"batchItemFailures": []}
    got = receive_nudges(sqs, queue_url, expect=2)
    assert sorted((n["conn_id"], n["reason"], n["epoch"]) for n in got) == [
        (a, "inserted", 0), (b, "released", 2)]
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)


def test_sqs_down_reports_failed_records_by_sequence_number(
        ddb_local: LocalAws, ddb: Any, dead_sqs: Any, unique_id: str) -> None:
    """With SQS unreachable, exactly the records that needed a nudge are reported."""
    deps = make_deps(ddb_local, ddb, dead_sqs, "http://127.0.0.1:1/queue/nudges")
    a, b = f"{unique_id}-a", f"{unique_id}-b"
    records = [record("INSERT", None, image(a, expires=0), seq="101"),
               record("MODIFY", held(a), held(a), seq="102"),
               record("MODIFY", held(b), image(b, expires=0, epoch=2, status="RELEASED"),
                      seq="103"),
               record("INSERT", None, {"Pk": {"S": "nonsense"}}, seq="104")]
    resp = route(event(*records), None, deps)
    assert resp == {"batchItemFailures": [{"itemIdentifier": "101"},
                                          {"itemIdentifier": "103"}]}


def test_whole_batch_failing_is_a_partial_response(
        ddb_local: LocalAws, ddb: Any, dead_sqs: Any, unique_id: str) -> None:
    """Even when every record fails the handler answers (no exception), listing them all."""
    deps = make_deps(ddb_local, ddb, dead_sqs, "http://127.0.0.1:1/queue/nudges")
    resp = route(event(record("INSERT", None, image(unique_id), seq="7")), None, deps)
    assert resp == {"batchItemFailures": [{"itemIdentifier": "7"}]}


def test_one_nudge_per_connection_per_batch(deps: RouterDeps, sqs: Any, queue_url: str,
                                            unique_id: str) -> None:
    """INSERT then release of one item in one batch send a single (latest) nudge."""
    records = [record("INSERT", None, image(unique_id, expires=0)),
               record("MODIFY", held(unique_id),
                      image(unique_id, expires=0, epoch=2, status="RELEASED"))]
    assert route(event(*records), None, deps) == {"batchItemFailures": []}
    assert receive_nudges(sqs, queue_url, expect=2, timeout_s=1.5) == [
        {"conn_id": unique_id, "reason": "released", "epoch": 2}]


def test_give_up_nudge_is_delayed(deps: RouterDeps, sqs: Any, queue_url: str,
                                  unique_id: str) -> None:
    """A give-up's nudge is sent with a delay: not receivable at once, counted as delayed."""
    retry_at = wall_clock_ms() + 60_000
    route(event(record("MODIFY", held(unique_id),
                       image(unique_id, expires=retry_at, epoch=2, status="BACKOFF"))),
          None, deps)
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesDelayed"] == "1"
    assert attrs["ApproximateNumberOfMessages"] == "0"


def test_item_without_expiry_is_normalised_once(deps: RouterDeps, ddb: Any, ddb_local: LocalAws,
                                                sqs: Any, queue_url: str,
                                                unique_id: str) -> None:
    """A seed-schema INSERT is nudged and normalised; the normalising MODIFY nudges nothing."""
    seed = image(unique_id)
    ddb.put_item(TableName=ddb_local.table, Item=seed)
    assert route(event(record("INSERT", None, seed)), None, deps) == {"batchItemFailures": []}
    stored = ddb.get_item(TableName=ddb_local.table, Key={ATTR.pk: {"S": pk_for(unique_id)}},
                          ConsistentRead=True)["Item"]
    assert stored[ATTR.lease_expires_at_ms] == {"N": "0"}
    assert route(event(record("MODIFY", seed, stored)), None, deps) == {"batchItemFailures": []}
    assert len(receive_nudges(sqs, queue_url, expect=2, timeout_s=1.5)) == 1


def test_a_normalisation_left_when_the_invocation_runs_short_is_retried(
        deps: RouterDeps, ddb: Any, ddb_local: LocalAws, unique_id: str) -> None:
    """Less than the reserve left: the item without an expiry is not written but its record
    failed back for Lambda to retry (a write begun then could be cut off by the timeout,
    failing the whole batch)."""
    seed = image(unique_id)
    ddb.put_item(TableName=ddb_local.table, Item=seed)
    changed = {**seed, "note": {"S": "edited"}}
    short = LocalContext("holdfast-router", timeout_ms=handler.SEND_RESERVE_MS - 1_000)
    assert route(event(record("MODIFY", seed, changed, seq="77")), short, deps) == {
        "batchItemFailures": [{"itemIdentifier": "77"}]}
    stored = ddb.get_item(TableName=ddb_local.table, Key={ATTR.pk: {"S": pk_for(unique_id)}},
                          ConsistentRead=True)["Item"]
    assert ATTR.lease_expires_at_ms not in stored


def test_failed_normalisation_fails_the_record(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                               queue_url: str, unique_id: str) -> None:
    """If the item cannot be normalised the record is reported, so Lambda retries it."""
    deps = make_deps(ddb_local, ddb, sqs, queue_url, table="no-such-table")
    resp = route(event(record("INSERT", None, image(unique_id), seq="55")), None, deps)
    assert resp == {"batchItemFailures": [{"itemIdentifier": "55"}]}


def test_an_item_refused_normalisation_is_not_retried(
        deps: RouterDeps, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DynamoDB refuses the item itself (too big to take an expiry): logged and counted, the
    record not failed (retrying it held the shard for nothing, ten times)."""
    def refuse(conn_id: str, at_least_ms: int = 0) -> bool:
        raise InvalidRequest("Item size has exceeded the maximum allowed size")

    monkeypatch.setattr(deps.store, "normalise", refuse)
    resp = route(event(record("INSERT", None, image(unique_id), seq="56")), None, deps)
    assert resp == {"batchItemFailures": []}


def test_garbage_records_are_skipped(deps: RouterDeps) -> None:
    """Records without a dynamodb section or images are logged and skipped, not fatal."""
    records: list[Any] = [{"eventName": "INSERT"}, {"eventName": "MODIFY", "dynamodb": "x"},
                          {"dynamodb": {"SequenceNumber": "9"}}, "not a record"]
    assert route({"Records": records}, None, deps) == {"batchItemFailures": []}
    assert route({}, None, deps) == {"batchItemFailures": []}
    assert route({"Records": "x"}, None, deps) == {"batchItemFailures": []}


def test_a_record_whose_image_is_not_a_map_costs_only_itself(
        deps: RouterDeps, sqs: Any, queue_url: str, unique_id: str) -> None:
    """A record whose NewImage is a list is skipped as malformed; the insert beside it in the
    same batch is nudged and nothing is reported failed."""
    bad = record("INSERT", None, image(f"{unique_id}-bad"))
    bad["dynamodb"]["NewImage"] = ["not", "a", "map"]
    good = image(unique_id, expires=0)
    resp = route(event(bad, record("INSERT", None, good)), None, deps)
    assert resp == {"batchItemFailures": []}
    assert [n["conn_id"] for n in receive_nudges(sqs, queue_url, expect=1)] == [unique_id]


def test_lambda_handler_from_environment(aws_env: dict[str, str], queue_url: str, sqs: Any,
                                         unique_id: str, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The entry point builds its clients from the environment, logs and emits EMF metrics."""
    monkeypatch.setenv("HOLDFAST_QUEUE_URL", queue_url)
    handler.configure(None)
    handler.metrics.clear_metrics()  # other tests call route() without flushing
    try:
        resp = handler.lambda_handler(event(record("INSERT", None, image(unique_id, expires=0))),
                                      LocalContext("holdfast-router"))  # type: ignore[arg-type]
    finally:
        handler.configure(None)
    assert resp == {"batchItemFailures": []}
    assert receive_nudges(sqs, queue_url, expect=1)[0]["conn_id"] == unique_id
    decisions = [r for r in caplog.records if r.getMessage() == "router decision"]
    assert [getattr(r, "conn_id", None) for r in decisions] == [unique_id]
    assert getattr(decisions[0], "reason", None) == "inserted"
    emf = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]
    by_reason = [x for x in emf if x.get("reason") == "inserted"]
    assert by_reason and by_reason[0]["Nudges"] == [1.0]
    assert by_reason[0]["service"] == handler.SERVICE
    assert ["reason", "service"] in [sorted(d) for d in
                                     by_reason[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]
    totals = [x for x in emf if "Records" in x]
    assert totals and totals[0]["Records"] == [1.0] and totals[0]["MalformedRecords"] == [0.0]
    assert totals[0]["ItemErrors"] == [0.0]  # alarmed with the sweeper's


def test_handlers_import_without_aws_settings(tmp_path: Any) -> None:
    """Importing either handler needs no AWS environment (clients are built on first use)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    code = "import holdfast.lambdas.router.handler, holdfast.lambdas.sweeper.handler; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=os.getcwd(), timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
