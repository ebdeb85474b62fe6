"""Event-source-mapping filter patterns for the router: data shared by ``infra/`` and the runner.

Every checkpoint is a MODIFY record that keeps ``lease_owner`` set, so a record mostly needs a
nudge when its new image is STARTED and has no owner: an insert, a release, a give-up after
upstream errors, STOPPED -> STARTED while unowned, a normalisation. One pattern says exactly
that; REMOVE records have no new image, so they never match. ``exists`` works on leaf nodes
only, hence ``lease_owner.S``. One more lets an owned STARTED item through, which no
heartbeat, checkpoint or acquisition can produce (those keep STARTED and a non-zero expiry):
expiry exactly 0 with an owner, the seed's ``release_lease`` and an operator's forced handover,
which the router turns into a release order to the holder. DynamoDB streams carry numbers as
canonical strings, so ``{"N": ["0"]}`` is an exact string match (never ``numeric``, which does
not apply to a string). Two more pass a held stream's stop and deletion (orders too), the
second also a write that removed a holding outside the protocol (its holder is ordered to
take it back, or to stop). The fifth passes such a write repeated as STOPPED while the router
holds the stream for the take-back (held again).

Lambda allows 5 filters per event source mapping by default; these are 5 (a sixth needs a
quota increase, or a pattern folded into another).

The pattern deliberately uses only the ``dynamodb`` key of the record (no ``eventName``): AWS
documents that DynamoDB event source mappings filter on that key, and the router skips an
INSERT that already has an owner anyway, so an ``eventName`` condition would add nothing.

The router's pure decision function must never want a record these patterns drop; a property
test over generated images checks that with an independent matcher.
"""

from __future__ import annotations

import json
from typing import Any, Final

from holdfast.core.schema import ATTR, STARTED, STOPPED

__all__ = ["FILTER_PATTERNS", "filter_criteria"]

FILTER_PATTERNS: Final[tuple[dict[str, Any], ...]] = (
    {
        "dynamodb": {"NewImage": {
            ATTR.desired_state: {"S": [STARTED]},
            ATTR.lease_owner: {"S": [{"exists": False}]},
        }},
    },
    # Freed in place: expiry 0, owner left (the router skips it if it was 0 already).
    {
        "dynamodb": {"NewImage": {
            ATTR.desired_state: {"S": [STARTED]},
            ATTR.lease_expires_at_ms: {"N": ["0"]},
            ATTR.lease_owner: {"S": [{"exists": True}]},
        }},
    },
    # A held stream set STOPPED: the router orders its holder's session to stop it.
    {
        "dynamodb": {"NewImage": {
            ATTR.desired_state: {"S": [STOPPED]},
            ATTR.lease_owner: {"S": [{"exists": True}]},
        }},
    },
    # A held stream deleted (a REMOVE record has no new image), or its holding removed: a
    # release, or a write outside the protocol over it (an app's PutItem of the whole item,
    # STOPPED too: its holder is ordered to take it back or stop, ``core.overwrites``).
    {
        "dynamodb": {"OldImage": {ATTR.lease_owner: {"S": [{"exists": True}]}},
                     "NewImage": {ATTR.lease_owner: {"S": [{"exists": False}]}}},
    },
    # A stream held for its holder's take-back (no owner, no ``status``, which every write of
    # the protocol sets, and the hold's expiry) written over again as STOPPED: held again
    # (``core.overwrites.take_back_hold``), or set STARTED before the take-back it would be
    # nudged at once. A never-claimed stream's expiry is 0 (normalised) or none: it does not
    # pass.
    {
        "dynamodb": {
            "OldImage": {
                ATTR.lease_owner: {"S": [{"exists": False}]},
                ATTR.status: {"S": [{"exists": False}]},
                ATTR.lease_expires_at_ms: {"N": [{"anything-but": ["0"]}]},
            },
            "NewImage": {
                ATTR.desired_state: {"S": [STOPPED]},
                ATTR.lease_owner: {"S": [{"exists": False}]},
                ATTR.status: {"S": [{"exists": False}]},
            },
        },
    },
)


def filter_criteria() -> dict[str, list[dict[str, str]]]:
    """The patterns as a Lambda ``FilterCriteria`` value (each pattern a JSON string)."""
    return {"Filters": [{"Pattern": json.dumps(p, sort_keys=True)} for p in FILTER_PATTERNS]}
