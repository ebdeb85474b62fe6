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
answer was lost (its retry, or botocore's replay, shows our own anchor as the checkpoint), or a
removal that got none, leaves the store to look again at its next acquire of the stream (the
same call's retry, the returning nudge's, or the stray pass's taking it back within seconds).
What is left: that memory is the process's, so a worker that loses its session before then
(DynamoDB unreachable all along) leaves the wrong anchor to the stream's next holder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.aws import ConditionFailed
from holdfast.core.exceptions import StoreUnavailable
from holdfast.core.expressions import num, string
from holdfast.core.model import int_attr, str_attr
from holdfast.core.schema import ATTR

__all__ = ["Anchor", "Unsettled", "Watch", "anchored_elsewhere", "unanchor_expression"]


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
    if anchor is None or str_attr(old, ATTR.ws_url) == anchor.ws_url:
        return False
    if ATTR.last_seq not in old:
        return True
    return maybe_written and int_attr(old, ATTR.last_seq) == anchor.seq


def unanchor_expression(owner: str, epoch: int, seq: int) -> tuple[str, str, dict[str, Any]]:
    """The write that takes back an anchor written by ``owner``'s acquire at ``epoch``: only
    while that holding lasts and the checkpoint is still that anchor."""
    return ("REMOVE #seq", "#owner = :me AND #epoch = :epoch AND #seq = :first",
            {":me": string(owner), ":epoch": num(epoch), ":first": num(seq)})


@dataclass
class Watch:
    """One acquire's view of the anchors that may end up as the stream's wrong checkpoint: its
    own (``maybe_written`` once a write of it may have landed unseen) and an earlier one."""

    conn_id: str
    anchor: Anchor | None
    unsettled: Anchor | None
    maybe_written: bool = False

    def may_have_landed(self) -> None:
        """A write of this acquire got no answer, or a refusal showed a write of ours."""
        self.maybe_written = self.maybe_written or self.anchor is not None

    def wrong(self, old: Mapping[str, Any]) -> Anchor | None:
        """The anchor that is, or now is, a wrong checkpoint, by the answer ``old``: this
        acquire's (written now where there was none, or by a write of it that landed unseen),
        or the earlier one only if it is the stored checkpoint (it never landed, else)."""
        if anchored_elsewhere(old, self.anchor, maybe_written=self.maybe_written):
            return self.anchor
        if (self.unsettled is not None and int_attr(old, ATTR.last_seq) == self.unsettled.seq
                and anchored_elsewhere(old, self.unsettled, maybe_written=True)):
            return self.unsettled
        return None


@dataclass
class Unsettled:
    """A store's anchors that may be wrong checkpoints not yet removed (a removal that got no
    answer, a write that may land yet), by stream: its next acquire looks again."""

    by_id: dict[str, Anchor] = field(default_factory=dict)

    def watch(self, conn_id: str, anchor: Anchor | None) -> Watch:
        return Watch(conn_id, anchor, self.by_id.get(conn_id))

    def keep(self, watch: Watch) -> None:
        """The acquire ends without an answer: its anchor may land yet."""
        if watch.anchor is not None:
            self.by_id[watch.conn_id] = watch.anchor

    def settle(self, watch: Watch, old: Mapping[str, Any], new: dict[str, Any], *,
               update: Callable[[str, str, dict[str, Any]], object], owner: str,
               epoch: int) -> None:
        """After the acquire's write landed (``old``: the item before it; ``new``: the item as
        it is believed now): a wrong anchor removed with ``update`` (the store's conditional
        UpdateItem of the stream), or the anchor written taken as the checkpoint. No answer to
        the removal raises, and the anchor is kept for the next acquire."""
        wrong = watch.wrong(old)
        if wrong is None:
            self.by_id.pop(watch.conn_id, None)
            if watch.anchor is not None and ATTR.last_seq not in old:
                new[ATTR.last_seq] = num(watch.anchor.seq)
            return
        new.pop(ATTR.last_seq, None)
        try:
            update(*unanchor_expression(owner, epoch, wrong.seq))
        except ConditionFailed:
            pass  # not that anchor any more (an operator's resume): not ours to undo
        except StoreUnavailable:
            self.by_id[watch.conn_id] = wrong
            raise
        self.by_id.pop(watch.conn_id, None)
