"""In-process workers on DynamoDB Local + moto SQS + the demo upstream: the lease life cycle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from holdfast.core import names
from holdfast.core.aws import client_config
from holdfast.core.boto import new_session
from holdfast.core.orders import Order
from holdfast.core.schema import SESSION, session_pk_for, session_table_definition
from holdfast.core.store import LeaseStore
from holdfast.core.table import delete_stream, set_desired_state
from holdfast.worker import handling
from holdfast.worker.claimer import Claimer
from holdfast.worker.handler import Message
from holdfast.worker.holdings import CLAIM_LAG_LIMIT_MS
from holdfast.worker.orders import OrderInbox
from holdfast.worker.supervisor import Supervisor
from tests.conftest import client_for
from tests.worker.conftest import (
    Fleet,
    UpstreamThread,
    async_wait_until,
    missing_seqs,
    worker_config,
)
from tests.worker.helpers import Recorder, item_attr, nudge_until_backoff, running_worker
from tests.worker.proxy import CuttableProxy


def other_store(fleet: Fleet) -> LeaseStore:
    return LeaseStore(fleet.ddb, fleet.table, lease_ms=3000, skew_ms=300)


async def test_stopped_stream_closes_and_releases_with_checkpoint(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Setting STOPPED closes the stream within a heartbeat and releases it with its checkpoint."""
    rec, conn = Recorder(), f"{unique_id}-s"
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 5, 10, "messages")
        set_desired_state(fleet.ddb, fleet.table, conn, "STOPPED")
        t0 = time.monotonic()
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "stream closed")
        closed_after = time.monotonic() - t0
        count = len(rec.calls)
        await asyncio.sleep(0.3)
        assert len(rec.calls) == count, "handler called after STOPPED"
    assert closed_after < 0.5 + 1.0  # one heartbeat (0.5 s) plus slack for a loaded box
    item = fleet.item(conn)
    assert "lease_owner" not in item
    assert item_attr(item, "last_seq") == rec.seqs(conn)[-1]
    assert upstream.server.connlog.open_count() == 0


async def test_stolen_lease_closes_at_once_without_writing(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """When the item is rewritten to another owner by hand (no acquire can take an owned
    stream), the holder stops at its next checkpoint write without writing anything."""
    rec, conn = Recorder(), f"{unique_id}-x"
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 10, "messages")
        fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                              UpdateExpression="SET lease_owner = :r ADD lease_epoch :one",
                              ExpressionAttributeValues={":r": {"S": "rival"},
                                                         ":one": {"N": "1"}})
        rival_epoch = item_attr(fleet.item(conn), "lease_epoch")
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "stream closed")
        assert run.worker.metrics.totals["LeasesLost"] == 1
    item = fleet.item(conn)
    assert item_attr(item, "lease_owner") == "rival"
    assert item_attr(item, "lease_epoch") == rival_epoch


async def test_deleted_stream_closes(fleet: Fleet, upstream: UpstreamThread,
                                     unique_id: str) -> None:
    """Deleting the item closes the stream within a heartbeat."""
    rec, conn = Recorder(), f"{unique_id}-d"
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: rec.seqs(conn), 10, "messages")
        delete_stream(fleet.ddb, fleet.table, conn, held_too=True)  # an operator's delete-item
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "stream closed")
    assert fleet.item(conn) == {}


