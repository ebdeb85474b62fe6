"""Event-source-mapping filter patterns for the router: data shared by ``infra/`` and the runner.

Every heartbeat is a MODIFY record that keeps ``lease_owner`` set, so a record can only need a
nudge when its new image is STARTED and (a) it is an INSERT, or (b) it has no owner (released,
given up after upstream errors, stopped → started while unowned, normalised). Both patterns
match the DynamoDB-JSON shape of the stream record. ``exists`` works on leaf nodes only, hence
``lease_owner.S``.

The router's pure decision function must never want a record these patterns drop; a property
test over generated images checks that with an independent matcher.
"""

from __future__ import annotations

import json
from typing import Any, Final

from holdfast.core.schema import ATTR, STARTED

__all__ = ["FILTER_PATTERNS", "filter_criteria"]

FILTER_PATTERNS: Final[tuple[dict[str, Any], ...]] = (
    {
        "eventName": ["INSERT"],
        "dynamodb": {"NewImage": {ATTR.desired_state: {"S": [STARTED]}}},
    },
    {
        "eventName": ["MODIFY"],
        "dynamodb": {"NewImage": {
            ATTR.desired_state: {"S": [STARTED]},
            ATTR.lease_owner: {"S": [{"exists": False}]},
        }},
    },
)


def filter_criteria() -> dict[str, list[dict[str, str]]]:
    """The patterns as a Lambda ``FilterCriteria`` value (each pattern a JSON string)."""
    return {"Filters": [{"Pattern": json.dumps(p, sort_keys=True)} for p in FILTER_PATTERNS]}
