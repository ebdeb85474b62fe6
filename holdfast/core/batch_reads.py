"""Read many lease items in few round trips: ``BatchGetItem``, strongly consistent.

For the callers that must read several items at once and can take "not read" for an answer:
a batch release settling the statements whose outcome it does not know
(``holdfast.core.batch_endings``), and a successor looking for the transfers of the
handoffs it is warming up for (``worker.warmups``; one call for all of them instead of one
GetItem each: with three workers stopping at once, up to 20 warm handoffs each, 67 of 300
warm-ups missed the 3 s READY wait).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

from holdfast.core.aws import call
from holdfast.core.exceptions import ConfigError, HoldfastError
from holdfast.core.model import str_attr
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore

__all__ = ["GET_BATCH_LIMIT", "read_raw_many"]

log = logging.getLogger(__name__)

GET_BATCH_LIMIT: Final = 100  # BatchGetItem's most keys per call


def read_raw_many(store: LeaseStore, conn_ids: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """The items of ``conn_ids`` as stored (None: no such item). A stream missing from the
    answer was not read: the call failed, or its key was left unprocessed twice."""
    asked = {pk_for(c): c for c in conn_ids}
    pks = list(asked)
    out: dict[str, dict[str, Any] | None] = {}
    for i in range(0, len(pks), GET_BATCH_LIMIT):
        keys: list[Any] = [{ATTR.pk: {"S": pk}} for pk in pks[i:i + GET_BATCH_LIMIT]]
        try:
            for _ in range(2):  # one call, and one for leftovers
                resp: Any = call("BatchGetItem", store.client.batch_get_item, RequestItems={
                    store.table: {"Keys": keys, "ConsistentRead": True}})
                for item in resp.get("Responses", {}).get(store.table, []):
                    out[asked[str_attr(item, ATTR.pk) or ""]] = dict(item)
                keys = list(resp.get("UnprocessedKeys", {}).get(store.table, {}).get("Keys", []))
                if not keys:
                    break
        except ConfigError as exc:
            # Refused for good (a role without dynamodb:BatchGetItem): every caller falls back
            # to a slower path, so it is said, once per call, never silently.
            log.error("lease items cannot be read in a batch: %s", str(exc)[:300])
            continue
        except HoldfastError:
            continue  # what this chunk's calls did not return is not read (nor absent)
        left = {k[ATTR.pk]["S"] for k in keys}
        out.update((asked[pk], None) for pk in pks[i:i + GET_BATCH_LIMIT]
                   if asked[pk] not in out and pk not in left)
    return out
