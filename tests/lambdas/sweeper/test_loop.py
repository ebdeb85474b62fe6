"""The sweep loop against DynamoDB Local and moto's SQS, on a table of each test's own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from holdfast.core.aws import InvalidRequest
from holdfast.core.boto import new_session
from holdfast.core.exceptions import StoreUnavailable
from holdfast.core.liveness import AUDIT_INTERVAL_MS
from holdfast.core.model import Lease
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.core.table import create_stream
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.dedup import NudgeMemory, RenudgePolicy
from holdfast.lambdas.sweeper.loop import SweepDeps, run_sweeps, sweep_once
from holdfast.lambdas.sweeper.results import SweepResult
from holdfast.lambdas.sweeper.unindexed import UnindexedPass
from holdfast.localaws import LocalAws
from tests.conftest import TIMEOUT_SCALE, own_tables
from tests.core.test_batch_invalid import fill_to_the_limit
from tests.lambdas.helpers import receive_nudges
from tests.lambdas.records import image

LEASE_MS = 1_500
SKEW_MS = 200


def settings_for(table: str, queue_url: str, **kw: Any) -> Settings:
    return Settings(table=table, queue_url=queue_url, skew_ms=SKEW_MS, **kw)


class Store(LeaseStore):
    """The real store, plus creating the item first (as an operator would)."""

    def take(self, conn_id: str, owner: str) -> Lease:
        create_stream(self.client, self.table, conn_id, "wss://feeds.example.test/1")
        return self.acquire(conn_id, owner)


@pytest.fixture
def store(ddb: Any, table: str) -> Store:
    return Store(ddb, table, lease_ms=LEASE_MS, skew_ms=SKEW_MS)


@pytest.fixture
def memory() -> NudgeMemory:
    return NudgeMemory(RenudgePolicy(first_ms=5_000, unclaimed_grace_ms=200))


class Sweeper:
    """``run_sweeps`` in a thread, stopped at the end of the test."""

    def __init__(self, deps: SweepDeps, memory: NudgeMemory) -> None:
        self.stop = threading.Event()
        deps.sleep = self.stop.wait  # wakes at once when the test ends
        self.thread = threading.Thread(target=run_sweeps, args=(deps, memory), kwargs={
            "should_stop": self.stop.is_set}, daemon=True)

    def __enter__(self) -> Sweeper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def sweeper(ddb: Any, sqs: Any, table: str, queue_url: str,
            memory: NudgeMemory) -> Iterator[Sweeper]:
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url))
    with Sweeper(deps, memory) as s:
        yield s


def test_a_stream_whose_owner_has_no_session_is_released_then_nudged(
        ddb_local: LocalAws, ddb: Any, sqs: Any, table: str, queue_url: str, store: Store,
        memory: NudgeMemory, unique_id: str) -> None:
    """A stream owned by an owner no session item names (the seed's, a hand-written one, a
    deleted session) is not taken by its expiry: the owner audit releases it once it has been
    so for TTL + skew, and the release is nudged (finding 2)."""
    lease = store.take(unique_id, "dead-worker")
    # A session table of its own: the shared one holds every session earlier tests left,
    # each declared dead by this sweep first (how the timeout test failed CI on 2026-12-07).
    _, session_table = own_tables(ddb_local)
    sessions = SessionStore(ddb, session_table, table, ttl_ms=LEASE_MS, skew_ms=SKEW_MS)
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, session_table=session_table),
                     sessions=sessions)
    deadline = wall_clock_ms() + (LEASE_MS + SKEW_MS + AUDIT_INTERVAL_MS + 3_000) * TIMEOUT_SCALE
    with Sweeper(deps, memory):
        while (item := store.get(unique_id)) is not None and item.lease_owner is not None:
            assert wall_clock_ms() < deadline, "never released"
            time.sleep(0.05)
        released = wall_clock_ms()
        got = receive_nudges(sqs, queue_url, expect=2, timeout_s=3)
    # Held by "dead-worker" for at least TTL + skew after the audit first saw it.
    assert released - (lease.expires_at_ms - LEASE_MS) >= LEASE_MS + SKEW_MS
    assert {"conn_id": unique_id, "reason": "unclaimed", "epoch": None} in got
    assert store.acquire(unique_id, "new-worker#b").epoch > lease.epoch


def test_released_lease_is_nudged(store: Store, sweeper: Sweeper, sqs: Any,
                                  queue_url: str, unique_id: str) -> None:
    """A released lease whose router nudge was lost is nudged after the grace period."""
    store.release(store.take(unique_id, "w1"))
    assert receive_nudges(sqs, queue_url, expect=1) == [
        {"conn_id": unique_id, "reason": "unclaimed", "epoch": None}]


def test_never_claimed_lease_is_nudged(ddb: Any, table: str, sweeper: Sweeper, sqs: Any,
                                       queue_url: str, unique_id: str) -> None:
    """A STARTED item nobody ever claimed is nudged."""
    assert create_stream(ddb, table, unique_id, "wss://feeds.example.test/1")
    assert receive_nudges(sqs, queue_url, expect=1) == [
        {"conn_id": unique_id, "reason": "unclaimed", "epoch": None}]


def test_item_without_expiry_needs_normalising(ddb: Any, sqs: Any, table: str, queue_url: str,
                                               store: Store, memory: NudgeMemory,
                                               unique_id: str) -> None:
    """The index cannot see an item without expiry until the router normalises it."""
    ddb.put_item(TableName=table, Item=image(unique_id))
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, unindexed_scan_ms=0))
    assert sweep_once(deps, memory).due == []
    assert store.normalise(unique_id)
    assert [o.conn_id for o in sweep_once(deps, memory).due] == [unique_id]


def test_item_whose_router_record_was_lost_is_found_by_the_slow_pass(
        ddb: Any, sqs: Any, table: str, queue_url: str, memory: NudgeMemory,
        unique_id: str) -> None:
    """A STARTED item without expiry is normalised by the sweeper's pass, then nudged."""
    ddb.put_item(TableName=table, Item=image(unique_id))
    ddb.put_item(TableName=table, Item=image(f"{unique_id}-stopped", state="STOPPED"))
    now = [wall_clock_ms()]
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, unindexed_scan_ms=60_000),
                     clock=lambda: now[0])
    first = sweep_once(deps, memory)
    assert first.normalised == 1
    item = ddb.get_item(TableName=table, Key={"Pk": {"S": f"CONN#{unique_id}"}})["Item"]
    assert item["lease_expires_at_ms"] == {"N": "0"}
    stopped = ddb.get_item(TableName=table, Key={"Pk": {"S": f"CONN#{unique_id}-stopped"}})
    assert "lease_expires_at_ms" not in stopped["Item"]
    # The pass comes after the sweep's orphans query: the next sweep sees it, and nudges it
    # once past the unclaimed grace (200 ms).
    assert not sweep_once(deps, memory).nudged
    now[0] += 300
    assert [n.conn_id for n in sweep_once(deps, memory).nudged] == [unique_id]
    assert sweep_once(deps, memory).normalised == 0  # the next pass waits out its period


