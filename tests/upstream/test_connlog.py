"""The upstream's connection log: overlapping connections of a stream, and the closing grace."""

from __future__ import annotations

from holdfast.upstream.connlog import ConnLog


def test_a_closing_handshake_overlap_within_the_grace_is_not_reported() -> None:
    """The first connection closing within the grace after the second opened is not an
    overlap (a release before the closing handshake); closing later, or never, is."""
    log = ConnLog()
    a = log.opened("s", "/s/s", "c1", "w1", None)
    b = log.opened("s", "/s/s", "c2", "w2", 5)
    log.closed(a)
    assert [o.first.conn_no for o in log.overlaps()] == [0]
    assert log.overlaps(closing_grace_ms=10_000) == []
    log.opened("t", "/s/t", "c3", "w1", None)
    log.opened("t", "/s/t", "c4", "w2", 5)  # the first never closes: still an overlap
    assert [o.stream_id for o in log.overlaps(closing_grace_ms=10_000)] == ["t"]
    a.closed_ns = b.opened_ns + 20_000_000_000  # closed 20 s after: past a 10 s grace
    assert [o.stream_id for o in log.overlaps(closing_grace_ms=10_000)] == ["s", "t"]
