"""Many items in few reads (``holdfast.core.batch_reads``), on DynamoDB Local."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from holdfast.core.batch_reads import GET_BATCH_LIMIT, read_raw_many
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.conftest import client_for, own_tables
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock


def _store(ddb_local: LocalAws) -> tuple[Any, LeaseStore]:
    ddb = client_for(ddb_local, "dynamodb")
    return ddb, LeaseStore(ddb, own_tables(ddb_local)[0], lease_ms=LEASE_MS, skew_ms=SKEW_MS,
                           clock=Clock())


def test_each_stream_is_read_or_known_absent_past_one_calls_limit(
        ddb_local: LocalAws) -> None:
    """More streams than one BatchGetItem takes: every item as stored, None for a stream
    with no item."""
    ddb, store = _store(ddb_local)
    ids = [f"r{i}" for i in range(GET_BATCH_LIMIT + 5)]
    for c in ids:
        assert create_stream(ddb, store.table, c, "ws://127.0.0.1:9/s")
    got = read_raw_many(store, [*ids, "nobody"])
    assert got["nobody"] is None
    assert all(got[c] is not None and got[c][ATTR.pk] == {"S": pk_for(c)}  # type: ignore[index]
               for c in ids)
    assert got[ids[0]] == store.get_raw(ids[0])


def test_a_failed_read_answers_not_read_never_absent(ddb_local: LocalAws) -> None:
    """The call fails: no stream in the answer (its caller reads again or goes alone)."""
    ddb, store = _store(ddb_local)
    assert create_stream(ddb, store.table, "f1", "ws://127.0.0.1:9/s")

    class Throttled:
        def batch_get_item(self, **_: Any) -> Any:
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                         "Message": "slow down"}}, "BatchGetItem")

    store.client = Throttled()  # type: ignore[assignment]
    assert read_raw_many(store, ["f1", "f2"]) == {}


def test_a_read_denied_by_iam_is_said_not_swallowed(
        ddb_local: LocalAws, caplog: pytest.LogCaptureFixture) -> None:
    """A role without dynamodb:BatchGetItem: nothing read, and an error line says so (its
    callers fall back to slower paths, which would otherwise go unnoticed)."""
    _, store = _store(ddb_local)

    class Denied:
        def batch_get_item(self, **_: Any) -> Any:
            raise ClientError({"Error": {"Code": "AccessDeniedException",
                                         "Message": "not authorized: dynamodb:BatchGetItem"}},
                              "BatchGetItem")

    store.client = Denied()  # type: ignore[assignment]
    assert read_raw_many(store, ["d1"]) == {}
    assert [r.levelname for r in caplog.records
            if "cannot be read in a batch" in r.getMessage()] == ["ERROR"]
