"""The holder's release of a lease: ``release_lease``.

``holdfast.core.store`` keeps every lease call's entry point (``LeaseStore.release`` among
them); the release's outcome handling lives here, as the transfer's does in
``holdfast.core.transfer``. The store hands in its one conditional UpdateItem and its
consistent read, so the calls made (and their parameters) are the store's own. The write
itself is ``expressions.release_clauses``; what a refused one found, ``rules.release_found``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from holdfast.core import rules
from holdfast.core.aws import ConditionFailed
from holdfast.core.exceptions import LossReason, StoreUnavailable
from holdfast.core.expressions import release_clauses
from holdfast.core.judgements import release_loss
from holdfast.core.model import Lease, int_attr
from holdfast.core.redact import scrub
from holdfast.core.schema import ATTR

__all__ = ["release_lease"]

log = logging.getLogger(__name__)


def release_lease(lease: Lease, handled_seq: int | None, *, error: str | None,
                  retry_at_ms: int | None, moved: bool, successor: str | None,
                  clock: Callable[[], int],
                  update: Callable[[str, str, dict[str, Any]], object],
                  read: Callable[[str], dict[str, Any] | None]) -> LossReason | None:
    """Final checkpoint and hand ``lease`` back; None if released, else why it was not ours.

    With ``error`` the release is a give-up after upstream failures: the error is recorded
    and the lease stays unclaimable until ``retry_at_ms`` (the sweep finds it then).
    Otherwise it leaves the unowned-since marker (``holdfast.core.unowned``); ``moved``
    (a rebalancing move) also stamps ``moved_at_ms``, which starts the stream's cool-down.
    ``successor`` makes it a handoff: the stream is kept for that owner alone for
    ``rules.HANDOFF_HOLD_MS`` (the expiry), then anyone may take it.

    A release refused while the stream is still ours at our epoch can only have met its
    never-backwards checkpoint (someone moved the stored one past ours): it is released
    again without a checkpoint, keeping theirs. Without an answer, the item is read: still
    ours, ``StoreUnavailable`` is raised (not written: the caller tries again).
    ``update`` is the store's conditional write of the stream's item, ``read`` its
    consistent read, ``clock`` its wall clock (ms).
    """
    # Whatever wrote the error text, the URL's secrets never reach the item.
    text = None if error is None else scrub(error, lease.ws_url)[:1000]
    seq = rules.next_checkpoint(lease.last_seq, handled_seq)
    while True:
        expression, condition, values = release_clauses(
            lease, clock(), seq, error=text, retry_at_ms=retry_at_ms, moved=moved,
            successor=successor).update_expression()
        try:
            update(expression, condition, values)
        except ConditionFailed as failed:
            found = rules.release_found(failed.item, lease.owner, lease.epoch, successor)
            if found is rules.ReleaseFound.STILL_OURS and seq is not None:
                # Ours at our epoch: only the checkpoint's never-backwards clause refused. The
                # stored checkpoint is ahead of ours (written by someone else: an edit); the
                # stream is released keeping it, not left owned by a holder that has ended.
                log.warning("release of %s (epoch %d): the stored checkpoint %s is ahead of "
                            "ours, %d; released keeping it", lease.conn_id, lease.epoch,
                            int_attr(failed.item or {}, ATTR.last_seq), seq)
                seq = None
                continue
            return release_loss(lease, failed.item, found)
        except StoreUnavailable:
            raw = read(lease.conn_id)
            found = rules.release_found(raw, lease.owner, lease.epoch, successor)
            if found is rules.ReleaseFound.STILL_OURS:
                raise  # not written: the caller tries again
            return release_loss(lease, raw, found)
        return None
