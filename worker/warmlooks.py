"""What a successor's looks in the table found for its warm-ups (``worker.warmups``).

Apart from ``worker.warmups``, which keeps the warm-ups and their look loop (``worker.looks``:
when to read what): these are the look loop's ``found`` and ``last_found``, the judgement of an
item read for a warm-up, and the claim of a stream its holder let go meanwhile.

- ``judge``: a warm-up's look. The item names us past its epoch: taken as if TAKE had come;
  still the holder's: nothing yet; anything else: the warm-up is dropped, and the stream
  claimed if its holder let it go (``claim_if_let_go``).
- ``last_look``: a dropped warm-up's last look: the same claim, if the holder let it go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from holdfast.core.exceptions import MalformedItem
from holdfast.core.handoff import TAKE, HandoffStep
from holdfast.core.model import LeaseItem, StoredItem
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from holdfast.worker.warmup import WarmUp
    from holdfast.worker.warmups import WarmUps

__all__ = ["claim_if_let_go", "judge", "last_look"]

logger = Logger(service=WORKER_LOGGER, child=True)


async def judge(ups: WarmUps, conn_id: str, warm: WarmUp,
                raw: Mapping[str, Any] | None) -> None:
    """What a look found in the table (``raw``: the item as stored, None: none)."""
    try:
        stored = StoredItem.of(raw) if raw is not None else None
    except MalformedItem as exc:
        logger.debug("handoff: a malformed item where a transfer was looked for",
                     conn_id=conn_id, error=str(exc)[:300])
        return  # looked for again: the window's next look, or ``tick``'s
    item = stored.item if stored is not None else None
    me = ups.owner()
    if ups.warming.get(conn_id) is not warm or me is None:
        return  # taken, aborted or timed out meanwhile
    if item is not None and item.started and item.lease_owner == warm.holder and (
            item.epoch == warm.epoch):
        return  # still the holder's: its TAKE may yet come
    if (item is not None and item.started and item.lease_owner == me
            and item.epoch > warm.epoch):
        # The usual way now (the look after READY beats the message): no line of its own,
        # the stream's "claimed" says it came by a handoff.
        logger.debug("handoff: the transfer found in the table", conn_id=conn_id,
                     holder=warm.holder, epoch=item.epoch)
        # ``at`` from the item: taken with no second read, as from a TAKE.
        await ups.take(HandoffStep(TAKE, conn_id, item.epoch, item.last_seq,
                                   warm.holder, stored.moved_at_ms if stored else None))
        return
    del ups.warming[conn_id]
    await warm.close()
    await claim_if_let_go(ups, conn_id, item, warm.holder)


async def claim_if_let_go(ups: WarmUps, conn_id: str, item: LeaseItem | None,
                          holder: str) -> None:
    """Claim ``conn_id`` if ``item`` says its holder let it go to nobody (it died and was
    reaped, or released it): the nudge of that release came while we warmed up for the
    stream, and was refused; nothing else would nudge it before the sweep. Or if it was
    passed to us and stopped since: the claim of a stopped stream of ours releases it."""
    me = ups.owner()
    if item is None or me is None or conn_id in ups.warming:
        return
    if item.started and item.lease_owner is None:
        logger.info("handoff: the holder let go without a take (it died and was reaped, "
                    "or released it); claiming it", conn_id=conn_id, holder=holder)
        await ups.claim(conn_id)
    elif not item.started and item.lease_owner == me:
        logger.info("handoff: passed to us and stopped since; releasing it",
                    conn_id=conn_id, holder=holder)
        await ups.claim(conn_id)


async def last_look(ups: WarmUps, conn_id: str, holder: str,
                    raw: Mapping[str, Any] | None) -> None:
    """What a dropped warm-up's last look found (``raw``: the item, None: none)."""
    try:
        item = StoredItem.of(raw).item if raw is not None else None
    except MalformedItem as exc:
        logger.debug("handoff: no last look at a dropped warm-up", conn_id=conn_id,
                     error=str(exc)[:300])
        return  # the sweep finds it if it needs one
    await claim_if_let_go(ups, conn_id, item, holder)
