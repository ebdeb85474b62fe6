"""A write outside the protocol over a held stream, and the write that puts the holding back.

An app that writes its streams' items whole (``PutItem`` of ``Pk``, ``desired_state`` and
``ws_url``, as it inserted them) removes, on a stream someone holds, what only the protocol
writes: the owner, the epoch, the checkpoint. Read as a release it gave the stream a second
deliverer (claimed at once by another worker while the holder went on until its next
checkpoint) and cost its position (a claim with no ``last_seq`` starts at the upstream's
head). No writer of the protocol removes the epoch or lowers it, so such a write is told
apart from a release by its epoch alone (``overwritten_holding``). The router puts the
holding back as it was, keeping the app's own attributes (``put_back_clauses``), unless the
stream was claimed or deleted meanwhile: then its old holder is told to stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from holdfast.core.expressions import NAMES, num
from holdfast.core.judgements import parse_or_none
from holdfast.core.schema import ATTR

__all__ = ["PROTOCOL_ATTRIBUTES", "Overwrite", "overwritten_holding", "put_back_clauses"]

# What only the protocol writes (``docs/concepts/protocol.md``); the rest of an item (its key,
# ``desired_state``, ``ws_url``, ``weight``, ``single_connection``) is the app's or operator's.
PROTOCOL_ATTRIBUTES: Final = (
    ATTR.lease_owner, ATTR.lease_expires_at_ms, ATTR.last_seq, ATTR.epoch, ATTR.status,
    ATTR.last_error, ATTR.error_count, ATTR.updated_at_ms, ATTR.unowned_since_ms,
    ATTR.unowned_epoch, ATTR.unowned_desired_state, ATTR.moved_at_ms, ATTR.successor)


@dataclass(frozen=True, slots=True)
class Overwrite:
    """A held stream's item written over: its holder, and the holding's attributes as they
    were (``put_back``, typed values of the old image) or added by the write (``removes``)."""

    conn_id: str
    owner: str
    epoch: int
    last_seq: int | None
    put_back: tuple[tuple[str, Mapping[str, Any]], ...]
    removes: tuple[str, ...]
    started: bool  # the write left it STARTED (else its holder is to stop it)


def overwritten_holding(old_image: Mapping[str, Any] | None,
                        new_image: Mapping[str, Any] | None) -> Overwrite | None:
    """The holding a MODIFY removed outside the protocol: owned before, no owner after, and
    the epoch gone or lowered (a release, a reap and a transfer keep or raise it). None for
    anything else, or images that do not parse (the router's other rules judge those)."""
    old, new = parse_or_none(old_image), parse_or_none(new_image)
    if (old is None or new is None or old_image is None or new_image is None
            or old.lease_owner is None or new.lease_owner is not None
            or new.epoch >= old.epoch):
        return None
    return Overwrite(
        conn_id=old.conn_id, owner=old.lease_owner, epoch=old.epoch, last_seq=old.last_seq,
        put_back=tuple((a, old_image[a]) for a in PROTOCOL_ATTRIBUTES if a in old_image),
        removes=tuple(a for a in PROTOCOL_ATTRIBUTES
                      if a in new_image and a not in old_image), started=new.started)


def put_back_clauses(overwrite: Overwrite) -> tuple[str, str, dict[str, Any]]:
    """(UpdateExpression, ConditionExpression, values), with ``expressions.NAMES``
    placeholders, of the write that puts the holding back. Its condition: the item exists,
    has no owner and an epoch below the holder's, so nobody claimed it since (a claim sets
    both) and it was not deleted."""
    alias = {attr: name for name, attr in NAMES.items()}
    values: dict[str, Any] = {f":p{i}": value
                              for i, (_, value) in enumerate(overwrite.put_back)}
    update = "SET " + ", ".join(f"{alias[a]} = :p{i}"
                                for i, (a, _) in enumerate(overwrite.put_back))
    if overwrite.removes:
        update += " REMOVE " + ", ".join(alias[a] for a in overwrite.removes)
    values[":held"] = num(overwrite.epoch)
    return (update, "attribute_exists(#ds) AND attribute_not_exists(#owner) AND "
                    "(attribute_not_exists(#epoch) OR #epoch < :held)", values)
