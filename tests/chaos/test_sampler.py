"""The sampler's owner verdict, from raw session items (pure: no DynamoDB, no clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from holdfast.chaos.evidence import Sample
from holdfast.chaos.sampler import Sampler, owner_down_ms, session_items

NOW = 1_000_000


def _session(worker: str, inc: str, state: str, expires: int, ended: int | None = None,
             started: int | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"Pk": {"S": f"WORKER#{worker}"}, "incarnation": {"S": inc},
                           "session_state": {"S": state},
                           "session_expires_at_ms": {"N": str(expires)}}
    if ended is not None:
        raw["ended_at_ms"] = {"N": str(ended)}
    if started is not None:
        raw["started_at_ms"] = {"N": str(started)}
    return raw


SESSIONS = session_items([
    _session("live", "i1", "ALIVE", NOW + 3_000),
    _session("late", "i1", "ALIVE", NOW - 400),  # within the skew: still live
    _session("quiet", "i1", "ALIVE", NOW - 2_000),
    _session("swept", "i1", "DEAD", NOW - 5_000, ended=NOW - 3_000),
    _session("bye", "i1", "ENDED", NOW + 3_000, ended=NOW - 1_000),
    _session("again", "i2", "ALIVE", NOW + 3_000, started=NOW - 700),
])


def test_owner_down_since_follows_the_session_item() -> None:
    """Live owners are None; silent, dead, ended and replaced ones are down since the time the
    session item gives; an owner no session names is down since first seen so."""
    def down(owner: str) -> int | None:
        return owner_down_ms(owner, SESSIONS.get(owner.partition("#")[0]), NOW, 500, NOW - 50)

    assert down("live#i1") is None and down("late#i1") is None
    assert down("quiet#i1") == NOW - 2_000  # its expiry: its fence had passed
    assert down("swept#i1") == NOW - 5_000  # declared dead for silence: since its expiry
    assert down("bye#i1") == NOW - 1_000  # a goodbye ends it at once
    assert down("again#i1") == NOW - 700  # replaced: since the new incarnation started
    assert down("ghost#i1") == NOW - 50 and down("no-hash") == NOW - 50


def test_sampler_remembers_when_it_first_saw_an_owner_without_a_session(
        tmp_path: Path) -> None:
    """A vanished session's owner is down since the first scan that missed it; the memory is
    dropped once the owner is gone from the table."""
    sampler = Sampler(None, "t", tmp_path / "s.jsonl", session_table="s", skew_ms=500)

    def scan(at: int, owner: str | None) -> Sample:
        (s,) = sampler.judge_owners([Sample(at, "c1", "STARTED", owner, at + 3_600_000, 1,
                                            "RUNNING", 1, at)], SESSIONS, at)
        return s

    assert scan(NOW, "live#i1").owner_down_ms is None
    assert scan(NOW + 250, "ghost#i1").owner_down_ms == NOW + 250
    assert scan(NOW + 500, "ghost#i1").owner_down_ms == NOW + 250
    assert scan(NOW + 750, None).owner_down_ms is None
    assert scan(NOW + 1000, "ghost#i1").owner_down_ms == NOW + 1000
    assert scan(NOW + 1250, "swept#i1").live_owner() is None
