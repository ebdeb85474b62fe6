"""Fenced writes for a sink: one call that refuses a write from a holder with a stale epoch.

``Message.epoch`` is the lease epoch of the holder that delivered a message, a fencing token
that only goes up per conn_id. A holder that lost its lease without knowing it yet (a paused
process) can still call its handler; downstream, the defence is to refuse a write whose epoch
is lower than the highest already written for that conn_id. ``fenced_put`` does that.

Contract: one ``TransactWriteItems`` of two Puts in the caller's table, both or neither:

- the fence item of the conn_id (key ``{key: "FENCE#<conn_id>"}``, or ``fence_key`` for a
  table with a sort key), attribute ``epoch``, conditional on
  ``attribute_not_exists(epoch) OR epoch <= :e``: an equal epoch passes (the holder writes
  again), a higher one raises the fence for good;
- the caller's item, with the caller's own condition if any (``attribute_not_exists(pk)``
  for write-once idempotency on ``conn_id:seq``).

It returns True (written) or False (the caller's condition failed: a replay, reported as a
plain conditional put reports it), or raises ``StaleEpoch`` (the fence refused: a later holder
has written for this conn_id; nothing was written). If both conditions fail, ``StaleEpoch``:
the caller is stale, whatever it tried to write. Anything else (``TransactionConflict`` with a
concurrent writer of the same fence, throttling, validation) is the client's own exception.
The fence moves only when someone writes: a stale holder's writes pass until its successor's
first write; closing that window is the lease's job. A caller's item must not use a
``FENCE#`` key (one transaction cannot write one item twice).

Cost: a transactional write costs 2 write units per KB of each item, so 4 per call with items
under 1 KB (a plain PutItem costs 1), plus one fence item (about 30 bytes + the conn_id) per
conn_id, kept forever. All writes of a conn_id touch its one fence item: at most ~500 calls/s
per conn_id. IAM: ``dynamodb:PutItem`` on the table (a transaction's Put is authorised as
PutItem). boto3 fills ``ClientRequestToken``, so its own retry after a lost answer is
idempotent (for 10 minutes) instead of coming back as a false replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        PutTypeDef,
        TransactWriteItemTypeDef,
        UniversalAttributeValueTypeDef,
    )

__all__ = ["FENCE_ATTRIBUTE", "FENCE_PREFIX", "StaleEpoch", "fence_key", "fenced_put"]

FENCE_PREFIX = "FENCE#"
FENCE_ATTRIBUTE = "epoch"


class StaleEpoch(Exception):
    """The fence refused the write: a holder with a higher epoch has written for this conn_id."""

    def __init__(self, conn_id: str, epoch: int, seen: int | None) -> None:
        super().__init__(f"{conn_id}: write at epoch {epoch} refused, the fence is at "
                         f"{'?' if seen is None else seen} (a later holder has written)")
        self.conn_id, self.epoch, self.seen = conn_id, epoch, seen

    def __reduce__(self) -> tuple[type[StaleEpoch], tuple[str, int, int | None]]:
        # Rebuilt from its fields: pickled (a process pool's worker raising it) with the
        # message alone as args, it failed to unpickle with a TypeError.
        return type(self), (self.conn_id, self.epoch, self.seen)


def fence_key(conn_id: str, key: str = "pk") -> dict[str, UniversalAttributeValueTypeDef]:
    """The fence item's key in a table whose (string) partition key is ``key``."""
    return {key: {"S": f"{FENCE_PREFIX}{conn_id}"}}


def fenced_put(client: DynamoDBClient, table: str,
               item: Mapping[str, UniversalAttributeValueTypeDef], *, conn_id: str, epoch: int,
               key: str = "pk", condition: str | None = None,
               names: Mapping[str, str] | None = None,
               values: Mapping[str, UniversalAttributeValueTypeDef] | None = None,
               fence: Mapping[str, UniversalAttributeValueTypeDef] | None = None) -> bool:
    """Put ``item`` unless a higher epoch was written for ``conn_id`` (see the module doc).

    ``condition``/``names``/``values``: the item's own condition expression and its
    placeholders. ``fence``: the fence item's full key, for a table with a sort key.
    """
    put: PutTypeDef = {"TableName": table, "Item": item}
    if condition:
        put["ConditionExpression"] = condition
    if names:
        put["ExpressionAttributeNames"] = names
    if values:
        put["ExpressionAttributeValues"] = values
    fence_item = {**(fence or fence_key(conn_id, key)), FENCE_ATTRIBUTE: {"N": str(epoch)}}
    items: list[TransactWriteItemTypeDef] = [
        {"Put": {"TableName": table, "Item": fence_item,
                 "ConditionExpression": "attribute_not_exists(#e) OR #e <= :e",
                 "ExpressionAttributeNames": {"#e": FENCE_ATTRIBUTE},
                 "ExpressionAttributeValues": {":e": {"N": str(epoch)}},
                 # The stored epoch comes back in the cancellation reason: StaleEpoch.seen.
                 "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
        {"Put": put}]
    try:
        client.transact_write_items(TransactItems=items)
    except client.exceptions.TransactionCanceledException as exc:
        reasons = exc.response.get("CancellationReasons") or []
        codes = [r.get("Code") for r in reasons]
        if len(codes) != 2 or any(c not in ("None", "ConditionalCheckFailed") for c in codes):
            raise  # a conflict, throttling...: not an answer about the conditions
        if codes[0] == "ConditionalCheckFailed":
            old: Any = reasons[0].get("Item") or {}  # botocore's stub mistypes Item
            stored = old.get(FENCE_ATTRIBUTE, {}).get("N")
            raise StaleEpoch(conn_id, epoch, None if stored is None else int(stored)) from None
        return False
    return True
