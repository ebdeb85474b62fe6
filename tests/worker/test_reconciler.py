"""The strays pass (``worker.reconciler.Strays``) on DynamoDB Local's owner index."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from holdfast.core.sessions import SessionStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from holdfast.worker.claims import Claim
from holdfast.worker.reconciler import STRAY_SCAN_S, Strays
from tests.worker.conftest import async_wait_until


async def test_the_pass_reads_the_held_set_once_for_all_owned_streams(
        ddb_local: LocalAws, ddb: Any, unique_id: str) -> None:
    """Each owned stream is checked against one read of the held set, not one read per
    stream (at 5,000 streams that was O(n^2) and blocked the loop past its fence); the held
    ones are not claimed, the others are."""
    owner = f"w-{unique_id}#inc"
    ids = [f"{unique_id}-{i}" for i in range(6)]
    for conn_id in ids:
        create_stream(ddb, ddb_local.table, conn_id, "wss://example.com/s")
        ddb.update_item(TableName=ddb_local.table, Key={"Pk": {"S": f"CONN#{conn_id}"}},
                        UpdateExpression="SET lease_owner = :o",
                        ExpressionAttributeValues={":o": {"S": owner}})
    sessions = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=8_000,
                            skew_ms=1_000)
    await async_wait_until(lambda: len(sessions.owned_by(owner)) == len(ids), 5,
                           "the owner index lists them")  # eventually consistent
    reads: list[int] = []
    claimed: list[str] = []

    def busy() -> set[str]:
        reads.append(1)
        return set(ids[:2])

    async def claim(conn_id: str, source: str) -> Claim:
        claimed.append(conn_id)
        return Claim.CLAIMED

    async def release(conn_id: str, owner: str) -> bool:
        return False

    strays = Strays(sessions, lambda: owner, claim, busy, release)
    assert await strays.once() == 4
    assert sorted(claimed) == sorted(ids[2:])
    assert len(reads) == 1


async def test_a_pass_due_while_the_table_throttles_is_skipped() -> None:
    """A safety net's pass (stray scan, reconcile sweep) due while DynamoDB refuses calls as
    throttled is skipped, never two in a row: a long throttle halves the passes."""
    slept: list[float] = []
    passes: list[int] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 6:
            raise asyncio.CancelledError

    class Counting(Strays):
        async def once(self) -> int:
            passes.append(len(slept))
            return 0

    async def never(*_: object) -> Any:
        raise AssertionError("no claim or release in this test")

    strays = Counting(sessions=None, owner=lambda: None, claim=never,  # type: ignore[arg-type]
                      busy=set, release=never, sleep=sleep, rand=lambda: 0.5,
                      throttled=lambda: len(slept) in (2, 3, 4, 5))
    with pytest.raises(asyncio.CancelledError):
        await strays.run()
    assert slept == [STRAY_SCAN_S] * 6 and passes == [1, 3, 5]
