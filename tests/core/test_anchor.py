"""A new stream's anchor from another URL's upstream: recognised from the acquire's answer."""

from __future__ import annotations

from holdfast.core.anchor import Anchor, anchored_elsewhere, unanchor_expression
from holdfast.core.schema import ATTR

URL = "wss://feeds.example.test/a"


def test_an_anchor_is_elsewhere_only_if_written_for_another_url() -> None:
    """Written (the item had no checkpoint) for an item naming another URL: elsewhere; the same
    URL, a stored checkpoint (kept, the anchor not written) or no anchor: not."""
    fresh = {ATTR.ws_url: {"S": URL}}
    moved = {ATTR.ws_url: {"S": "wss://feeds.example.test/b"}}
    assert anchored_elsewhere(moved, Anchor(6, URL))
    assert not anchored_elsewhere(fresh, Anchor(6, URL))
    assert not anchored_elsewhere({**moved, ATTR.last_seq: {"N": "41"}}, Anchor(6, URL))
    assert not anchored_elsewhere(moved, None)
    # Our own anchor, written by an earlier acquire whose answer was lost: elsewhere only then.
    ours = {**moved, ATTR.last_seq: {"N": "6"}}
    assert anchored_elsewhere(ours, Anchor(6, URL), maybe_written=True)
    assert not anchored_elsewhere(ours, Anchor(6, URL))
    assert not anchored_elsewhere({**moved, ATTR.last_seq: {"N": "7"}}, Anchor(6, URL),
                                  maybe_written=True)


def test_the_correction_is_its_holders_and_only_of_that_anchor() -> None:
    """The removal is conditioned on the acquire's owner and epoch and on the anchor itself."""
    update, condition, values = unanchor_expression("w1#a", 7, 6)
    assert update == "REMOVE #seq"
    assert condition == "#owner = :me AND #epoch = :epoch AND #seq = :first"
    assert values == {":me": {"S": "w1#a"}, ":epoch": {"N": "7"}, ":first": {"N": "6"}}
