"""The hot-key model: busiest partition keys, units per connection-hour, failover pacing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.hotkeys import (
    DOCUMENTED,
    PARTITION_WCU_LIMIT,
    Fleet,
    failover,
    pace_for_limit,
    per_connection_hour,
    steady,
    units_from_capacity,
)

MEASURED = Path(__file__).resolve().parents[2] / "bench" / "results" / "capacity.json"
BIG = Fleet()  # 100,000 streams on 1,000 workers


def test_seed_at_2500_connections_fills_the_started_partition() -> None:
    """2,500 streams renewed every 5 s: 500 moves/s x 2 index units = 1,000 WCU/s on STARTED
    (1,500 WCU/s with the table's own write, which lands on 2,500 different keys)."""
    load = steady("seed", Fleet(streams=2500, workers=25, seed_heartbeat_s=5.0))
    assert load.started_key == pytest.approx(1000.0)
    assert load.total_wcu_s == pytest.approx(1500.0)
    assert load.lease_key == pytest.approx(0.2)
    assert load.hot() == []
    assert steady("seed", Fleet(streams=2600, workers=26)).hot() == ["started_key"]


def test_seed_at_scale_is_forty_times_over() -> None:
    """100,000 streams at a 5 s heartbeat put 40,000 WCU/s on STARTED."""
    load = steady("seed", BIG)
    assert load.started_key == pytest.approx(40_000.0)
    assert load.started_key / PARTITION_WCU_LIMIT == pytest.approx(40.0)


def test_sessions_put_only_backstop_refreshes_on_started() -> None:
    """Checkpoints touch no index key: STARTED carries only the half-hourly backstop refresh
    (2 units per stream per 1,800 s), and nothing without it."""
    load = steady("sessions", BIG)
    assert load.started_key == pytest.approx(2 * 100_000 / 1800)
    assert steady("sessions", Fleet(checkpoint_s=5.0)).started_key == pytest.approx(
        load.started_key)
    assert steady("sessions", Fleet(backstop_ms=10**15)).started_key == pytest.approx(0.0,
                                                                                     abs=1e-6)
    assert load.owner_key == 0.0
    assert load.session_key == pytest.approx(0.5)  # one heartbeat per 2 s per worker
    assert load.lease_key == pytest.approx(1 / 20)


def test_units_per_connection_hour() -> None:
    """Seed: 720 heartbeats x 3 units = 2,160. Sessions: 180 checkpoints (2 of them backstop
    refreshes, +2 index units each) and 1,800 session heartbeats shared by 100 streams = 202."""
    seed = per_connection_hour("seed", BIG)
    assert seed["total"] == 2160.0 and seed["seed_index"] == 1440.0
    ours = per_connection_hour("sessions", BIG)
    assert ours == {"lease_table": 180.0, "seed_index": 4.0, "owner_index": 0.0,
                    "session_table": 18.0, "total": 202.0, "reads": pytest.approx(0.792)}
    idle = per_connection_hour("sessions", Fleet(active_share=0.0))
    assert idle["lease_table"] == 2.0 and idle["seed_index"] == 4.0


def test_failover_pacing_keeps_started_under_the_limit() -> None:
    """With ~111 WCU/s of backstops on STARTED and 4 index units per moved stream, ~222
    releases and claims per second fill the partition; 10,000 streams then move in 45 s."""
    paced = pace_for_limit("sessions", BIG)
    assert paced is not None and paced.within_limit
    assert paced.releases_s == pytest.approx((1000 - 2 * 100_000 / 1800) / 4)
    assert paced.moved == 10_000 and paced.duration_s == pytest.approx(45.0)
    assert paced.load.started_key == pytest.approx(1000.0)
    faster = failover("sessions", BIG, 300, 300)
    assert not faster.within_limit and faster.load.hot() == ["started_key"]
    half = pace_for_limit("sessions", BIG, headroom=0.5)
    assert half is not None and half.duration_s > 2 * paced.duration_s


def test_failover_claims_cannot_outpace_releases() -> None:
    """Claims wait for releases; the dead owner's key takes every release of its session."""
    result = failover("sessions", BIG, releases_s=50, claims_s=500)
    assert result.claims_s == 50 and result.duration_s == pytest.approx(200.0)
    assert result.load.owner_key == pytest.approx(50.0)
    assert result.load.started_key == pytest.approx(steady("sessions", BIG).started_key + 200)


def test_seed_failover_has_no_safe_pace() -> None:
    """The seed's steady state is already over the limit, so no failover pace is safe."""
    assert pace_for_limit("seed", BIG) is None
    moving = failover("seed", BIG, 100, 100)
    assert not moving.within_limit and moving.load.session_key == 0.0
    assert moving.load.started_key == pytest.approx(40_000 + 400)
    small = pace_for_limit("seed", Fleet(streams=1000, workers=10))
    assert small is not None and small.releases_s == pytest.approx((1000 - 400) / 4)


def test_units_from_capacity_json() -> None:
    """The model reads bench.capacity's JSON; a missing operation is an error."""
    doc = {"ops": {name: {"units": {"lease_table": 1.0, "seed_index": 2.0}, "total": 3.0}
                   for name in ("session_heartbeat", "checkpoint", "backstop_refresh", "acquire",
                                "release", "session_mark_dead", "seed_heartbeat")}}
    doc["ops"].update(sweeper_scan={"total": 4.0, "items": 200}, orphan_query={"total": 0.0},
                      owner_query={"total": 1.5})
    units = units_from_capacity(doc)
    assert units.checkpoint.total == 3.0 and units.scan_per_1000_sessions == 20.0
    assert units.orphan_query == 0.5 and units.owner_query == 1.5
    del doc["ops"]["release"]
    with pytest.raises(KeyError):
        units_from_capacity(doc)


@pytest.mark.skipif(not MEASURED.exists(), reason="run python -m bench.capacity first")
def test_measured_units_match_the_documented_rules() -> None:
    """The committed DynamoDB Local measurement agrees with AWS's documented rules."""
    assert units_from_capacity(json.loads(MEASURED.read_text())) == DOCUMENTED
