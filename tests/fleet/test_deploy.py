"""The deploy scenario's figures (moves, gaps, duplicates, lost seqs) from synthetic logs and
records; and, separately, one smoke run of ``holdfast up --scenario deploy`` on a real fleet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from holdfast.fleet.deploy import (
    DeployReport,
    Gap,
    OwnerChange,
    added_delays,
    delivery_gaps,
    deploy_report,
    duplicate_deliveries,
    last_deliverers,
    lost_seqs,
    moves_per_stream,
    onto_old,
    owner_changes,
    steady_gaps,
)
from holdfast.fleet.moves import Claim, claims_from_logs
from holdfast.fleet.procs import REPO_ROOT
from holdfast.fleet.recorder import Handled
from tests.conftest import TIMEOUT_SCALE


def line(msg: str, worker: str, conn: str, ms: int) -> str:
    stamp = f"2026-12-01 22:36:{ms // 1000:02d},{ms % 1000:03d}+0000"
    return json.dumps({"level": "INFO", "message": msg, "timestamp": stamp,
                       "worker_id": worker, "conn_id": conn})


def base_ms(ms: int) -> int:
    """The epoch ms of ``line``'s stamp ``ms`` (its minute is fixed)."""
    return claims_from_logs([line("claimed", "w", "x", ms)])[0].wall_ms


def delivered(conn: str, worker: str, seqs: range, start_ms: int,
              step_ms: int = 100) -> list[Handled]:
    return [Handled(conn, s, worker, start_ms + i * step_ms) for i, s in enumerate(seqs)]


def test_claims_from_logs_keeps_only_claimed_lines() -> None:
    """Only "claimed" lines with a stream, a worker and a stamp; in time order."""
    lines = [line("claimed", "w2", "a", 2000), line("claimed", "w1", "a", 1000),
             line("shedding stream (rebalancing)", "w1", "a", 1500),
             line("claimed by someone", "w1", "a", 1600), "not json", '"claimed"',
             json.dumps({"message": "claimed", "conn_id": "a", "worker_id": "w1"})]
    claims = claims_from_logs(lines)
    assert [(c.conn_id, c.worker) for c in claims] == [("a", "w1"), ("a", "w2")]
    assert claims[1].wall_ms - claims[0].wall_ms == 1000


def test_owner_changes_in_the_window() -> None:
    """A claim by another worker in the window is a change; a claim before it sets the owner,
    a same-worker re-claim and a claim after the window are not changes."""
    claims = [Claim("a", "w1", 100), Claim("a", "w2", 1000), Claim("a", "w2", 1100),
              Claim("a", "w3", 5000), Claim("b", "w1", 200), Claim("b", "w1", 1200),
              Claim("c", "w4", 1300), Claim("d", "w1", 50), Claim("d", "w2", 300)]
    assert owner_changes(claims, 500, 4000) == [OwnerChange("a", "w1", "w2", 1000)]
    assert owner_changes(claims, 0, 6000) == [OwnerChange("d", "w1", "w2", 300),
                                              OwnerChange("a", "w1", "w2", 1000),
                                              OwnerChange("a", "w2", "w3", 5000)]


def test_moves_per_stream_counts_streams_that_never_moved() -> None:
    """Every stream is counted, 0 for one that never moved."""
    changes = [OwnerChange("a", "w1", "w2", 1), OwnerChange("a", "w2", "w3", 2),
               OwnerChange("b", "w1", "w3", 3)]
    assert moves_per_stream(changes, ["a", "b", "c"]) == {"a": 2, "b": 1, "c": 0}


def test_onto_old_counts_moves_onto_an_old_version() -> None:
    """A move whose new owner runs the old version counts; onto the new one, or unknown, not."""
    changes = [OwnerChange("a", "w1", "w2", 1), OwnerChange("a", "w2", "w4", 2),
               OwnerChange("b", "w1", "w9", 3)]
    versions = {"w1": "v1", "w2": "v1", "w4": "v2"}
    assert onto_old(changes, versions, "v1") == [changes[0]]


