"""Only the holder ends its holding, and no stream is stranded (issue 18, findings 1 and 2).

On DynamoDB Local with the demo upstream: an acquire that lands after the session was lost is
released at once (``worker.holdings``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from holdfast.core.model import Lease
from holdfast.core.schema import BACKSTOP_MS
from holdfast.core.store import LeaseStore
from tests.conftest import client_for
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until, worker_config
from tests.worker.helpers import Recorder
from worker.claimer import Claim
from worker.holdings import Holdings
from worker.protocol import QueryParamProtocol
from worker.supervisor import Supervisor


class SessionLostDuringAcquire(LeaseStore):
    """The real store, whose acquire lands just as the worker's session is lost: the owner
    the worker acquires as changes (a new incarnation) while the write is in flight."""

    def __init__(self, *args: Any, session: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session = session

    def acquire(self, conn_id: str, owner: str) -> Lease:
        lease = super().acquire(conn_id, owner)
        self.session["owner"] = f"{owner.partition('#')[0]}#newincarnation"
        return lease


async def test_an_acquire_that_lands_after_the_session_was_lost_is_released(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The stream acquired under the lost session's owner is released (unowned), never
    delivered and never left owned by the old incarnation (finding 2)."""
    conn = f"{unique_id}-lost"
    fleet.create(conn, upstream.url(conn))
    config = worker_config(fleet)
    ddb = client_for(fleet.aws, "dynamodb")
    sup = Supervisor(config, ddb=ddb, sqs=client_for(fleet.aws, "sqs"), handler=Recorder())
    old_owner = f"{config.worker_id}#oldincarnation"
    session = {"owner": old_owner}
    store = SessionLostDuringAcquire(ddb, config.table, lease_ms=BACKSTOP_MS,
                                     skew_ms=config.timing.skew_ms, session=session)
    rec = Recorder()
    holdings = Holdings(
        config, store, sup.checkpointer, handler=rec, protocol=QueryParamProtocol(),
        streams={}, owner=lambda: session["owner"], stopping=lambda: False,
        session_fence=lambda: sup.mono() + 60_000, wall=sup.wall, mono=sup.mono,
        metrics=sup.metrics, counts=Counter(), balancing=sup.balancing)

    assert await holdings.claim(conn) is Claim.CLAIMED
    await async_wait_until(lambda: not holdings.streams, 5, "the stream handed back")
    await asyncio.gather(*holdings.tasks)
    item = fleet.item(conn)
    assert "lease_owner" not in item, item.get("lease_owner")
    assert item["lease_expires_at_ms"]["N"] == "0"  # claimable at once by a live session
    assert not rec.calls  # never delivered under the lost session
    assert holdings.counts["released"] == 1
