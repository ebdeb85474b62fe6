"""A claim's one write: the acquire of a stream's lease (connected first for a stream just
inserted, ``worker.prestart``) and what each refusal of it means for the nudge.

``Holdings`` decides whether to acquire (``worker.claimrules.refusal``) and starts what was
acquired; between the two is this write. Its outcomes are the nudge's: a back-off's later
(``claimrules.later_for``) or a conflict, a stream of ours found STOPPED let go, DynamoDB
unavailable (the nudge comes back). Apart from the holdings so that the claim's decisions and
the stream's start read without the write's failure modes in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.core.exceptions import AcquireFailed, HoldfastError, LossReason, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.store import QUARANTINE_MS, LeaseStore
from holdfast.worker.claimrules import later_for
from holdfast.worker.claims import SOURCE_INSERTED, Claim, Later
from holdfast.worker.config import WorkerConfig
from holdfast.worker.context import ConnectionContext
from holdfast.worker.endings import Endings
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.prefetch import Prefetched
from holdfast.worker.prestart import Prestart, prestart

__all__ = ["Acquired", "Acquirer"]

logger = Logger(service=WORKER_LOGGER, child=True)


@dataclass(frozen=True, slots=True)
class Acquired:
    """A lease acquired, its write sent at ``sent`` (mono ms), with a connect-first start's
    warm socket (None: the stream connects when it starts)."""

    lease: Lease
    sent: int
    warm: Prefetched | None


class Acquirer:
    """Acquires for ``Holdings``; ``stopping()`` is True once the worker is stopping."""

    def __init__(self, config: WorkerConfig, store: LeaseStore, ctx: ConnectionContext,
                 endings: Endings, *, metrics: WorkerMetrics, wall: Callable[[], int],
                 mono: Callable[[], int], stopping: Callable[[], bool]) -> None:
        self.config, self.store, self.ctx, self.endings = config, store, ctx, endings
        self.metrics, self.wall, self.mono, self.stopping = metrics, wall, mono, stopping

    async def acquire(self, conn_id: str, owner: str, source: str,
                      ws_url: str | None) -> Acquired | Claim | Later:
        """Acquire ``conn_id`` as ``owner``: the lease to start, or the claim's outcome."""
        early: Prestart | None = None
        lease: Lease | None = None
        try:
            if source == SOURCE_INSERTED:
                early = await prestart(conn_id, owner, self.store, self.ctx, ws_url=ws_url,
                                       single_connection=self.config.single_connection)
                if self.stopping():
                    return Claim.NO_CAPACITY  # the stop began while we connected: hand it on
            sent = self.mono()
            lease = await on_io_threads(self.store.acquire, conn_id, owner,
                                        anchor=None if early is None else early.anchor)
        except AcquireFailed as exc:
            if exc.reason is LossReason.STOPPED and exc.current is not None and (
                    exc.current.lease_owner == owner):
                # Ours but STOPPED (its stop order was missed, or its release failed): we
                # are its holder, so we release it.
                await self.endings.let_go(exc.current, owner)
                return Claim.CONFLICT
            if exc.reason is LossReason.INVALID and exc.parked:
                # Not a race: the item breaks the schema and was parked (store.quarantine).
                self.metrics.incr(names.METRIC_STREAMS_QUARANTINED)
                logger.warning(f"claim refused: the stream's item is malformed, parked as "
                               f"INVALID for {QUARANTINE_MS // 60_000} min (its last_error "
                               "says why: fix or delete the item)",
                               conn_id=conn_id, worker_id=self.config.worker_id)
            elif exc.reason is LossReason.INVALID:
                logger.warning("claim refused: the stream's item is malformed and could not "
                               "be parked (held by another worker, STOPPED, or DynamoDB "
                               "refused the write): fix or delete the item",
                               conn_id=conn_id, worker_id=self.config.worker_id)
            else:
                self.metrics.incr(names.METRIC_CLAIM_CONFLICTS)
            logger.debug("claim refused", conn_id=conn_id, worker_id=self.config.worker_id,
                         reason=str(exc.reason), source=source)
            return later_for(exc, self.config.timing.skew_ms, self.wall()) or Claim.CONFLICT
        except StoreUnavailable as exc:
            logger.warning("claim failed, DynamoDB unavailable", conn_id=conn_id,
                           worker_id=self.config.worker_id, error=str(exc)[:300])
            return Claim.UNAVAILABLE
        except HoldfastError as exc:
            logger.error("claim failed", conn_id=conn_id, worker_id=self.config.worker_id,
                         error=str(exc)[:300])
            return Claim.UNAVAILABLE
        finally:
            if early is not None and lease is None:
                await early.close()
        if lease.unowned_ms is not None:
            self.metrics.unowned_time(lease.unowned_ms)
        warm = None if early is None else await early.taken_by(lease)
        return Acquired(lease, sent, warm)
