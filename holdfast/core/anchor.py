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
at once by its holder, before anything is delivered: ``unanchor_expression``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from holdfast.core.schema import ATTR

__all__ = ["Anchor", "anchored_elsewhere", "unanchor_expression"]


@dataclass(frozen=True, slots=True)
class Anchor:
    """A new stream's first checkpoint, from the first frame of the upstream at ``ws_url``."""

    seq: int
    ws_url: str


def anchored_elsewhere(old: Mapping[str, Any], anchor: Anchor | None) -> bool:
    """Whether the acquire whose answer is ``old`` (the item before it) wrote ``anchor``'s seq
    for an item that names another URL: written only where there was no checkpoint."""
    return (anchor is not None and ATTR.last_seq not in old
            and old.get(ATTR.ws_url, {}).get("S") != anchor.ws_url)


def unanchor_expression(owner: str, epoch: int, seq: int) -> tuple[str, str, dict[str, Any]]:
    """The write that takes back an anchor written by ``owner``'s acquire at ``epoch``: only
    while that holding lasts and the checkpoint is still that anchor."""
    return ("REMOVE #seq", "#owner = :me AND #epoch = :epoch AND #seq = :first",
            {":me": {"S": owner}, ":epoch": {"N": str(epoch)}, ":first": {"N": str(seq)}})
