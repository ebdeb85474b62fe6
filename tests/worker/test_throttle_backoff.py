"""Back-off under throttling: jittered, growing claim redeliveries and fence-bounded retries."""

from __future__ import annotations

import random
from typing import Any

from holdfast.worker.backoff import claim_retry_s, retry_before_s
from holdfast.worker.claimer import Claimer
from holdfast.worker.claims import Claim
from holdfast.worker.metrics import WorkerMetrics


class FakeSqs:
    def __init__(self) -> None:
        self.visibility: list[int] = []

    def change_message_visibility_batch(self, **kw: Any) -> dict[str, Any]:
        self.visibility += [e["VisibilityTimeout"] for e in kw["Entries"]]
        return {}


def test_claim_retry_grows_and_spreads() -> None:
    """Redeliveries double with the receive count (capped) and are spread by jitter."""
    rng = random.Random(3)
    first = {claim_retry_s(1, rand=rng.random) for _ in range(200)}
    later = {claim_retry_s(5, rand=rng.random) for _ in range(200)}
    assert first == {1, 2}
    assert later == {1, 2, 3, 4}
    assert claim_retry_s(9, rand=lambda: 1.0) == 4


def test_retry_before_never_passes_the_deadline() -> None:
    """A heartbeat retry pause grows from base to cap, never beyond half the time left."""
    assert retry_before_s(1, 10_000, 0.1, 0.5, rand=lambda: 1.0) == 0.1
    assert retry_before_s(4, 10_000, 0.1, 0.5, rand=lambda: 1.0) == 0.5
    assert retry_before_s(4, 300, 0.1, 0.5, rand=lambda: 1.0) == 0.15
    assert 0.05 <= retry_before_s(1, 10_000, 0.1, 0.5) <= 0.1


async def test_unavailable_claims_come_back_jittered_and_later_each_time() -> None:
    """Nudges refused as unavailable return after jittered delays growing with receives."""
    sqs = FakeSqs()

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        return Claim.UNAVAILABLE

    claimer = Claimer(sqs, "q", claim, lambda: 10, WorkerMetrics(),  # type: ignore[arg-type]
                      rand=random.Random(5).random)
    messages = [{"Body": f'{{"conn_id": "c{i}"}}', "ReceiptHandle": str(i),
                 "Attributes": {"ApproximateReceiveCount": str(1 + i % 4)}} for i in range(40)]
    await claimer.handle(messages)
    for task in list(claimer._settling):
        await task
    assert len(set(sqs.visibility)) >= 3  # not one herd
    assert max(sqs.visibility) > 2


def test_claim_retry_doubles_per_receive_and_is_never_below_a_second() -> None:
    """The redelivery ceiling doubles from the first receive (2, 4, 8 s below the cap), and
    a base under a second still gives at least 1 s (a visibility of 0 is a spin)."""
    assert [claim_retry_s(n, cap_s=100, rand=lambda: 1.0) for n in (1, 2, 3)] == [2, 4, 8]
    assert claim_retry_s(1, base_s=0.5, rand=lambda: 1.0) == 1