async def test_handler_exceptions_are_isolated(fleet: Fleet, upstream: UpstreamThread,
                                               unique_id: str) -> None:
    """A raising handler is counted and retried; its stream goes on, other streams unaffected."""
    rec = Recorder(fail_on={2, 3, 5, 8}, transient=True)
    a, b = f"{unique_id}-a", f"{unique_id}-b"
    fleet.create(a, upstream.url(a))
    fleet.create(b, upstream.url(b))
    async with running_worker(fleet, rec, HOLDFAST_HANDLER_RETRY_BASE_SECONDS="0.01",
                              HOLDFAST_HANDLER_RETRY_CAP_SECONDS="0.01") as run:
        fleet.nudge(a)
        fleet.nudge(b)
        await async_wait_until(lambda: len(set(rec.seqs(a))) >= 12
                               and len(set(rec.seqs(b))) >= 12, 10, "messages on both streams")
        assert run.worker.metrics.totals["HandlerErrors"] >= 8
        assert run.worker.metrics.totals["Reconnects"] == 0
    for conn in (a, b):
        seqs = rec.seqs(conn)
        assert not missing_seqs(seqs)
        # Each failed call was retried at once: 2, 3, 5 and 8 were called twice in a row.
        assert [s for s in seqs if seqs.count(s) > 1] == [2, 2, 3, 3, 5, 5, 8, 8]
        assert item_attr(fleet.item(conn), "last_seq") == seqs[-1]


async def test_capacity_limit_leaves_work_to_others(fleet: Fleet, upstream: UpstreamThread,
                                                    unique_id: str) -> None:
    """A full worker claims no more than HOLDFAST_MAX_CONNECTIONS and leaves nudges queued."""
    rec = Recorder()
    conns = [f"{unique_id}-{i}" for i in range(5)]
    for c in conns:
        fleet.create(c, upstream.url(c))
    async with running_worker(fleet, rec, HOLDFAST_MAX_CONNECTIONS="2") as run:
        for c in conns:
            fleet.nudge(c)
        await async_wait_until(lambda: len(run.worker.streams) == 2, 10, "two claims")
        await asyncio.sleep(1.5)
        assert len(run.worker.streams) == 2
        assert fleet.queue_depth() == 3
        owners = [item_attr(fleet.item(c), "lease_owner") for c in conns]
        assert sum(o is not None for o in owners) == 2


async def test_a_lagging_loop_claims_nothing_more(fleet: Fleet, upstream: UpstreamThread,
                                                 unique_id: str) -> None:
    """While the loop runs over a second behind, the worker has no free capacity (counted once
    per pause): nudges stay for others; it claims again once the loop keeps time."""
    conn = f"{unique_id}-lag"
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.owner is not None, 10, "a session")
        holdings = run.worker.holdings
        real = holdings.loop_lag_ms
        holdings.loop_lag_ms = lambda: CLAIM_LAG_LIMIT_MS + 1
        assert run.worker.free_capacity() == 0
        fleet.nudge(conn)
        await asyncio.sleep(1.5)
        assert conn not in run.worker.streams
        assert run.worker.metrics.totals[names.METRIC_CLAIMS_PAUSED_LAGGING] == 1
        holdings.loop_lag_ms = real
        assert run.worker.free_capacity() > 0
        await async_wait_until(lambda: conn in run.worker.streams, 15, "claimed after the lag")


async def test_the_session_names_the_workers_version(fleet: Fleet) -> None:
    """A worker started with HOLDFAST_WORKER_VERSION records it in its session item."""
    async with running_worker(fleet, Recorder(), HOLDFAST_WORKER_VERSION="hf:7") as run:
        await async_wait_until(lambda: run.worker.owner is not None, 10, "a session")
        item = fleet.sessions().get(run.worker.worker_id)
        assert item is not None and item.version == "hf:7"


