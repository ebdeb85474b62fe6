"""What a refused or unanswered lease write's item says (``holdfast.core.judgements``): pure,
on items as DynamoDB returns them."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core import rules
from holdfast.core.exceptions import LeaseLost, LossReason
from holdfast.core.judgements import loss_of, overtaken, refused_renewal, release_loss
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR

LEASE = Lease("c1", "w1", 7, 10_000, "ws://127.0.0.1:9/s/c1", 5)


def item(owner: str | None = "w1", epoch: int = 7, expires: int = 10_000, seq: int = 5,
         state: str = "STARTED") -> dict[str, Any]:
    raw: dict[str, Any] = {ATTR.pk: {"S": "CONN#c1"}, ATTR.desired_state: {"S": state},
                           ATTR.ws_url: {"S": LEASE.ws_url}, ATTR.epoch: {"N": str(epoch)},
                           ATTR.lease_expires_at_ms: {"N": str(expires)},
                           ATTR.last_seq: {"N": str(seq)}}
    if owner is not None:
        raw[ATTR.lease_owner] = {"S": owner}
    return raw


def test_loss_of_tells_gone_malformed_taken_stopped_and_ours_apart() -> None:
    """None: ours; the item gone, malformed, another owner or epoch, or STOPPED: why not."""
    assert loss_of(LEASE, item()) is None
    assert loss_of(LEASE, None) is LossReason.DELETED
    assert loss_of(LEASE, {**item(), ATTR.epoch: {"S": "seven"}}) is LossReason.INVALID
    assert loss_of(LEASE, item(owner="w2")) is LossReason.LOST
    assert loss_of(LEASE, item(epoch=8)) is LossReason.LOST
    assert loss_of(LEASE, item(state="STOPPED")) is LossReason.STOPPED


def test_a_release_landed_is_none_and_any_other_says_why() -> None:
    """Landed: released (None); lost: the item's reason, LOST when it names none."""
    assert release_loss(LEASE, None, rules.ReleaseFound.LANDED) is None
    assert release_loss(LEASE, item(owner="w2"), rules.ReleaseFound.LOST) is LossReason.LOST
    assert release_loss(LEASE, {**item(owner="w2"), ATTR.epoch: {"S": "x"}},
                        rules.ReleaseFound.LOST) is LossReason.INVALID


def test_a_renewal_overtaken_by_a_later_one_of_ours_counts_as_renewed() -> None:
    """Ours with a later expiry stored: renewed, as stored; an earlier expiry, a checkpoint
    write (no expiry) or another owner: not overtaken."""
    later = overtaken(LEASE, item(expires=20_000, seq=9), 15_000, 8)
    assert later is not None and (later.expires_at_ms, later.last_seq) == (20_000, 9)
    assert overtaken(LEASE, item(expires=12_000, seq=9), 15_000, 8) is None
    assert overtaken(LEASE, item(expires=20_000, seq=9), None, 8) is None
    assert overtaken(LEASE, item(owner="w2", expires=20_000), 15_000, 8) is None


def test_a_refused_renewal_still_ours_but_not_overtaken_is_a_regression() -> None:
    """Ours, STARTED, not overtaken (the stored checkpoint moved past ours): REGRESSION;
    another owner: LOST."""
    with pytest.raises(LeaseLost) as ours:
        refused_renewal(LEASE, item(seq=1_000), 15_000, 8)
    assert ours.value.reason is LossReason.REGRESSION
    with pytest.raises(LeaseLost) as taken:
        refused_renewal(LEASE, item(owner="w2"), 15_000, 8)
    assert taken.value.reason is LossReason.LOST
