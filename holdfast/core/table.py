"""Table-level lease queries and operator writes: the orphan query and start/stop/rm.

The orphan query is the sweep's only read: one GSI ``Query`` on
``desired_state = STARTED AND lease_expires_at_ms <= now - skew``. When nothing is expired it is
one round trip whatever the number of workers or connections.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holdfast.core import rules, unowned
from holdfast.core.aws import ConditionFailed, call, pages
from holdfast.core.exceptions import MalformedItem, StreamHeld
from holdfast.core.model import LeaseItem, validate_conn_id
from holdfast.core.schema import (
    ATTR,
    GSI_NAME,
    OWNER_INDEX_NAME,
    STARTED,
    STOPPED,
    conn_id_from_pk,
    pk_for,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "Orphan",
    "count_owned",
    "create_stream",
    "delete_stream",
    "find_orphans",
    "find_unindexed",
    "inserted_item",
    "restart_now",
    "scan_items",
    "set_desired_state",
    "swap_desired_state",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Orphan:
    """A STARTED lease nobody holds: expired, released, or past its back-off."""

    conn_id: str
    expires_at_ms: int


def find_orphans(client: DynamoDBClient, table: str, *, now_ms: int, skew_ms: int,
                 page_size: int = 200) -> Iterator[Orphan | MalformedItem]:
    """Every STARTED lease expired for a challenger at ``now_ms``, oldest first, paginated;
    an index entry no stream could have (a key without ``CONN#``, an invalid id) is a
    ``MalformedItem``: the caller counts and reports it (it stays in the index until fixed)."""
    kwargs: dict[str, Any] = {
        "TableName": table, "IndexName": GSI_NAME, "Limit": page_size,
        "KeyConditionExpression": "#ds = :started AND #exp <= :cutoff",
        "ExpressionAttributeNames": {"#ds": ATTR.desired_state, "#exp": ATTR.lease_expires_at_ms},
        "ExpressionAttributeValues": {
            ":started": {"S": STARTED},
            ":cutoff": {"N": str(rules.acquire_cutoff_ms(now_ms, skew_ms))}},
    }
    for resp in pages("find_orphans", client.query, **kwargs):
        for raw in resp.get("Items", []):
            try:
                conn_id = validate_conn_id(conn_id_from_pk(raw[ATTR.pk]["S"]))
                expires = int(raw[ATTR.lease_expires_at_ms]["N"])
            except (KeyError, TypeError, ValueError) as exc:
                key = raw.get(ATTR.pk) if isinstance(raw, dict) else None
                yield MalformedItem(str(key.get("S") if isinstance(key, dict) else raw)[:200],
                                    str(exc)[:300])
                continue
            yield Orphan(conn_id, expires)


def count_owned(client: DynamoDBClient, table: str, owner: str) -> int:
    """How many streams name ``owner`` as their ``lease_owner`` now (owner index, COUNT).

    The rebalancing decider asks this of each live session only when the sessions' reported
    loads say the fleet is out of balance: a report is up to a heartbeat old, so while streams
    move it counts some twice or not at all, and shares from it would be wrong. An owner index
    entry is under 100 bytes, so a worker holding 1,000 streams costs about 12 read units
    (eventually consistent; arithmetic, not measured), once per decision that may move
    something, never when balanced.
    Streams that cannot be held (in back-off, quarantined) are in no one's count, as they
    should be: they are not anyone's load.
    """
    return sum(int(resp.get("Count", 0)) for resp in pages(
        "count_owned", client.query, TableName=table, IndexName=OWNER_INDEX_NAME,
        Select="COUNT", KeyConditionExpression="#owner = :owner",
        ExpressionAttributeNames={"#owner": ATTR.lease_owner},
        ExpressionAttributeValues={":owner": {"S": owner}}))


def inserted_item(conn_id: str, ws_url: str) -> dict[str, Any]:
    """A new STARTED stream's whole item (the seed schema plus expiry 0), as ``create_stream``
    writes it; written over a held stream it is what the protocol takes back
    (``holdfast.core.overwrites``)."""
    return {ATTR.pk: {"S": pk_for(conn_id)}, ATTR.desired_state: {"S": STARTED},
            ATTR.ws_url: {"S": ws_url}, ATTR.lease_expires_at_ms: {"N": "0"}}


def create_stream(client: DynamoDBClient, table: str, conn_id: str, ws_url: str, *,
                  created_at_ms: int | None = None) -> bool:
    """Insert a STARTED item (seed schema plus expiry 0); False if the id already exists.

    With ``created_at_ms`` the item is marked unowned since then, so its first claim is
    measured (``holdfast.core.unowned``).
    """
    validate_conn_id(conn_id)
    marker = {} if created_at_ms is None else unowned.creation_marker(created_at_ms)
    try:
        call("create_stream", client.put_item, TableName=table,
             Item={**inserted_item(conn_id, ws_url), **marker},
             ConditionExpression="attribute_not_exists(#pk)",
             ExpressionAttributeNames={"#pk": ATTR.pk})
    except ConditionFailed:
        return False
    return True


def set_desired_state(client: DynamoDBClient, table: str, conn_id: str, state: str) -> bool:
    """Set STARTED or STOPPED on an existing item; False if there is no such item."""
    return swap_desired_state(client, table, conn_id, state) is not None


def swap_desired_state(client: DynamoDBClient, table: str, conn_id: str,
                       state: str) -> str | None:
    """Set STARTED or STOPPED on an existing item; the desired state it had ("" if none), or
    None if there is no such item."""
    if state not in (STARTED, STOPPED):
        raise ValueError(f"desired state must be STARTED or STOPPED, not {state!r}")
    try:
        resp = call("set_desired_state", client.update_item, TableName=table,
                    Key={ATTR.pk: {"S": pk_for(conn_id)}},
                    # if_not_exists keeps a never-claimed item visible to the orphan index.
                    UpdateExpression="SET #ds = :s, #exp = if_not_exists(#exp, :zero)",
                    ConditionExpression="attribute_exists(#pk)",
                    ExpressionAttributeNames={"#ds": ATTR.desired_state, "#pk": ATTR.pk,
                                              "#exp": ATTR.lease_expires_at_ms},
                    ExpressionAttributeValues={":s": {"S": state}, ":zero": {"N": "0"}},
                    ReturnValues="ALL_OLD")
    except ConditionFailed:
        return None
    return str(resp.get("Attributes", {}).get(ATTR.desired_state, {}).get("S", ""))


def restart_now(client: DynamoDBClient, table: str, conn_id: str, *,
                after_seq: int | None = None) -> dict[str, Any] | None:
    """Set an unowned item STARTED with its back-off (or a quarantine's parking) ended: claimable
    at once, from its checkpoint, or with ``after_seq`` from after that seq (its checkpoint set
    there: past a message that can never be handled). The item as it was just before this
    write (what the checkpoint replaced), or None if there is no such item or it has an owner:
    a holder's expiry and checkpoint are its own, never an operator's to write
    (``docs/concepts/protocol.md``)."""
    update, values = "SET #ds = :s, #exp = :zero", {":s": {"S": STARTED}, ":zero": {"N": "0"}}
    names = {"#ds": ATTR.desired_state, "#pk": ATTR.pk, "#exp": ATTR.lease_expires_at_ms,
             "#owner": ATTR.lease_owner}
    if after_seq is not None:
        update += ", #seq = :seq"
        values[":seq"] = {"N": str(after_seq)}
        names["#seq"] = ATTR.last_seq
    try:
        resp = call("restart_now", client.update_item, TableName=table,
                    Key={ATTR.pk: {"S": pk_for(conn_id)}}, UpdateExpression=update,
                    ConditionExpression="attribute_exists(#pk) AND attribute_not_exists(#owner)",
                    ExpressionAttributeNames=names, ExpressionAttributeValues=values,
                    ReturnValues="ALL_OLD")
    except ConditionFailed:
        return None
    return resp.get("Attributes") or None


def find_unindexed(client: DynamoDBClient, table: str, *, start_key: dict[str, Any] | None,
                   page_size: int = 1_000) -> tuple[list[str], dict[str, Any] | None]:
    """One Scan page of STARTED items without ``lease_expires_at_ms``: the sparse index cannot
    see them, and only the router's normalisation (which may have failed) would. Returns their
    connection ids and where the next page starts (None: the pass is complete)."""
    kwargs: dict[str, Any] = {
        "TableName": table, "Limit": page_size, "ProjectionExpression": "#pk",
        "FilterExpression": "#ds = :started AND attribute_not_exists(#exp)",
        "ExpressionAttributeNames": {"#pk": ATTR.pk, "#ds": ATTR.desired_state,
                                     "#exp": ATTR.lease_expires_at_ms},
        "ExpressionAttributeValues": {":started": {"S": STARTED}}}
    if start_key:
        kwargs["ExclusiveStartKey"] = start_key
    resp = call("find_unindexed", client.scan, **kwargs)
    found = []
    for raw in resp.get("Items", []):
        try:
            found.append(validate_conn_id(conn_id_from_pk(raw[ATTR.pk]["S"])))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("skipping unindexed item with a malformed key %r: %s", str(raw)[:200], exc)
    return found, resp.get("LastEvaluatedKey") or None


def delete_stream(client: DynamoDBClient, table: str, conn_id: str, *,
                  held_too: bool = False) -> dict[str, Any] | None:
    """Delete the item; what it was (its raw attributes), or None if there was none.

    Only an unowned item, unless ``held_too``: deleting a held stream would free it while its
    holder still delivers until the stop order reaches it, and a stream created again under
    the same id could then be acquired beside it. ``StreamHeld`` names the holder: stop the
    stream first and delete it once released (``holdfast rm`` does).
    """
    kwargs: dict[str, Any] = {}
    if not held_too:
        kwargs = {"ConditionExpression": "attribute_not_exists(#owner)",
                  "ExpressionAttributeNames": {"#owner": ATTR.lease_owner},
                  "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    try:
        resp = call("delete_stream", client.delete_item, TableName=table,
                    Key={ATTR.pk: {"S": pk_for(conn_id)}}, ReturnValues="ALL_OLD", **kwargs)
    except ConditionFailed as failed:
        owner = (failed.item or {}).get(ATTR.lease_owner, {}).get("S", "?")
        raise StreamHeld(conn_id, str(owner)) from None
    return resp.get("Attributes") or None


def scan_items(client: DynamoDBClient, table: str) -> Iterator[LeaseItem | MalformedItem]:
    """Every item of the table, parsed; malformed ones come back as ``MalformedItem`` values."""
    for resp in pages("scan", client.scan, TableName=table):
        for raw in resp.get("Items", []):
            try:
                yield LeaseItem.from_ddb(raw)
            except MalformedItem as bad:
                yield bad