async def test_a_slow_order_queue_creation_does_not_fence_a_new_session(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order queue's creation takes longer than the session's usable window (a new
    process's first SQS call on a loaded machine): the heartbeat runs meanwhile, so the
    session is kept, not fenced and started again."""
    create = OrderInbox._create_now

    async def slow_create(inbox: OrderInbox, owner: str) -> bool:
        await asyncio.sleep(3.0)  # past the fence: lease 3 s - skew 0.3 - margin 0.3 = 2.4 s
        return await create(inbox, owner)

    # The SQS call itself is slow: the reader's and ``open``'s wait share it.
    monkeypatch.setattr(OrderInbox, "_create_now", slow_create)
    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.inbox is not None and run.worker.inbox.url,
                               10, "the order queue")
        owner = run.worker.owner
        await asyncio.sleep(1.0)  # a heartbeat after it
        assert run.worker.owner == owner and run.worker.counts["sessions_lost"] == 0


async def test_poison_and_conflicting_nudges_are_deleted(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Unparseable nudges and nudges for streams held elsewhere are deleted, not retried."""
    held, gone = f"{unique_id}-held", f"{unique_id}-gone"
    fleet.create(held, upstream.url(held))
    other_store(fleet).acquire(held, "someone-else")
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        for body in ("not json", "[1]", '{"conn_id": 5}', '{"conn_id": "has spaces"}',
                     '{"reason": "no id"}', "[" * 5000):  # the last: past the recursion limit
            fleet.nudge("", body)
        fleet.nudge(held)
        fleet.nudge(gone)  # no such item
        await async_wait_until(lambda: fleet.queue_depth() == 0, 10, "queue drained")
        assert run.worker.metrics.totals["PoisonMessages"] == 6
        assert run.worker.metrics.totals["ClaimConflicts"] == 2
        assert not run.worker.streams
    assert item_attr(fleet.item(held), "lease_owner") == "someone-else"


async def test_a_malformed_item_is_parked_and_counted_as_quarantined(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stream whose item breaks the schema (a mistyped epoch): the claim parks it INVALID
    with the reason, and counts it as StreamsQuarantined, not as a race (ClaimConflicts):
    the sweeper finds it again every 5 min, so its orphan age never shows it."""
    conn = f"{unique_id}-bad"
    fleet.create(conn, upstream.url(conn))
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                          UpdateExpression="SET lease_epoch = :bad",
                          ExpressionAttributeValues={":bad": {"S": "oops"}})
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: item_attr(fleet.item(conn), "status") == "INVALID",
                               10, "parked")
        await async_wait_until(
            lambda: run.worker.metrics.totals["StreamsQuarantined"] == 1, 5, "counted")
        assert run.worker.metrics.totals["ClaimConflicts"] == 0 and not run.worker.streams
    assert "malformed item" in item_attr(fleet.item(conn), "last_error")
    assert not rec.calls


async def test_a_retake_order_takes_back_a_stream_written_over_before_its_checkpoint(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The router's ``retake`` order for a stream an app's PutItem wrote over: the holder
    writes its owner, epoch and checkpoint back at once (its next checkpoint is a minute
    away), and the stream goes on; one for another epoch is not ours."""
    conn = f"{unique_id}-over"
    fleet.create(conn, upstream.url(conn))
    rec = Recorder()
    async with running_worker(fleet, rec, HOLDFAST_CHECKPOINT_SECONDS="60") as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 5, 10, "delivering")
        epoch = run.worker.streams[conn].held.lease.epoch
        fleet.ddb.put_item(TableName=fleet.table, Item={
            "Pk": {"S": f"CONN#{conn}"}, "desired_state": {"S": "STARTED"},
            "ws_url": {"S": upstream.url(conn)}, "lease_expires_at_ms": {"N": "0"}})
        assert not run.worker.carry_out(Order("retake", conn, epoch - 1))
        assert run.worker.carry_out(Order("retake", conn, epoch))
        # Counted once its write has answered (the item shows it a moment before).
        await async_wait_until(lambda: run.worker.metrics.totals["HoldingsTakenBack"] == 1,
                               5, "taken back")
        assert item_attr(fleet.item(conn), "lease_epoch") == epoch
        assert run.worker.streams[conn].held.live
        assert item_attr(fleet.item(conn), "lease_owner") == run.worker.owner


async def test_a_malformed_item_that_cannot_be_parked_is_not_said_parked(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A malformed STOPPED item (never parked: the operator's stop stands) nudged: the claim
    says it could not be parked and counts no quarantine (it said "parked" every time)."""
    caplog.set_level("WARNING", logger="holdfast-worker.holdfast.worker.acquiring")
    conn = f"{unique_id}-bad-stopped"
    fleet.create(conn, upstream.url(conn))
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                          UpdateExpression="SET lease_epoch = :bad, desired_state = :s",
                          ExpressionAttributeValues={":bad": {"S": "oops"},
                                                     ":s": {"S": "STOPPED"}})
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: any("could not be parked" in r.getMessage()
                                           for r in caplog.records), 10, "the refusal")
        assert run.worker.metrics.totals["StreamsQuarantined"] == 0 and not run.worker.streams
    assert item_attr(fleet.item(conn), "status") is None


async def test_hostile_urls_are_refused_and_recorded(fleet: Fleet, unique_id: str) -> None:
    """Bad schemes, private and metadata addresses: BACKOFF at once, no connect, reason kept."""
    urls = {"http": "http://127.0.0.1:1/x", "imds": "ws://169.254.169.254/latest/meta-data",
            "imds6": "ws://[fd00:ec2::254]/", "mapped": "ws://[::ffff:169.254.169.254]/",
            "file": "file:///etc/passwd", "private": "ws://10.0.0.2/p?token=secret",
            "decimal": "ws://2852039166/", "cgnat": "ws://100.64.0.1:8081/a;sid=secret"}
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        for name, url in urls.items():
            fleet.create(f"{unique_id}-{name}", url)
            fleet.nudge(f"{unique_id}-{name}")
        await async_wait_until(
            lambda: all(item_attr(fleet.item(f"{unique_id}-{n}"), "status") == "BACKOFF"
                        for n in urls), 10, "all refused")
        assert run.worker.metrics.totals["Reconnects"] == 0
    for name in urls:
        item = fleet.item(f"{unique_id}-{name}")
        assert item_attr(item, "last_error").startswith("ws_url refused")
        assert "secret" not in item_attr(item, "last_error")
        assert item_attr(item, "lease_expires_at_ms") > time.time() * 1000  # not re-claimable
        assert "lease_owner" not in item
    assert not rec.calls


async def test_failing_upstream_is_handed_back_with_error(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """After repeated connection failures the lease is released in BACKOFF with the error."""
    conn, rec = f"{unique_id}-r", Recorder()
    fleet.create(conn, upstream.url(conn, "reject"))
    async with running_worker(fleet, rec, HOLDFAST_UPSTREAM_MAX_FAILURES="3") as run:
        await nudge_until_backoff(fleet, conn, 10, "give-up")
        assert run.worker.metrics.totals["UpstreamGiveUps"] == 1
    item = fleet.item(conn)
    assert "503" in item_attr(item, "last_error")
    assert item_attr(item, "error_count") == 1


async def test_a_give_up_after_progress_starts_its_back_off_again_from_the_base(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stream whose item counts 3 give-ups in a row delivers seqs 0-2, then its handler
    fails on seq 3 until it parks: 1 give-up in a row is recorded (the back-off's base), not 4."""
    conn = f"{unique_id}-p"
    fleet.create(conn, upstream.url(conn))
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                          UpdateExpression="SET error_count = :n",
                          ExpressionAttributeValues={":n": {"N": "3"}})
    handled: list[int | None] = []

    async def fails_at_three(message: Message) -> None:
        if message.seq == 3:
            raise ConnectionError("downstream down")
        handled.append(message.seq)

    async with running_worker(fleet, fails_at_three, HOLDFAST_HANDLER_ATTEMPTS="1") as run:
        await nudge_until_backoff(fleet, conn, 10, "park")
        assert run.worker.metrics.totals["HandlerFailuresParked"] == 1
    item = fleet.item(conn)
    assert handled[:3] == [0, 1, 2] and item_attr(item, "error_count") == 1
    retry_s = (item_attr(item, "lease_expires_at_ms") - time.time() * 1000) / 1000
    assert retry_s < 31  # the first give-up's back-off (30 s base), not the fourth's (240 s)


async def test_graceful_stop_finishes_the_handler_call_in_flight(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """On stop the call in flight completes, and the release checkpoints exactly what ran."""
    conn = f"{unique_id}-g"
    started: list[int | None] = []
    finished: list[int | None] = []

    async def slow(message: Message) -> None:
        started.append(message.seq)
        await asyncio.sleep(0.3)
        finished.append(message.seq)  # after the sleep: an aborted call never gets here

    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, slow) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(finished) >= 2 and len(started) > len(finished),
                               10, "a call in flight")
        in_flight = started[-1]
    counts = await run.task
    assert counts["released"] == 1
    assert in_flight in finished and finished == started  # no call was cut short
    assert item_attr(fleet.item(conn), "last_seq") == finished[-1]


async def test_reconcile_sweep_claims_orphans(fleet: Fleet, upstream: UpstreamThread,
                                              unique_id: str) -> None:
    """With no nudge at all, the fallback sweep finds and claims STARTED unowned streams."""
    conns = [f"{unique_id}-{i}" for i in range(3)]
    for c in conns:
        fleet.create(c, upstream.url(c))
    rec = Recorder()
    async with running_worker(fleet, rec, HOLDFAST_RECONCILE_SECONDS="0.3") as run:
        await async_wait_until(lambda: len(run.worker.streams) == 3, 10, "sweep claims")


def dynamodb_proxy(fleet: Fleet) -> CuttableProxy:
    """A proxy in front of the fleet's DynamoDB that a test can cut and heal."""
    host, port = fleet.env["AWS_ENDPOINT_URL_DYNAMODB"].removeprefix("http://").split(":")
    return CuttableProxy(host, int(port))


def client_through(proxy: CuttableProxy) -> Any:
    """A DynamoDB client through ``proxy`` that gives up fast (one retry, 0.5 s reads)."""
    return new_session().client(
        "dynamodb", endpoint_url=proxy.url, region_name="us-east-1",
        aws_access_key_id="local", aws_secret_access_key="local",
        config=client_config(read_timeout=0.5, retries=1))


async def test_self_fencing_when_dynamodb_is_unreachable(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A worker cut off from DynamoDB stops its stream before the lease could expire."""
    conn, rec = f"{unique_id}-f", Recorder()
    fleet.create(conn, upstream.url(conn))
    proxy = dynamodb_proxy(fleet)
    try:
        config = worker_config(fleet)
        worker = Supervisor(config, ddb=client_through(proxy),
                            sqs=client_for(fleet.aws, "sqs"), handler=rec)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop.wait))
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 10, "messages")
        expires = item_attr(fleet.item(conn), "lease_expires_at_ms")
        proxy.cut()
        await async_wait_until(lambda: worker.metrics.totals["LeasesFenced"], 6, "fenced")
        calls = len(rec.calls)
        await async_wait_until(lambda: upstream.server.connlog.open_count() == 0, 2, "closed")
        closed = upstream.server.connlog.records(conn)[-1].closed_wall_ms
        # Closed before anyone could take it over (expiry + skew on a challenger's clock).
        assert closed is not None and closed < expires + 300
        # No heartbeat has landed for a whole lease: still nothing handled meanwhile.
        await async_wait_until(lambda: worker.keeper is not None and worker.mono() - (
            worker.keeper.last_ok_mono_ms or 0) > config.lease_ms, 5, "a lease without a beat")
        assert len(rec.calls) == calls
        assert upstream.server.connlog.open_count() == 0
        stop.set()
        counts = await asyncio.wait_for(task, 15)
        assert counts["fenced"] == 1
    finally:
        proxy.close()


async def test_a_worker_started_again_after_fencing_itself_counts_no_death(
        fleet: Fleet) -> None:
    """A worker cut off from DynamoDB fences itself and, once it answers again, starts a new
    session over its own lost one: no worker died, so ``DeadSessions`` counts nothing."""
    proxy = dynamodb_proxy(fleet)
    try:
        # No reconcile sweep of ours declaring the lost session dead first.
        config = worker_config(fleet, HOLDFAST_RECONCILE_SECONDS="0")
        worker = Supervisor(config, ddb=client_through(proxy),
                            sqs=client_for(fleet.aws, "sqs"), handler=Recorder())
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop.wait))
        await async_wait_until(lambda: worker.owner, 10, "a session")
        first = worker.owner
        proxy.cut()
        await async_wait_until(lambda: worker.counts["sessions_lost"], 10, "the session lost")
        proxy.heal()
        await async_wait_until(lambda: worker.owner not in (None, first), 20, "a new session")
        assert worker.metrics.totals[names.METRIC_DEAD_SESSIONS] == 0
        stop.set()
        await asyncio.wait_for(task, 15)
    finally:
        proxy.close()


async def test_a_claim_in_flight_at_the_stop_is_handed_back_before_the_session_ends(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim whose acquire lands during the stop: the goodbye waits for it and for its
    release before ending the session (a process that exits then left the stream owned by
    an ended session until the sweeper reaped it)."""
    conn = f"{unique_id}-late"
    fleet.create(conn, upstream.url(conn))
    # No wait for our last nudge polls, which would cover the claim by chance.
    config = worker_config(fleet, HOLDFAST_POLL_DRAIN_SECONDS="0")
    worker = Supervisor(config, ddb=client_for(fleet.aws, "dynamodb"),
                        sqs=client_for(fleet.aws, "sqs"), handler=Recorder())
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop.wait))
    await async_wait_until(lambda: worker.owner, 10, "a session")
    acquire = LeaseStore.acquire

    def slow(store: LeaseStore, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.4)  # on its way while the stop runs
        return acquire(store, *args, **kwargs)

    monkeypatch.setattr(LeaseStore, "acquire", slow)
    claim = asyncio.create_task(worker.holdings.claim(conn))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 20)
    assert claim.done() and "lease_owner" not in fleet.item(conn)


