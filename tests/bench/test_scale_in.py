"""The scale-in's report section."""

from __future__ import annotations

from bench.scale_in import scale_in_md


def test_the_section_has_a_row_per_design_and_says_which_failed() -> None:
    """Ours with its figures, the seed's failure named; the target under the table."""
    gap = {"n": 97, "p50": 0.11, "p99": 0.26, "max": 0.26}
    md = "\n".join(scale_in_md({
        "workers": 3, "streams_per_worker": 100, "shutdown_s": 25.0, "target_added_p99_s": 0.1,
        "ours": {"held": 97, "moves": 97, "gap_s": gap, "added_s": gap, "not_moving_s": gap,
                 "handed_over": 97, "released": 0, "stop_s": 8.0, "duplicates": 0, "lost": 0},
        "baseline": {"error": "RuntimeError: boom"}}))
    seed = "\n".join(scale_in_md({"baseline": {"held": 100, "moves": 100, "gap_s": gap,
                                                "handed_over": None, "stop_s": None}}))
    assert "| 97 / 97 | 0.11 / 0.26 / 0.26 (n=97) |" in md
    assert "| 97 / 0 | 8.0 s | 0 / 0 |" in md
    assert "**Failed: RuntimeError: boom**" in md
    assert "added p99 <= 0.1 s" in md
    assert "| - | - |" in seed  # the seed's program logs no handoffs and no stop
