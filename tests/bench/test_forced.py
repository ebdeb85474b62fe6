"""The forced-release bench's per-stream figures and its report section (no fleet)."""

from __future__ import annotations

from bench.forced import _per_stream, forced_release_md
from holdfast.chaos.evidence import ConnSpan


def _span(no: int, open_ms: int, close_ms: int | None) -> ConnSpan:
    return ConnSpan(no, "s", "w", open_ms * 10**6, open_ms, close_ms and close_ms * 10**6,
                    close_ms)


def test_a_new_connection_after_the_old_one_closed_is_no_overlap() -> None:
    """The holder's old connection closed before the new one opened: let go, no overlap."""
    assert _per_stream([_span(1, 0, 1_300), _span(2, 1_500, None)], 1_000) == (
        1_300, 1_500, 0.0)


def test_two_connections_open_at_once_is_an_overlap() -> None:
    """A new connection opened while the old one was still open counts its overlap."""
    assert _per_stream([_span(1, 0, 3_000), _span(2, 1_500, None)], 1_000) == (
        3_000, 1_500, 1.5)


def test_an_old_connection_still_open_has_not_let_go() -> None:
    """While the holder's connection is open the stream has not been let go."""
    assert _per_stream([_span(1, 0, None)], 1_000) == (None, None, 0.0)


def test_the_report_says_the_seed_never_shows_unowned() -> None:
    """The seed keeps the owner, so its row says so instead of a distribution."""
    d = {"n": 2, "p50": 0.2, "p99": 0.3, "max": 0.3}
    md = "\n".join(forced_release_md({
        "streams": 2, "target_unowned_p99_s": 1.0, "verdict": "met",
        "ours": {"let_go_s": d, "unowned_s": d, "handled_again_s": d,
                 "overlapping_streams": 0, "overlap_max_s": 0.0, "not_handled_again": 0},
        "baseline": {"let_go_s": d, "handled_again_s": d, "overlapping_streams": 2,
                     "overlap_max_s": 4.1, "not_handled_again": 0}}))
    assert "never (owner kept)" in md and "| 2 (4.1) |" in md and "**met**" in md
