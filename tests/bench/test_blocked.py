"""The blocked-handler bench's report: delays against the quiet baseline, and the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.blocked import blocked_handler_md

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _dist(p99: float) -> dict[str, Any]:
    return {"n": 8, "p50": p99, "p99": p99, "max": p99}


def _run(blocked_claim_s: float, beat_max_s: float) -> dict[str, Any]:
    quiet = {"claim_s": _dist(0.3), "first_message_s": _dist(0.7), "release_s": _dist(0.4),
             "missing": 0}
    blocked = {**quiet, "claim_s": _dist(blocked_claim_s)}
    return {"blockers": 8, "block_s": 20.0, "free": 8, "quiet": quiet, "blocked": blocked,
            "heartbeat_period_s": 1.0, "heartbeat_interval_quiet_s": _dist(1.0),
            "heartbeat_interval_blocked_s": {"n": 19, "p50": 1.0, "p99": 1.0,
                                             "max": beat_max_s}}


def test_a_claim_delayed_past_half_a_second_is_not_met() -> None:
    """0.2 s more than quiet is met; 18 s more (the old default-executor claims) is not."""
    assert "**met**" in "\n".join(blocked_handler_md(_run(0.5, 1.0)))
    text = "\n".join(blocked_handler_md(_run(18.5, 1.0)))
    assert "**NOT met**" in text and "+18.20" in text


def test_a_late_heartbeat_is_not_met() -> None:
    """A heartbeat interval 0.6 s over its period fails the target."""
    assert "**NOT met**" in "\n".join(blocked_handler_md(_run(0.3, 1.6)))


def test_the_recorded_runs_say_before_and_after() -> None:
    """The stored runs: the code before worker.iothreads fails, today's meets."""
    before = json.loads((RESULTS / "2026-12-02-blocked-handler-before.json").read_text())
    after = json.loads((RESULTS / "2026-12-02-blocked-handler.json").read_text())
    assert "**NOT met**" in "\n".join(blocked_handler_md(before))
    assert "**met**" in "\n".join(blocked_handler_md(after["blocked_handler"]))