def test_delivery_gaps_per_change_of_deliverer() -> None:
    """The gap is the old deliverer's last record to the new one's first; only changes whose
    new side starts in the window; a holder that never delivered makes one gap."""
    recs = [*delivered("a", "w1", range(0, 5), 0),       # last at 400
            *delivered("a", "w2", range(5, 10), 700),    # first at 700: 0.3 s
            *delivered("a", "w3", range(10, 12), 2000),  # after the window
            *delivered("b", "w1", range(0, 3), 0),       # last at 200
            *delivered("b", "w4", range(3, 6), 1200),    # 1.0 s (w2's claim delivered nothing)
            *delivered("c", "w1", range(0, 2), 0),
            *delivered("c", "w2", range(2, 4), 300)]     # before the window
    gaps = delivery_gaps(recs, 500, 1500)
    assert gaps == [Gap("a", "w1", "w2", 400, 700), Gap("b", "w1", "w4", 200, 1200)]
    assert [g.seconds for g in gaps] == [0.3, 1.0]
    assert delivery_gaps(delivered("a", "w1", range(5), 0), 0, 10_000) == []


def test_added_delay_is_the_gap_less_the_streams_usual_spacing() -> None:
    """A stream delivered every 100 ms whose move left a 350 ms gap: 0.25 s added; a move
    the pace hid (gap = spacing) adds 0, never a negative delay."""
    recs = [*delivered("a", "w1", range(0, 5), 0),       # every 100 ms, last at 400
            *delivered("a", "w2", range(5, 10), 750),    # gap 0.35 s
            *delivered("b", "w1", range(0, 5), 0, 200),  # every 200 ms, last at 800
            *delivered("b", "w2", range(5, 8), 950)]     # gap 0.15 s, under the spacing
    assert added_delays(recs, 0, 10_000) == [pytest.approx(0.25), 0.0]


def test_steady_gaps_are_the_same_deliverers_while_the_moves_went_on() -> None:
    """Between two deliveries by one worker, the second from the window's first move to its
    last: a stream slowed meanwhile counts, one delivering before or after does not."""
    recs = [*delivered("a", "w1", range(0, 5), 0),            # 0..400
            *delivered("a", "w2", range(5, 10), 1000),        # the first move: 1000
            *delivered("b", "w1", range(0, 3), 0),            # 0..200
            *delivered("b", "w3", range(3, 6), 2000),         # the last move: 2000
            *delivered("c", "w4", range(0, 4), 900, 400)]     # 900, 1300, 1700, 2100
    steady = steady_gaps(recs, 500, 5000)
    assert sorted(steady) == [0.1, 0.1, 0.1, 0.1, 0.4, 0.4]  # a: 1100..1400; c: 1300, 1700
    assert steady_gaps(recs, 2500, 5000) == []  # no move in the window


def test_duplicate_deliveries_in_the_window() -> None:
    """A seq delivered again in the window counts, whoever delivered it first; before, not."""
    recs = [*delivered("a", "w1", range(0, 5), 0),        # 0..4 at 0..400
            Handled("a", 1, "w1", 450),                    # a repeat before the window
            *delivered("a", "w2", range(3, 7), 1000)]      # 3, 4 again in the window
    assert duplicate_deliveries(recs, 500, 5000) == 2
    assert duplicate_deliveries(recs, 0, 5000) == 3
    assert duplicate_deliveries(recs, 500, 900) == 0


def test_lost_seqs_across_the_window() -> None:
    """Seqs never delivered from the last one before the window to the last one in it."""
    recs = [*delivered("a", "w1", range(0, 10), 0),       # 0..9, up to 900
            *delivered("a", "w2", range(12, 15), 1000),   # 10, 11 lost at the move
            Handled("a", 16, "w2", 1300),                  # 15 lost
            *delivered("b", "w1", range(0, 4), 0), *delivered("b", "w2", range(4, 8), 1000),
            Handled("c", 3, "w1", 100), Handled("c", 5, "w1", 1000)]  # 4 lost
    assert lost_seqs(recs, 950, 2000) == {"a": [10, 11, 15], "c": [4]}
    # A seq missing before the window is not the deploy's; one delivered late is not lost.
    assert lost_seqs([*recs, Handled("a", 11, "w3", 1900)], 950, 2000)["a"] == [10, 15]
    assert lost_seqs([*recs, Handled("a", 15, "w3", 2500)], 950, 2000)["a"] == [10, 11]
    assert lost_seqs([Handled("d", 1, "w1", 1), Handled("d", 3, "w1", 2),
                      Handled("d", 4, "w2", 1000)], 500, 2000) == {}


