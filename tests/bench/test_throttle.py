"""The throttle scenario's report section: what it ran at and its verdicts."""

from __future__ import annotations

from bench.throttle import throttle_md


def test_the_report_says_its_checkpoint_period_and_judges_fences_and_rate() -> None:
    """A run at 20 s checkpoints says so (2 s is the bench's default), and a fence fails it."""
    figures = {"streams": 4, "plan": {"partial_s": 5, "partial_fraction": 0.5, "full_s": 2},
               "timing": {"lease_s": 4, "heartbeat_s": 1, "skew_ms": 250, "margin_ms": 400,
                          "checkpoint_s": 20.0},
               "tolerated": False,
               "runs": [{"fences": 0, "owners_kept": True, "rate_ratio": 1.4,
                         "after_ratio": 1.0},
                        {"fences": 1, "owners_kept": True, "rate_ratio": 1.6,
                         "after_ratio": 0.9}]}
    text = "\n".join(throttle_md(figures))
    assert "checkpoints every 20.0 s" in text
    assert "| 2 | 1 | 2 of 2 runs | 1.40-1.60 | 0.90-1.00 |" in text
    assert "NOT met (fences)" in text and "rate met" in text
