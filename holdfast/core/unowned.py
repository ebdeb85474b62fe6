"""How long a stream was unowned before its claim: the marker un-owning writes leave, and the
pure function that turns it into the ``UnownedTime`` metric at the next acquire.

Every write that hands a wanted stream back leaves a marker on the item in the same
UpdateItem: when it became unowned (``unowned_since_ms``), the epoch it was un-owned at
(``unowned_epoch``, copied from ``lease_epoch``) and the desired state at that moment
(``unowned_desired_state``, copied from ``desired_state``). The writers:

- the worker's release (``LeaseStore.release``): now. A give-up after upstream errors leaves
  no marker: it is unowned on purpose until its retry time, and a stream stopped during that
  back-off and started much later must not count the whole pause;
- the sweeper's release of a dead or ended session's stream (``SessionStore.release_owned``):
  the session's last heartbeat, the last moment its holder was known to serve it;
- ``holdfast start``: the creation time at epoch 0, so a first claim is measured too.

The acquire that follows (a higher epoch, ``ReturnValues=ALL_OLD``) measures claim time -
since, but only if the marker was written at the epoch it replaces and the stream was STARTED
when it was written. Not measured, because nothing marks when they became unowned: a
quarantined one, a stream inserted by hand (``aws dynamodb put-item``) before its first claim, and a
stream released while STOPPED (its pause is not a handover). One case is measured wrongly: a
stream stopped and started again in the instant between a release and the next claim counts
its pause; the alarm watches p99, which one such sample rarely moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from holdfast.core.model import int_attr, str_attr
from holdfast.core.schema import ATTR, STARTED

__all__ = ["MARK_COPIES", "MARK_NAMES", "creation_marker", "unowned_time_ms"]

# The marker's copies (target, source, default if the source is missing), for
# ``expressions.WriteClauses`` beside ``unowned_since_ms`` = when. A default because a copy
# from a missing attribute fails the whole write: a release must never fail for a metric.
MARK_COPIES: Final = ((ATTR.unowned_epoch, ATTR.epoch, {"N": "0"}),
                      (ATTR.unowned_desired_state, ATTR.desired_state, {"S": "UNKNOWN"}))
MARK_NAMES: Final = {"#us": ATTR.unowned_since_ms, "#ue": ATTR.unowned_epoch,
                     "#uds": ATTR.unowned_desired_state, "#epoch": ATTR.epoch,
                     "#ds": ATTR.desired_state}


def creation_marker(now_ms: int) -> dict[str, dict[str, str]]:
    """The marker attributes of a stream created STARTED at ``now_ms`` (never acquired)."""
    return {ATTR.unowned_since_ms: {"N": str(now_ms)}, ATTR.unowned_epoch: {"N": "0"},
            ATTR.unowned_desired_state: {"S": STARTED}}


def unowned_time_ms(item: Mapping[str, Any], claimed_at_ms: int, skew_ms: int) -> int | None:
    """Milliseconds the stream in ``item`` (as it was just before the acquire) was unowned.

    None unless the marker was written at the item's epoch (an older marker belongs to an
    earlier handover; a missing epoch is 0, a created item's) while the stream was STARTED. A
    marker that another host's clock put up to ``skew_ms`` after ``claimed_at_ms`` counts as 0
    (the handover was about instant, and dropping it would bias the percentiles upwards); one
    further in the future says nothing and is dropped. A missing or mistyped attribute is
    None, never an error: the metric must not cost the claim.
    """
    epoch = int_attr(item, ATTR.epoch) or 0
    since = int_attr(item, ATTR.unowned_since_ms)
    if since is None or int_attr(item, ATTR.unowned_epoch) != epoch:
        return None
    if str_attr(item, ATTR.unowned_desired_state) != STARTED:
        return None
    took = claimed_at_ms - since
    if took < -skew_ms:
        return None
    return max(0, took)
