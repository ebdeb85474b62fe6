"""A claim's one write: what the acquire's answer means for the nudge, on a fake store and
injected clocks (no DynamoDB, no upstream)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from holdfast.core import names
from holdfast.core.anchor import Anchor
from holdfast.core.exceptions import AcquireFailed, LossReason, StoreUnavailable
from holdfast.core.model import Lease, LeaseItem
from holdfast.core.store import LeaseStore
from holdfast.worker.acquiring import Acquired, Acquirer
from holdfast.worker.claims import Claim, Later
from holdfast.worker.config import WorkerConfig
from holdfast.worker.context import ConnectionContext
from holdfast.worker.endings import Endings
from holdfast.worker.metrics import WorkerMetrics

OWNER = "w1#i1"
WALL_MS = 1_000_000


class _Store:
    """Answers every acquire with ``answer``: a lease, or an error to raise."""

    def __init__(self, answer: Lease | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str]] = []

    def acquire(self, conn_id: str, owner: str, anchor: Anchor | None = None) -> Lease:
        self.calls.append((conn_id, owner))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _Endings:
    def __init__(self) -> None:
        self.let_go_calls: list[tuple[LeaseItem, str]] = []

    async def let_go(self, item: LeaseItem, owner: str) -> bool:
        self.let_go_calls.append((item, owner))
        return True


def _item(owner: str | None, state: str = "STARTED", expires_at_ms: int | None = None,
          ) -> LeaseItem:
    return LeaseItem("c1", state, "ws://u/c1", owner, expires_at_ms, 7, 3)


def _acquirer(answer: Lease | Exception) -> tuple[Acquirer, _Store, _Endings, WorkerMetrics]:
    store, endings, metrics = _Store(answer), _Endings(), WorkerMetrics()
    config = SimpleNamespace(worker_id="w1", single_connection=False,
                             timing=SimpleNamespace(skew_ms=300))
    acquirer = Acquirer(cast(WorkerConfig, config), cast(LeaseStore, store),
                        cast(ConnectionContext, None), cast(Endings, endings), metrics=metrics,
                        wall=lambda: WALL_MS, mono=lambda: 42, stopping=lambda: False)
    return acquirer, store, endings, metrics


async def test_a_lease_acquired_is_handed_back_with_its_send_time() -> None:
    """The lease landed: handed back with when its write was sent, no warm socket."""
    lease = Lease("c1", OWNER, 4, WALL_MS + 60_000, "ws://u/c1", 7, unowned_ms=250)
    acquirer, store, _, metrics = _acquirer(lease)
    got = await acquirer.acquire("c1", OWNER, "nudge", None)
    assert got == Acquired(lease, 42, None)
    assert store.calls == [("c1", OWNER)] and metrics.unowned_ms == [250]


async def test_a_stream_held_elsewhere_is_a_counted_conflict() -> None:
    """Refused because another worker holds it: a conflict, counted as one."""
    acquirer, _, endings, metrics = _acquirer(
        AcquireFailed("c1", LossReason.HELD, _item("w2#i9")))
    assert await acquirer.acquire("c1", OWNER, "nudge", None) is Claim.CONFLICT
    assert metrics.totals[names.METRIC_CLAIM_CONFLICTS] == 1 and not endings.let_go_calls


async def test_a_stopped_stream_of_ours_is_let_go() -> None:
    """Ours but STOPPED (a missed stop order): we release it ourselves; no conflict counted."""
    current = _item(OWNER, state="STOPPED")
    acquirer, _, endings, metrics = _acquirer(AcquireFailed("c1", LossReason.STOPPED, current))
    assert await acquirer.acquire("c1", OWNER, "nudge", None) is Claim.CONFLICT
    assert endings.let_go_calls == [(current, OWNER)]
    assert metrics.totals[names.METRIC_CLAIM_CONFLICTS] == 0


async def test_a_stream_in_back_off_brings_its_nudge_back_later() -> None:
    """In back-off, claimable within SQS's delay limit: the nudge comes back then."""
    acquirer, _, _, _ = _acquirer(AcquireFailed(
        "c1", LossReason.BACKOFF, _item(None, expires_at_ms=WALL_MS + 20_000)))
    # Claimable 20.3 s from now (expiry + skew): rounded up, and a second for clock jitter.
    assert await acquirer.acquire("c1", OWNER, "nudge", None) == Later(22)


async def test_no_decisive_answer_is_unavailable() -> None:
    """DynamoDB gave no decisive answer: unavailable (the nudge is shown again later)."""
    acquirer, _, _, metrics = _acquirer(StoreUnavailable("acquire", "ThrottlingException"))
    assert await acquirer.acquire("c1", OWNER, "nudge", None) is Claim.UNAVAILABLE
    assert metrics.totals[names.METRIC_CLAIM_CONFLICTS] == 0
