"""An app's PutItem of the whole item over a held stream, on a real local fleet: its holder takes
the holding back (``holdfast.core.overwrites``), so one worker delivers and nothing is lost."""

from __future__ import annotations

import pytest

from holdfast.core.table import inserted_item
from holdfast.testing import LocalFleet
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.slow


def test_an_apps_put_over_a_held_stream_keeps_one_deliverer_and_loses_nothing(
        holdfast_fleet: LocalFleet) -> None:
    """The app re-puts its stream's row (``Pk``, STARTED, ``ws_url``): the same holder keeps
    it under the same epoch, no other worker handles a seq of it, and no seq is skipped
    (before, another worker claimed it at once, or its holder lost its checkpoint)."""
    fleet = holdfast_fleet
    conn = fleet.start_stream()
    owner = fleet.wait_owned(conn)
    fleet.wait_new_seqs(conn, 10)
    wait_until(lambda: (item := fleet.item(conn)) is not None and item.last_seq, 10,
               "a checkpoint")
    before = fleet.item(conn)
    assert before is not None and before.lease_owner is not None
    fleet.ddb.put_item(TableName=fleet.table, Item=inserted_item(conn, fleet.url(conn)))
    wait_until(lambda: (item := fleet.item(conn)) is not None
               and (item.lease_owner, item.epoch) == (before.lease_owner, before.epoch),
               10, "the holding to be taken back")
    fleet.wait_new_seqs(conn, 30)
    workers = {h.worker_id for h in fleet.handled(conn)}
    assert workers == {owner}, f"handled by {sorted(workers)}: a second deliverer"
    fleet.assert_no_loss([conn])