def test_an_item_refused_by_the_slow_pass_is_logged_and_passed_over(
        ddb: Any, table: str, unique_id: str) -> None:
    """One unindexed item DynamoDB refuses to normalise (too big to take an expiry): the pass
    goes on with the others of its page and ends (raised, it failed that page on every sweep
    and hid every unindexed item after it); the refusal is counted (``ItemErrors``)."""
    bad, good = f"{unique_id}-big", f"{unique_id}-ok"
    for conn in (bad, good):
        ddb.put_item(TableName=table, Item=image(conn))
    seen: list[str] = []

    def normalise(conn_id: str) -> bool:
        seen.append(conn_id)
        if conn_id == bad:
            raise InvalidRequest("Item size has exceeded the maximum allowed size")
        return conn_id == good

    unindexed = UnindexedPass(period_ms=60_000)
    fixed = refused = 0
    while True:
        fixed += unindexed.step(ddb, table, wall_clock_ms(), normalise)
        refused += unindexed.refused
        if not unindexed.in_pass:
            break
    assert {bad, good} <= set(seen) and (fixed, refused) == (1, 1)


def test_an_item_too_big_to_normalise_is_counted_in_the_sweeps_item_errors(
        ddb: Any, sqs: Any, table: str, queue_url: str, memory: NudgeMemory,
        unique_id: str) -> None:
    """An unindexed item at DynamoDB's size limit (no room for an expiry): the sweep's
    result counts it in ``item_errors`` (the ``ItemErrors`` metric), as the router does."""
    ddb.put_item(TableName=table, Item=image(unique_id))
    fill_to_the_limit(ddb, table, unique_id)
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, unindexed_scan_ms=60_000))
    result = sweep_once(deps, memory)
    assert (result.normalised, result.item_errors) == (0, 1)


