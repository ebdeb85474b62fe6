"""Bad input stays local: one lease that DynamoDB refuses as invalid fails alone."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.batch import RenewRefused, RenewRequest, renew_many
from holdfast.core.store import LeaseStore
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.test_batch import held
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock

LIMIT = 400 * 1024  # DynamoDB's item size limit


def fill_to_the_limit(ddb: Any, table: str, conn_id: str) -> None:
    """Pad the item until one more byte would not fit (bisection on a filler attribute)."""
    lo, hi = 0, LIMIT
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            ddb.update_item(TableName=table, Key={"Pk": {"S": f"CONN#{conn_id}"}},
                            UpdateExpression="SET #f = :f",
                            ExpressionAttributeNames={"#f": "filler"},
                            ExpressionAttributeValues={":f": {"S": "x" * mid}})
            lo = mid
        except ddb.exceptions.ClientError as exc:
            assert exc.response["Error"]["Code"] == "ValidationException"
            hi = mid - 1
    assert lo > LIMIT - 1024


@pytest.mark.parametrize("mode", ["batch", "single"])
def test_an_item_at_the_size_limit_fails_alone(ddb_local: LocalAws, unique_id: str,
                                               mode: str) -> None:
    """25 renewals, one of an item at 400 KB (its new last_seq does not fit): 24 renewed,
    the bad one gets RenewRefused, and nothing is raised for the batch."""
    ddb, clock = client_for(ddb_local, "dynamodb"), Clock()
    store = LeaseStore(ddb, ddb_local.table, lease_ms=LEASE_MS, skew_ms=SKEW_MS, clock=clock)
    ids, leases = held(store, ddb, unique_id, 25)
    fill_to_the_limit(ddb, store.table, ids[7])
    clock.now += 2_000
    results = renew_many(store, [RenewRequest(lease, 123_456_789) for lease in leases],
                         "batch" if mode == "batch" else "single")
    assert [r.conn_id for r in results] == ids
    bad = results[7]
    assert bad.lease is None and isinstance(bad.error, RenewRefused)
    assert "maximum allowed size" in str(bad.error) and ids[7] in str(bad.error)
    for cid, result in zip(ids, results, strict=True):
        if cid == ids[7]:
            continue
        assert result.error is None and result.lease is not None
        item = store.get(cid)
        assert item is not None and item.last_seq == 123_456_789
        assert item.lease_expires_at_ms == clock.now + LEASE_MS
    item = store.get(ids[7])
    assert item is not None and item.last_seq is None  # untouched, still ours
    assert item.lease_owner == leases[7].owner
