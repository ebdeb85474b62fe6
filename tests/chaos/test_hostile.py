"""The soak's hostile items: each is refused by the item parser or the URL policy."""

from __future__ import annotations

import pytest

from holdfast.chaos.hostile import hostile_items
from holdfast.core import names
from holdfast.core.exceptions import MalformedItem, UnsafeUrl
from holdfast.core.model import LeaseItem
from holdfast.core.urls import check_url, policy_from_env

# As on the local fleet: loopback upstreams allowed, so only a hostile item is refused.
LOOPBACK = policy_from_env({names.ENV_ALLOWED_HOSTS: "127.0.0.1"})


@pytest.mark.parametrize("cid", sorted(hostile_items("CONN#", "ws://127.0.0.1:9")))
def test_every_hostile_item_is_unusable(cid: str) -> None:
    """No hostile item parses into a lease a worker could connect: the item parser or the
    worker's URL policy refuses each (the soak checks none ends up RUNNING)."""
    raw = hostile_items("CONN#", "ws://127.0.0.1:9")[cid]
    with pytest.raises((MalformedItem, UnsafeUrl)):
        check_url(LeaseItem.from_ddb(raw).ws_url, LOOPBACK)


def test_a_usable_item_passes_the_same_checks() -> None:
    """The checks above accept a well-formed item with a loopback URL (so they can fail)."""
    raw = {"Pk": {"S": "CONN#good"}, "desired_state": {"S": "STARTED"},
           "ws_url": {"S": "ws://127.0.0.1:9/s/good"}}
    assert check_url(LeaseItem.from_ddb(raw).ws_url, LOOPBACK)
