"""bench.capacity and its client meter on DynamoDB Local: the real code's calls, metered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench.capacity import measure
from bench.client_meter import ClientMeter
from bench.hotkeys import DOCUMENTED, units_from_capacity
from holdfast.core.exceptions import AcquireFailed
from holdfast.core.schema import owner_for, session_table_definition, table_definition
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream


@pytest.fixture
def tables(ddb: Any, unique_id: str) -> Iterator[tuple[str, str]]:
    """A lease table and a session table of this test's own."""
    lease, session = f"{unique_id}-leases", f"{unique_id}-sessions"
    ddb.create_table(**table_definition(lease))
    ddb.create_table(**session_table_definition(session))
    yield lease, session
    ddb.delete_table(TableName=lease)
    ddb.delete_table(TableName=session)


def test_meter_books_the_units_of_a_real_acquire(ddb: Any, tables: tuple[str, str]) -> None:
    """The hooks ask for INDEXES on the real LeaseStore.acquire's calls and book what comes
    back per table and index; a refused acquire is listed as unreported, and calls outside a
    measure() block are not booked."""
    lease, session = tables
    meter = ClientMeter(ddb, lease, session)
    create_stream(ddb, lease, "c1", "wss://upstream.example.com/c1")
    store = LeaseStore(ddb, lease, lease_ms=60_000, skew_ms=1000)
    with meter.measure() as got:
        store.acquire("c1", owner_for("w1", "i1"))
    assert "UpdateItem" in got.calls
    # A claim writes the item, moves the seed index entry (2) and puts an owner index entry.
    assert got.of("write") == {"lease_table": 1.0, "seed_index": 2.0, "owner_index": 1.0}
    with meter.measure() as refused, pytest.raises(AcquireFailed):
        store.acquire("c1", owner_for("w2", "i1"))
    assert "UpdateItem" in refused.unreported and not refused.of("write")
    booked = list(got.calls)
    store.get("c1")  # after the block: booked nowhere
    assert got.calls == booked


def test_measure_every_operation(ddb: Any, tables: tuple[str, str]) -> None:
    """Each write of the real code is uniform over its 25 items, the batch renewals apply (and
    take their UpdateItem form's units when DynamoDB Local reports none), and the figures are
    AWS's documented ones."""
    result = measure(ddb, *tables)
    ops = result["ops"]
    assert all(op["uniform"] for op in ops.values() if op["kind"] == "write" and op["items"]
               and op["per"] == "item")
    assert ops["checkpoint"]["units"] == {"lease_table": 1.0}
    assert ops["backstop_refresh"]["units"] == {"lease_table": 1.0, "seed_index": 2.0}
    assert ops["acquire"]["total"] == ops["release"]["total"] == 4.0
    assert ops["release_dead"]["total"] == 4.0
    assert ops["session_heartbeat"]["units"] == {"session_table": 1.0}
    assert ops["seed_heartbeat"]["units"] == {"lease_table": 1.0, "seed_index": 2.0}
    assert ops["seed_release"]["units"] == {"lease_table": 1.0, "seed_index": 2.0}
    assert ops["checkpoint_batch"]["items"] == 25
    assert ops["checkpoint_batch"]["form"] == "BatchExecuteStatement"
    if not result["partiql_reports_capacity"]:
        assert "UpdateItem equivalent" in ops["checkpoint_batch"]["source"]
    assert ops["sweeper_scan"]["items"] == 1000 and ops["owner_query"]["items"] == 100
    assert ops["reap"]["items"] == 100 and ops["reap"]["units"]["owner_index"] == 100.0
    assert units_from_capacity(result) == DOCUMENTED
