"""A holding's last writes are gathered into batch calls while earlier ones are in flight: a
burst of releases costs a few calls, a lone one goes at once, a cancelled caller's release is
still written, and a call that raises answers every caller."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import pytest

from holdfast.core.batch_endings import ReleaseRequest, ReleaseResult, release_many
from holdfast.core.exceptions import HoldfastError, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from holdfast.worker.gathered import CALLS_IN_FLIGHT, Gathered
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


def releases(store: LeaseStore, **kw: Any) -> Gathered[ReleaseRequest, ReleaseResult]:
    """The worker's gathered releases (``worker.endings``)."""
    return Gathered(functools.partial(release_many, store),
                    lambda q, error: ReleaseResult(q.lease.conn_id, error=error), **kw)


def _owner(ddb: Any, store: LeaseStore, conn_id: str) -> str | None:
    raw = ddb.get_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                       ConsistentRead=True)["Item"]
    return raw.get(ATTR.lease_owner, {}).get("S")


def test_a_burst_of_releases_takes_a_few_batch_calls(
        held: tuple[Any, LeaseStore, list[str], list[Lease]]) -> None:
    """60 releases at once: every one written, in at most the calls in flight plus 60/25."""
    ddb, store, calls, leases = held
    gathered = releases(store)

    async def run() -> list[Any]:
        return await asyncio.gather(*(gathered.write(ReleaseRequest(lease, 5))
                                      for lease in leases))

    assert [(a.lost, a.error) for a in asyncio.run(run())] == [(None, None)] * 60
    assert len(calls) <= CALLS_IN_FLIGHT + 3, calls
    assert calls.count("BatchExecuteStatement") >= 2
    assert [_owner(ddb, store, lease.conn_id) for lease in leases] == [None] * 60


def test_a_lone_release_is_one_update_sent_at_once(
        held: tuple[Any, LeaseStore, list[str], list[Lease]]) -> None:
    """Nothing else in flight: one UpdateItem, no waiting for company."""
    ddb, store, calls, leases = held
    answer = asyncio.run(releases(store).write(ReleaseRequest(leases[0])))
    assert (answer.lost, answer.error) == (None, None)
    assert calls == ["UpdateItem"]
    assert _owner(ddb, store, "c0") is None


def test_a_cancelled_callers_release_is_still_written(
        held: tuple[Any, LeaseStore, list[str], list[Lease]]) -> None:
    """The stop's deadline cancels the waiting stream, not its release: no lease left to expire."""
    ddb, store, _, leases = held
    gathered = releases(store, calls_in_flight=1)

    async def run() -> None:
        waiting = [asyncio.ensure_future(gathered.write(ReleaseRequest(lease)))
                   for lease in leases[:30]]
        await asyncio.sleep(0)  # all queued behind the first call
        for task in waiting[1:]:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        await gathered.settled()  # the calls go on without their callers

    asyncio.run(run())
    assert [_owner(ddb, store, lease.conn_id) for lease in leases[:30]] == [None] * 30
    assert _owner(ddb, store, "c30") == "w1"


def test_a_call_that_raises_answers_every_caller_with_its_error() -> None:
    """A batch call's fault (ours or the store's) is each request's error: nobody waits for ever."""
    def broken(requests: Any) -> list[str]:
        raise (StoreUnavailable("x", "down") if len(requests) > 1 else KeyError("bug"))

    gathered: Gathered[int, Any] = Gathered(broken, lambda q, error: error, calls_in_flight=1)

    async def run() -> list[Any]:
        return await asyncio.gather(*(gathered.write(i) for i in range(3)))

    # Bounded: without the answers on failure the callers would wait for ever.
    first, *rest = asyncio.run(asyncio.wait_for(run(), 10))
    assert isinstance(first, HoldfastError) and "KeyError" in str(first)
    assert [type(e) for e in rest] == [StoreUnavailable, StoreUnavailable]


def test_widening_sends_what_waits_at_once() -> None:
    """With one call allowed, the others wait for it; widened (the worker stops claiming),
    they are sent at once, each its own call beside the first."""
    started: list[list[int]] = []
    release = threading.Event()

    def slow(requests: Any) -> list[int]:
        started.append(list(requests))
        release.wait(10)
        return list(requests)

    gathered: Gathered[int, int] = Gathered(slow, lambda q, error: -1, mode="single",
                                            calls_in_flight=1)
    gathered.calls_in_flight = 1  # "single" allows the IO pool's threads: one, for this test

    async def run() -> list[int]:
        writes = [asyncio.ensure_future(gathered.write(i)) for i in range(3)]
        await asyncio.sleep(0.2)
        assert started == [[0]]  # the others wait for the one call allowed
        gathered.widen(3)
        for _ in range(100):
            if len(started) == 3:
                break
            await asyncio.sleep(0.01)
        assert sorted(started) == [[0], [1], [2]]
        release.set()
        return list(await asyncio.gather(*writes))

    assert asyncio.run(asyncio.wait_for(run(), 10)) == [0, 1, 2]