async def test_works_on_moto_with_single_renewals(moto_local: object, upstream: UpstreamThread,
                                                  unique_id: str) -> None:
    """On moto (whose PartiQL ignores conditions) the worker renews one item at a time."""
    from tests.worker.conftest import make_fleet

    fleet = make_fleet(moto_local, unique_id)  # type: ignore[arg-type]
    assert fleet.env["HOLDFAST_RENEW_MODE"] == "single"
    conn, rec = f"{unique_id}-m", Recorder()
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 5, 15, "messages")
        await asyncio.sleep(1.2)  # a few heartbeats
        assert conn in run.worker.streams and run.worker.metrics.totals["RenewFailures"] == 0
    assert item_attr(fleet.item(conn), "last_seq") == rec.seqs(conn)[-1]



async def test_nudge_for_a_stream_in_backoff_returns_when_it_ends(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A nudge arriving during a back-off is shown again when the back-off ends, then claimed."""
    conn, rec = f"{unique_id}-bo", Recorder()
    fleet.create(conn, upstream.url(conn))
    store = other_store(fleet)
    lease = store.acquire(conn, "gave-up-worker")
    store.release(lease, None, error="upstream down", retry_at_ms=int(time.time() * 1000) + 2000)
    async with running_worker(fleet, rec) as run:
        t0 = time.monotonic()
        fleet.nudge(conn)
        await async_wait_until(lambda: conn in run.worker.streams, 10, "claimed after back-off")
        waited = time.monotonic() - t0
    assert waited >= 2.0  # not before the back-off ended
    assert item_attr(fleet.item(conn), "error_count") == 0  # a clean release resets it


def first_call_and_checkpoint(
        fleet: Fleet, conn: str,
) -> tuple[list[tuple[int | None, object]], Callable[[Message], Awaitable[None]]]:
    """A handler that records the first message's seq and the checkpoint stored at its call."""
    seen: list[tuple[int | None, object]] = []

    async def handler(message: Message) -> None:
        if not seen:
            seen.append((message.seq, item_attr(fleet.item(conn), "last_seq")))
    return seen, handler


async def test_first_checkpoint_is_written_before_the_first_handler_call(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A never-checkpointed stream records its start, so a crash right after cannot skip it."""
    conn = f"{unique_id}-first"
    fleet.create(conn, upstream.url(conn))
    seen, handler = first_call_and_checkpoint(fleet, conn)

    async with running_worker(fleet, handler):
        fleet.nudge(conn)
        await async_wait_until(lambda: seen, 10, "first message")
    first_seq, stored = seen[0]
    assert first_seq is not None and stored == first_seq - 1


async def test_nothing_is_handled_before_the_first_checkpoint_is_stored(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The first checkpoint's write fails (DynamoDB unreachable for a moment): it is tried
    again, and the first handler call waits for it. The handler was called at once, and a
    crash before the next checkpoint left the next holder to start wherever the upstream was."""
    conn = f"{unique_id}-first-fails"
    fleet.create(conn, upstream.url(conn))
    seen, handler = first_call_and_checkpoint(fleet, conn)

    dropped: list[str] = []

    def drop_two_checkpoints(params: dict[str, Any], **_: Any) -> None:
        # The stream's writes other than its acquire (which names the owner): its checkpoints.
        if (params.get("Key", {}).get("Pk") == {"S": f"CONN#{conn}"} and len(dropped) < 2
                and "#owner = :me" not in params.get("UpdateExpression", "")):
            dropped.append(params["UpdateExpression"])
            raise EndpointConnectionError(endpoint_url="http://dropped-request")

    async with running_worker(fleet, handler) as run:
        run.worker.ddb.meta.events.register("provide-client-params.dynamodb.UpdateItem",
                                            drop_two_checkpoints)
        fleet.nudge(conn)
        await async_wait_until(lambda: seen, 10, "first message")
    first_seq, stored = seen[0]
    assert len(dropped) == 2 and first_seq is not None and stored == first_seq - 1


async def test_a_first_checkpoint_refused_every_time_gives_the_stream_up(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every try of the first checkpoint fails while the session stays healthy (the item's
    own fault): after ANCHOR_TRIES the stream is given up with that reason, nothing handled,
    instead of tried every 0.2 s for ever."""
    monkeypatch.setattr(handling, "ANCHOR_TRIES", 3)
    conn = f"{unique_id}-first-refused"
    fleet.create(conn, upstream.url(conn))
    seen, handler = first_call_and_checkpoint(fleet, conn)

    def refuse_first_checkpoints(params: dict[str, Any], **_: Any) -> None:
        if (params.get("Key", {}).get("Pk") == {"S": f"CONN#{conn}"}
                and params.get("UpdateExpression", "").startswith("SET #upd = :set_upd, #seq")):
            raise EndpointConnectionError(endpoint_url="http://dropped-request")

    async with running_worker(fleet, handler) as run:
        run.worker.ddb.meta.events.register("provide-client-params.dynamodb.UpdateItem",
                                            refuse_first_checkpoints)
        fleet.nudge(conn)
        await async_wait_until(lambda: "first checkpoint could not be stored" in str(
            fleet.item(conn).get("last_error")), 10, "given up")
    assert not seen


async def test_a_stop_while_the_start_opens_the_order_queue_ends_the_session(
        fleet: Fleet) -> None:
    """SIGTERM after the session was written and kept alive, while the start still opens its
    order queue (seconds on a loaded machine): the session is ended and no longer beaten.
    It was left ALIVE and heartbeating, to be declared dead (a page for a clean stop)."""
    worker = Supervisor(worker_config(fleet, HOLDFAST_ORDERS_QUEUE_PREFIX="hfstop-orders-"),
                        ddb=fleet.ddb, sqs=client_for(fleet.aws, "sqs"), handler=Recorder())
    assert worker.inbox is not None

    async def slow_open(owner: str) -> bool:
        await asyncio.sleep(30)  # a loaded machine's first SQS call
        return True

    worker.inbox.open = slow_open  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop.wait))
    await async_wait_until(lambda: worker.keeper is not None, 5, "the session written")
    stop.set()
    await asyncio.wait_for(task, 5)
    assert worker.keeper is not None
    raw = fleet.ddb.get_item(TableName=fleet.session_table,
                             Key={SESSION.pk: {"S": session_pk_for(worker.worker_id)}},
                             ConsistentRead=True)["Item"]
    assert raw[SESSION.state]["S"] != "ALIVE" and SESSION.ended_at_ms in raw, raw


async def test_the_stop_keeps_the_end_of_its_budget_for_the_goodbye(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting for our last polls (which a 20 s long poll can fill) ends goodbye_s() before the
    budget does, so the session's end is written inside it: it was given the whole rest of the
    budget, and a 1,000-stream stop exited 0.9 s past it."""
    waits: list[float] = []  # when the polls' wait would end, seconds after the stop began
    real = Claimer.finish_polls
    stop_began = 0.0

    async def recording(self: Claimer, timeout_s: float) -> int:
        waits.append(time.monotonic() - stop_began + timeout_s)
        return await real(self, timeout_s)

    monkeypatch.setattr(Claimer, "finish_polls", recording)
    budget = 4.0
    async with running_worker(fleet, Recorder(), HOLDFAST_SHUTDOWN_SECONDS=str(budget),
                              HOLDFAST_POLL_DRAIN_SECONDS=str(budget)) as run:
        conn = f"{unique_id}-bye"
        fleet.create(conn, upstream.url(conn))
        fleet.nudge(conn)
        await async_wait_until(lambda: conn in run.worker.streams, 10, "held")
        stop_began = time.monotonic()
    # goodbye_s(4 s) is 0.4 s: the wait ends that much before the budget, less the moment the
    # stop takes to begin (0.2 s allowed for a loaded machine).
    assert len(waits) == 1 and waits[0] <= budget - 0.2, waits


async def test_a_worker_that_cannot_start_a_new_session_stops_itself(
        fleet: Fleet, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Its session table deleted: the session fences, its restart fails (ConfigError, said at
    ERROR) until the restart's time is up, and the worker then stops by itself through its
    graceful stop, counting ``session_not_restarted`` (a worker with no session claims
    nothing: left running, it would be a silent zombie)."""
    table = f"{fleet.table}-own-sessions"
    fleet.ddb.create_table(**session_table_definition(table))
    async with running_worker(fleet, Recorder(), HOLDFAST_SESSION_TABLE=table) as run:
        await async_wait_until(lambda: run.worker.owner is not None, 10, "a session")
        run.worker.restart_for_ms = 500  # a try or two (the restart's own clock, ``mono``)
        fleet.ddb.delete_table(TableName=table)
        counts = await asyncio.wait_for(asyncio.shield(run.task), 20)
    assert counts["sessions_lost"] == 1 and counts["session_not_restarted"] == 1
    assert run.worker.owner is None
    tries = [r for r in caplog.records if r.getMessage().startswith("cannot start a new session")]
    assert tries and tries[-1].getMessage() == "cannot start a new session: giving up"
    assert all(r.levelname == "ERROR" and "ConfigError" in getattr(r, "error", "")
               for r in tries)
    assert [r for r in caplog.records if r.getMessage() == "worker stopped"]


async def test_a_stop_while_the_session_cannot_start_is_honoured(fleet: Fleet) -> None:
    """SIGTERM while DynamoDB is unreachable at the start (the session start retries for as
    long as it takes): the worker stops at once, without a session; the signal was ignored
    until DynamoDB answered (the platform then kills the task, maybe as its session began)."""
    host, port = fleet.env["AWS_ENDPOINT_URL_DYNAMODB"].rsplit("/", 1)[-1].split(":")
    proxy = CuttableProxy(host, int(port))
    try:
        proxy.cut()
        ddb = new_session().client(
            "dynamodb", endpoint_url=proxy.url, region_name="us-east-1",
            aws_access_key_id="local", aws_secret_access_key="local",
            config=client_config(read_timeout=0.5, retries=1))
        worker = Supervisor(worker_config(fleet), ddb=ddb, sqs=client_for(fleet.aws, "sqs"),
                            handler=Recorder())
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop.wait))
        await asyncio.sleep(0.5)  # the start is retrying meanwhile
        assert not task.done() and worker.keeper is None
        stop.set()
        counts = await asyncio.wait_for(task, 3)
        assert worker.keeper is None and not counts.get("left_running")
    finally:
        proxy.close()