def test_last_deliverers() -> None:
    """Each stream's latest deliverer, by time."""
    recs = [Handled("a", 2, "w2", 300), Handled("a", 1, "w1", 100), Handled("b", 1, "w1", 5)]
    assert last_deliverers(recs) == {"a": "w2", "b": "w1"}


def _report(records: list[Handled], unowned: list[str] | None = None) -> DeployReport:
    t = base_ms(0)
    claims = claims_from_logs([
        line("claimed", "w1", "a", 100), line("claimed", "w1", "b", 100),
        line("claimed", "w1", "d", 100),
        line("claimed", "w2", "a", 1000),  # onto an old worker
        line("claimed", "w3", "a", 2000), line("claimed", "w3", "b", 2000),
        line("claimed", "w4", "d", 4000)])  # after the last stop (3000)
    return deploy_report(style="one-at-a-time", conn_ids=["a", "b", "c", "d"],
                         versions={"w1": "v1", "w2": "v1", "w3": "v2", "w4": "v2"},
                         old_version="v1", claims=claims, records=records,
                         start_ms=t + 500, end_ms=t + 5000, last_stop_ms=t + 3000,
                         unowned_at_end=unowned or [])


def test_deploy_report_figures_and_what_fails() -> None:
    """The figures of a window; moves more than once do not fail, lost/dups/unowned do."""
    t = base_ms(0)
    recs = [*delivered("a", "w1", range(0, 5), t), *delivered("a", "w3", range(5, 8), t + 2200),
            *delivered("b", "w1", range(0, 3), t), *delivered("b", "w3", range(3, 5), t + 2100)]
    r = _report(recs)
    assert (r.workers, r.streams, r.moves, r.moves_max, r.moved_more_than_once) == (2, 4, 4, 2, 1)
    assert (r.never_moved, r.moves_onto_old, r.streams_onto_old) == (1, 1, 1)
    assert r.moves_mean == 1.0 and r.moves_after_last_stop == 1
    assert r.moves_by_stream == {"a": 2, "b": 1, "c": 0, "d": 1}
    assert (r.gaps, r.gap_p50_s, r.gap_max_s) == (2, pytest.approx(1.85), 1.9)
    assert (r.added_p50_s, r.added_max_s) == (pytest.approx(1.75), pytest.approx(1.8))
    assert (r.duplicates, r.lost) == (0, 0)
    assert (r.steady_p99_s, r.steady_max_s) == (0.1, 0.1)  # b's 2200 and a's last 3
    assert r.failures() == [] and r.window_s == 4.5
    bad = _report([*recs, Handled("a", 4, "w3", t + 2300), Handled("a", 10, "w3", t + 2400)],
                  unowned=["c"])
    assert (bad.duplicates, bad.lost) == (1, 2)
    why = " | ".join(bad.failures())
    assert "2 seqs lost" in why and "1 seqs delivered twice" in why and "unowned" in why
    assert json.loads(json.dumps(r.to_json()))["moves_onto_old"] == 1


@pytest.mark.slow
def test_smoke_deploy_scenario_on_a_real_fleet(tmp_path: Path) -> None:
    """Full fleet (~30 s): 2 v1 workers replaced one at a time by v2 ones; exit 0, the deploy
    table, every stream moved, nothing lost or repeated, the new workers ran v2."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "holdfast.cli.main", "up", "--scenario",
                           "deploy", "--workers", "2", "--streams", "6", "--settle", "1",
                           "--run-dir", str(run_dir), "--plain"], check=False, cwd=REPO_ROOT,
                          capture_output=True, timeout=120 * TIMEOUT_SCALE,
                          stdin=subprocess.DEVNULL)
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out[-4000:]
    assert "Holdfast deploy summary (one-at-a-time)" in out and "PASS" in out
    d = json.loads((run_dir / "summary.json").read_text())["deploy"]
    assert (d["workers"], d["streams"], d["never_moved"]) == (2, 6, 0), d
    assert (d["lost"], d["duplicates"], d["unowned_at_end"]) == (0, 0, []), d
    assert d["moves"] >= 6 and d["gaps"] >= 1, d
    for wid, version in (("w1", "v1"), ("w3", "v2"), ("w4", "v2")):
        started = [json.loads(x) for x in (run_dir / f"worker-{wid}.log").read_text()
                   .splitlines() if '"worker started"' in x]
        assert started and started[0].get("version") == version, (wid, started)
