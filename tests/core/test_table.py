"""Integration tests of the orphan query and operator writes."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.exceptions import MalformedItem
from holdfast.core.store import LeaseStore
from holdfast.core.table import (
    Orphan,
    create_stream,
    delete_stream,
    find_orphans,
    scan_items,
    set_desired_state,
    swap_desired_state,
)
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock, put_raw


@pytest.fixture
def ddb(any_aws: LocalAws) -> Any:
    return client_for(any_aws, "dynamodb")


def orphan_ids(ddb: Any, table: str, now: int, prefix: str, page_size: int = 200) -> set[str]:
    return {o.conn_id for o in find_orphans(ddb, table, now_ms=now, skew_ms=SKEW_MS,
                                            page_size=page_size)
            if isinstance(o, Orphan) and o.conn_id.startswith(prefix)}


def test_orphans_are_expired_released_or_never_claimed(any_aws: LocalAws, ddb: Any,
                                                       unique_id: str) -> None:
    """Expired and released leases are orphans; live, stopped and backing-off ones are not."""
    clock = Clock()
    store = LeaseStore(ddb, any_aws.table, lease_ms=LEASE_MS, skew_ms=SKEW_MS, clock=clock)
    for name in ["live", "crashed", "released", "stopped", "fresh"]:
        create_stream(ddb, any_aws.table, f"{unique_id}-{name}", "ws://127.0.0.1:9/s/x")
    clock.now -= 60_000
    store.acquire(f"{unique_id}-crashed", "dead-worker")
    clock.now += 60_000
    store.acquire(f"{unique_id}-live", "w1")
    store.release(store.acquire(f"{unique_id}-released", "w1"))
    set_desired_state(ddb, any_aws.table, f"{unique_id}-stopped", "STOPPED")
    put_raw(ddb, any_aws.table, f"{unique_id}-backoff",
            lease_expires_at_ms={"N": str(clock.now + 30_000)})
    assert orphan_ids(ddb, any_aws.table, clock.now, unique_id) == {
        f"{unique_id}-crashed", f"{unique_id}-released", f"{unique_id}-fresh"}


def test_item_without_expiry_is_found_once_normalised(any_aws: LocalAws, ddb: Any,
                                                      unique_id: str) -> None:
    """A hand-inserted item is invisible to the index until normalise gives it expiry 0."""
    store = LeaseStore(ddb, any_aws.table, lease_ms=LEASE_MS, skew_ms=SKEW_MS)
    put_raw(ddb, any_aws.table, unique_id)
    now = store.clock()
    assert unique_id not in orphan_ids(ddb, any_aws.table, now, unique_id)
    store.normalise(unique_id)
    assert unique_id in orphan_ids(ddb, any_aws.table, now, unique_id)


def test_orphan_query_paginates(any_aws: LocalAws, ddb: Any, unique_id: str) -> None:
    """Orphans spread over many pages are all returned."""
    for i in range(23):
        create_stream(ddb, any_aws.table, f"{unique_id}-{i}", "ws://127.0.0.1:9/s/x")
    found = orphan_ids(ddb, any_aws.table, Clock().now, unique_id, page_size=5)
    assert len(found) == 23


def test_stop_start_delete_and_scan(any_aws: LocalAws, ddb: Any, unique_id: str) -> None:
    """Operator writes report unknown ids; scan returns malformed items as values."""
    assert not set_desired_state(ddb, any_aws.table, unique_id, "STOPPED")
    assert not delete_stream(ddb, any_aws.table, unique_id)
    put_raw(ddb, any_aws.table, unique_id)
    put_raw(ddb, any_aws.table, f"{unique_id}-bad", desired_state={"S": "MAYBE"})
    assert set_desired_state(ddb, any_aws.table, unique_id, "STOPPED")
    # The state it replaced: what an operator command says it changed.
    assert swap_desired_state(ddb, any_aws.table, unique_id, "STOPPED") == "STOPPED"
    assert swap_desired_state(ddb, any_aws.table, unique_id, "STARTED") == "STOPPED"
    assert swap_desired_state(ddb, any_aws.table, f"{unique_id}-none", "STARTED") is None
    with pytest.raises(ValueError):
        set_desired_state(ddb, any_aws.table, unique_id, "PAUSED")
    seen = [x for x in scan_items(ddb, any_aws.table)
            if (isinstance(x, MalformedItem) and unique_id in x.key)
            or (not isinstance(x, MalformedItem) and x.conn_id.startswith(unique_id))]
    assert len(seen) == 2
    assert any(isinstance(x, MalformedItem) for x in seen)
    assert delete_stream(ddb, any_aws.table, unique_id)


def test_a_held_stream_is_not_deleted_unless_asked(any_aws: LocalAws, ddb: Any,
                                                   unique_id: str) -> None:
    """Deleting a held stream is refused (it would free it under its holder, and a stream
    created again under the id could get a second deliverer); ``held_too`` deletes it."""
    from holdfast.core.exceptions import StreamHeld
    from holdfast.core.store import LeaseStore

    put_raw(ddb, any_aws.table, unique_id)
    LeaseStore(ddb, any_aws.table, lease_ms=60_000, skew_ms=1_000).acquire(unique_id, "w#a")
    with pytest.raises(StreamHeld) as held:
        delete_stream(ddb, any_aws.table, unique_id)
    assert held.value.owner == "w#a"
    assert delete_stream(ddb, any_aws.table, unique_id, held_too=True)
