"""The worker's releases are gathered into batch calls while earlier ones are in flight: a
burst costs a few calls, a lone one goes at once, a cancelled caller's release is still written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from holdfast.core.batch_release import ReleaseRequest
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from holdfast.worker.releases import CALLS_IN_FLIGHT, Releases
from tests.conftest import client_for, own_tables
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock

URL = "ws://127.0.0.1:9/s"


@pytest.fixture
def held(ddb_local: LocalAws) -> tuple[Any, LeaseStore, list[str], list[Lease]]:
    """60 streams held by w1, and the DynamoDB operations the client makes from then on."""
    ddb = client_for(ddb_local, "dynamodb")
    store = LeaseStore(ddb, own_tables(ddb_local)[0], lease_ms=LEASE_MS, skew_ms=SKEW_MS,
                       clock=Clock())
    leases = []
    for i in range(60):
        assert create_stream(ddb, store.table, f"c{i}", URL)
        leases.append(store.acquire(f"c{i}", "w1"))
    calls: list[str] = []
    ddb.meta.events.register("before-call.dynamodb.*",
                             lambda model, **_: calls.append(model.name))
    return ddb, store, calls, leases


def _owner(ddb: Any, store: LeaseStore, conn_id: str) -> str | None:
    raw = ddb.get_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                       ConsistentRead=True)["Item"]
    return raw.get(ATTR.lease_owner, {}).get("S")


def test_a_burst_of_releases_takes_a_few_batch_calls(
        held: tuple[Any, LeaseStore, list[str], list[Lease]]) -> None:
    """60 releases at once: every one written, in at most the calls in flight plus 60/25."""
    ddb, store, calls, leases = held
    releases = Releases(store, "batch")

    async def run() -> list[Any]:
        return await asyncio.gather(*(releases.release(ReleaseRequest(lease, 5))
                                      for lease in leases))

    assert asyncio.run(run()) == [None] * 60
    assert len(calls) <= CALLS_IN_FLIGHT + 3, calls
    assert calls.count("BatchExecuteStatement") >= 2
    assert [_owner(ddb, store, lease.conn_id) for lease in leases] == [None] * 60


def test_a_lone_release_is_one_update_sent_at_once(
        held: tuple[Any, LeaseStore, list[str], list[Lease]]) -> None:
    """Nothing else in flight: one UpdateItem, no waiting for company."""
    ddb, store, calls, leases = held
    assert asyncio.run(Releases(store, "batch").release(ReleaseRequest(leases[0]))) is None
    assert calls == ["UpdateItem"]
    assert _owner(ddb, store, "c0") is None


def test_a_cancelled_callers_release_is_still_written(
        held: tuple[Any, LeaseStore, list[str], list[Lease]]) -> None:
    """The stop's deadline cancels the waiting stream, not its release: no lease left to expire."""
    ddb, store, _, leases = held
    releases = Releases(store, "batch", calls_in_flight=1)

    async def run() -> None:
        waiting = [asyncio.ensure_future(releases.release(ReleaseRequest(lease)))
                   for lease in leases[:30]]
        await asyncio.sleep(0)  # all queued behind the first call
        for task in waiting[1:]:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        while releases._calls:  # the calls go on without their callers
            await asyncio.wait(list(releases._calls))

    asyncio.run(run())
    assert [_owner(ddb, store, lease.conn_id) for lease in leases[:30]] == [None] * 30
    assert _owner(ddb, store, "c30") == "w1"