def test_an_index_entry_no_stream_could_have_is_counted_every_pass_and_logged_once(
        ddb: Any, sqs: Any, table: str, queue_url: str, memory: NudgeMemory,
        unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """A STARTED item whose key is no stream's (no ``CONN#``): in ``item_errors`` at each
    sweep, as it stays until fixed, but one error line naming it, not one a sweep (86,000 a
    day), and the real orphans beside it are still found."""
    ddb.put_item(TableName=table, Item={"Pk": {"S": f"OTHER#{unique_id}"},
                                        "desired_state": {"S": "STARTED"},
                                        "lease_expires_at_ms": {"N": "0"}})
    ddb.put_item(TableName=table, Item=image(f"{unique_id}-ok", expires=0))
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url))
    with caplog.at_level("ERROR"):
        results = [sweep_once(deps, memory) for _ in range(3)]
    assert [r.item_errors for r in results] == [1, 1, 1]
    assert [o.conn_id for o in results[0].due] == [f"{unique_id}-ok"]
    lines = [r for r in caplog.records if f"OTHER#{unique_id}" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]


def test_orphan_age_counts_released_and_never_claimed_items(
        ddb: Any, sqs: Any, table: str, queue_url: str, store: Store, memory: NudgeMemory,
        unique_id: str) -> None:
    """A released item nobody takes ages from its first sighting, so the orphan alarm sees it."""
    store.release(store.take(unique_id, "w1"))
    now = [wall_clock_ms()]
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url), clock=lambda: now[0])
    assert sweep_once(deps, memory).oldest_age_ms == 0
    now[0] += 40_000
    assert sweep_once(deps, memory).oldest_age_ms == 40_000


def test_orphan_is_not_renudged_while_claim_in_flight(store: Store, sweeper: Sweeper,
                                                      sqs: Any, queue_url: str,
                                                      unique_id: str) -> None:
    """Sweeping every second, a still-orphaned lease is nudged once per re-nudge window."""
    store.take(unique_id, "dead-worker")
    assert len(receive_nudges(sqs, queue_url, expect=1, timeout_s=5)) == 1
    assert receive_nudges(sqs, queue_url, expect=1, timeout_s=2.5) == []


def test_lost_nudge_is_sent_again(ddb: Any, sqs: Any, table: str, queue_url: str,
                                  store: Store, unique_id: str) -> None:
    """If the orphan outlives the re-nudge window (nudge lost), it is nudged again."""
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, sweep_interval_ms=100))
    memory = NudgeMemory(RenudgePolicy(first_ms=300, max_ms=300))
    store.release(store.take(unique_id, "w1"), error="upstream 503", retry_at_ms=1)
    with Sweeper(deps, memory):
        got = receive_nudges(sqs, queue_url, expect=3, timeout_s=5)
    assert [n["conn_id"] for n in got] == [unique_id] * 3


def test_failed_send_is_retried_next_sweep(ddb: Any, sqs: Any, dead_sqs: Any, table: str,
                                           queue_url: str, store: Store,
                                           memory: NudgeMemory, unique_id: str) -> None:
    """A nudge SQS refused is not remembered: the next sweep sends it."""
    store.release(store.take(unique_id, "w1"), error="boom", retry_at_ms=1)
    settings = settings_for(table, queue_url, send_attempts=1)
    failed = sweep_once(SweepDeps(ddb, dead_sqs, settings), memory)
    assert [n.conn_id for n, _ in failed.failed] == [unique_id]
    sent = sweep_once(SweepDeps(ddb, sqs, settings), memory)
    assert [n.conn_id for n in sent.nudged] == [unique_id]


class CountingDdb:
    def __init__(self, real: Any) -> None:
        self.real = real
        self.queries = 0

    def query(self, **kw: Any) -> Any:
        self.queries += 1
        return self.real.query(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)  # the slow unindexed pass's Scan, and the like


def test_one_query_per_sweep_when_nothing_expired(ddb: Any, sqs: Any, table: str,
                                                  queue_url: str, memory: NudgeMemory,
                                                  unique_id: str) -> None:
    """Live leases cost nothing to sweep: one GSI query per sweep, whatever their number."""
    live = LeaseStore(ddb, table, lease_ms=60_000, skew_ms=SKEW_MS)
    for i in range(30):
        create_stream(ddb, table, f"{unique_id}-{i}", "wss://feeds.example.test/")
        live.acquire(f"{unique_id}-{i}", "w1")
    counting = CountingDdb(ddb)
    deps = SweepDeps(counting, sqs, settings_for(table, queue_url))  # type: ignore[arg-type]
    for _ in range(5):
        result = sweep_once(deps, memory)
        assert result.due == [] and result.complete
    assert counting.queries == 5


def test_wakes_when_the_next_lease_becomes_claimable(ddb: Any, sqs: Any, table: str,
                                                     queue_url: str, store: Store,
                                                     memory: NudgeMemory,
                                                     unique_id: str) -> None:
    """A lease expiring before the next sweep is reported as the next due time."""
    lease = store.take(unique_id, "w1")
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, sweep_interval_ms=5_000))
    result = sweep_once(deps, memory)
    assert result.due == []
    assert result.next_due_ms == lease.expires_at_ms + SKEW_MS


