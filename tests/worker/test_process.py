"""Real ``python -m worker`` processes against DynamoDB Local, moto SQS and the demo upstream."""

from __future__ import annotations

import signal
from collections.abc import Callable

from tests.worker.conftest import (
    Fleet,
    UpstreamThread,
    WorkerProc,
    missing_seqs,
    seqs_by_stream,
    wait_until,
)


def test_claims_on_nudge_and_handles_messages(fleet: Fleet, upstream: UpstreamThread,
                                              spawn: Callable[..., WorkerProc],
                                              unique_id: str) -> None:
    """A nudge makes the worker acquire the lease, connect, and call the handler in order."""
    conn = f"{unique_id}-a"
    fleet.create(conn, upstream.url(conn))
    w = spawn(fleet.env)
    fleet.nudge(conn)
    wait_until(lambda: len(seqs_by_stream(w.handled()).get(conn, [])) >= 10, 15, "messages")
    item = fleet.item(conn)
    assert item["lease_owner"]["S"] == w.name
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    seqs = seqs_by_stream(w.handled())[conn]
    assert seqs == sorted(seqs) and not missing_seqs(seqs)
    item = fleet.item(conn)
    assert "lease_owner" not in item and item["lease_expires_at_ms"]["N"] == "0"
    assert int(item["last_seq"]["N"]) == max(seqs)
    assert w.messages("worker stopped")
