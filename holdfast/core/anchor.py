"""A new stream's first checkpoint written by its acquire, and its one correction.

A stream connected before its claim (``worker.prestart``) is anchored by the acquire itself:
the first frame's seq - 1 becomes ``last_seq`` where there is none (``acquire_expression``). That
seq belongs to the URL the socket was opened on: the nudge's, or the item's as read a moment
before. If the item names another URL when the acquire lands (changed since the insert, or a
nudge that named another, forged or stale), the anchor is another upstream's seq space, and
the stream would resume after it: messages skipped, or waited for. The acquire cannot make the
URL part of its condition: the worker's UpdateItem is pinned to the lease attributes it writes,
``ws_url`` not among them (``infra/service.py``), and a condition names its attributes too. So
the acquire's answer (the item before it, ALL_OLD) is checked, and a wrong anchor is removed
at once by its holder, before anything is delivered: ``unanchor_expression``. An acquire whose
answer was lost, or a removal that got none, leaves the store to look again at its next
acquire of the stream (the same call's retry, or the stray pass's taking it back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.aws import ConditionFailed
from holdfast.core.exceptions import StoreUnavailable
from holdfast.core.schema import ATTR

__all__ = ["Anchor", "Unsettled", "anchored_elsewhere", "unanchor_expression"]


@dataclass(frozen=True, slots=True)
class Anchor:
    """A new stream's first checkpoint, from the first frame of the upstream at ``ws_url``."""

    seq: int
    ws_url: str


def anchored_elsewhere(old: Mapping[str, Any], anchor: Anchor | None, *,
                       maybe_written: bool = False) -> bool:
    """Whether ``anchor``'s seq is, or now is, the checkpoint of an item that names another
    URL, by the acquire whose answer is ``old`` (the item before it: it wrote the anchor where
    there was no checkpoint) or, if ``maybe_written``, by an earlier acquire of ours whose
    answer was lost (its anchor is the checkpoint ``old`` shows) or whose removal failed."""
    if anchor is None or old.get(ATTR.ws_url, {}).get("S") == anchor.ws_url:
        return False
    if ATTR.last_seq not in old:
        return True
    return maybe_written and old[ATTR.last_seq].get("N") == str(anchor.seq)


def unanchor_expression(owner: str, epoch: int, seq: int) -> tuple[str, str, dict[str, Any]]:
    """The write that takes back an anchor written by ``owner``'s acquire at ``epoch``: only
    while that holding lasts and the checkpoint is still that anchor."""
    return ("REMOVE #seq", "#owner = :me AND #epoch = :epoch AND #seq = :first",
            {":me": {"S": owner}, ":epoch": {"N": str(epoch)}, ":first": {"N": str(seq)}})


@dataclass
class Unsettled:
    """A store's anchors whose removal got no answer, by stream: its next acquire of the
    stream (the stray pass's taking it back) looks again."""

    by_id: dict[str, Anchor] = field(default_factory=dict)

    def get(self, conn_id: str) -> Anchor | None:
        return self.by_id.get(conn_id)

    def settled(self, conn_id: str) -> None:
        """An acquire of the stream found no wrong anchor to remove."""
        self.by_id.pop(conn_id, None)

    def remove(self, update: Callable[[str, str, dict[str, Any]], object], conn_id: str,
               owner: str, epoch: int, anchor: Anchor) -> None:
        """Remove ``anchor`` with ``update`` (the store's conditional UpdateItem of the
        stream); no answer raises, and it is kept for the next acquire."""
        try:
            update(*unanchor_expression(owner, epoch, anchor.seq))
        except ConditionFailed:
            pass  # not that anchor any more (an operator's resume): not ours to undo
        except StoreUnavailable:
            self.by_id[conn_id] = anchor
            raise
        self.settled(conn_id)