def test_dynamodb_errors_are_survived(sqs: Any, queue_url: str, memory: NudgeMemory) -> None:
    """With DynamoDB unreachable the loop logs, backs off, and still stops when told."""

    from holdfast.core.aws import client_config
    from holdfast.localaws.processes import free_port

    dead = new_session().client(
        "dynamodb", endpoint_url=f"http://127.0.0.1:{free_port()}", region_name="us-east-1",
        aws_access_key_id="local", aws_secret_access_key="local",
        config=client_config(retries=1))
    waits: list[float] = []
    deps = SweepDeps(dead, sqs, Settings(table="t", queue_url=queue_url,
                                         sweep_interval_ms=1_000), sleep=waits.append)
    stats = run_sweeps(deps, memory, should_stop=lambda: len(waits) >= 5)
    assert stats.errors == 5 and stats.sweeps == 0
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_a_grace_ending_wakes_the_sweep_at_most_every_quarter_interval(
        ddb: Any, sqs: Any, table: str, queue_url: str, store: Store, memory: NudgeMemory,
        unique_id: str) -> None:
    """A released stream's grace end is a wake-up time, but never sooner than a quarter of the
    interval: a burst's due times every few ms must not make the sweep spin."""
    store.release(store.take(unique_id, "w1"))
    now = [wall_clock_ms()]
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url, sweep_interval_ms=2_000),
                     clock=lambda: now[0])
    first = sweep_once(deps, memory)  # first seen now: its grace (200 ms) ends soon
    assert first.next_due_ms is not None
    assert first.next_due_ms == now[0] + 500  # not now + 200: a quarter of 2 s


class ScanRefused(UnindexedPass):
    """The slow pass whose Scan DynamoDB refuses every time (throttled, or no permission)."""

    def step(self, ddb: Any, table: str, now_ms: int, normalise: Any) -> int:
        raise StoreUnavailable("Scan", "throttled")


def test_a_failing_step_before_the_orphans_query_does_not_stop_the_nudges(
        ddb: Any, sqs: Any, table: str, queue_url: str, store: Store, memory: NudgeMemory,
        unique_id: str) -> None:
    """The slow pass's Scan failing every sweep: the orphans are still nudged (the sweep
    raised, and no re-nudge went out while the Scan kept failing)."""
    result = _a_released_stream_swept_twice(ddb, sqs, table, queue_url, store, memory,
                                            unique_id, ScanRefused(60_000))
    assert [n.conn_id for n in result.nudged] == [unique_id]
    assert result.step_errors == 1  # counted with the sweep's errors (SweepErrors)


def _a_released_stream_swept_twice(ddb: Any, sqs: Any, table: str, queue_url: str,
                                   store: Store, memory: NudgeMemory, unique_id: str,
                                   unindexed: UnindexedPass) -> SweepResult:
    """``unique_id`` released, then two sweeps 300 ms apart (the first sees it, the second is
    past the unclaimed grace and nudges it), with ``unindexed`` as the slow pass."""
    store.release(store.take(unique_id, "w1"))
    now = [wall_clock_ms()]
    deps = SweepDeps(ddb, sqs, settings_for(table, queue_url), clock=lambda: now[0],
                     unindexed=unindexed)
    sweep_once(deps, memory)  # first sight: the unclaimed grace begins
    now[0] += 300
    return sweep_once(deps, memory)


def test_the_orphans_are_nudged_before_the_slow_steps_run(
        ddb: Any, sqs: Any, table: str, queue_url: str, store: Store, memory: NudgeMemory,
        unique_id: str) -> None:
    """The slow pass, the audit and the queue collection come after the nudges: on a
    throttled table each of their calls retries for seconds, and ahead of the nudges they
    held every re-nudge of a lost stream."""
    seen_by_the_slow_pass: list[list[dict[str, Any]]] = []

    class AfterTheNudges(UnindexedPass):
        def step(self, ddb: Any, table: str, now_ms: int, normalise: Any) -> int:
            seen_by_the_slow_pass.append(receive_nudges(sqs, queue_url, expect=1, timeout_s=1))
            return 0

    result = _a_released_stream_swept_twice(ddb, sqs, table, queue_url, store, memory,
                                            unique_id, AfterTheNudges(60_000))
    assert [n.conn_id for n in result.nudged] == [unique_id]
    assert seen_by_the_slow_pass[-1] == [
        {"conn_id": unique_id, "reason": "unclaimed", "epoch": None}]
