"""bench.capacity on DynamoDB Local: every operation measured, on tables of its own."""

from __future__ import annotations

from typing import Any

from bench.capacity import measure, roles_of
from bench.hotkeys import DOCUMENTED, units_from_capacity
from holdfast.core.schema import (
    GSI_NAME,
    OWNER_INDEX_NAME,
    session_table_definition,
    table_definition,
)


def test_roles_of_names_tables_and_indexes() -> None:
    """Units land on lease_table / seed_index / owner_index / session_table; others keep names."""
    consumed = [{"TableName": "L", "Table": {"CapacityUnits": 1.0},
                 "GlobalSecondaryIndexes": {GSI_NAME: {"CapacityUnits": 2.0},
                                            OWNER_INDEX_NAME: {"CapacityUnits": 1.0}}},
                {"TableName": "S", "CapacityUnits": 1.0}, {"TableName": "X", "CapacityUnits": 3}]
    assert roles_of(consumed, "L", "S") == {"lease_table": 1.0, "seed_index": 2.0,
                                            "owner_index": 1.0, "session_table": 1.0,
                                            "X/table": 3.0}


def test_measure_every_operation(ddb: Any, unique_id: str) -> None:
    """Each write is uniform over its 25 items, PartiQL batches apply (and report nothing, so
    they take their UpdateItem's units), and the figures are AWS's documented ones."""
    lease, session = f"{unique_id}-leases", f"{unique_id}-sessions"
    ddb.create_table(**table_definition(lease))
    ddb.create_table(**session_table_definition(session))
    try:
        result = measure(ddb, lease, session)
    finally:
        ddb.delete_table(TableName=lease)
        ddb.delete_table(TableName=session)
    ops = result["ops"]
    assert all(op["uniform"] for op in ops.values() if op["kind"] == "write")
    assert ops["checkpoint"]["units"] == {"lease_table": 1.0}
    assert ops["backstop_refresh"]["units"] == {"lease_table": 1.0, "seed_index": 2.0}
    assert ops["acquire"]["total"] == ops["release"]["total"] == 4.0
    assert ops["session_heartbeat"]["units"] == {"session_table": 1.0}
    assert ops["checkpoint_batch"]["items"] == 25
    if not result["partiql_reports_capacity"]:
        assert "UpdateItem equivalent" in ops["checkpoint_batch"]["source"]
    assert ops["sweeper_scan"]["items"] == 1000 and ops["owner_query"]["items"] == 100
    assert units_from_capacity(result) == DOCUMENTED
