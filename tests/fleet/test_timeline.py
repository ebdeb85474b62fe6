"""The PNG timeline: hatched leases of stopped workers, a title and labels that fit."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.fleet.observer import Observer, Segment
from holdfast.fleet.report import Incident
from holdfast.fleet.timeline import draw_timeline

pytest.importorskip("matplotlib")


def _scenario() -> tuple[Observer, list[Incident]]:
    obs = Observer()
    obs.segments += [Segment("s1", "w1#aaaa1111", 0.0, 12.0),
                     Segment("s2", "w2#bbbb2222", 0.0, 20.0),
                     Segment("s3", "w3#cccc3333", 0.0, 30.0),
                     Segment("s2", "w2#dddd4444", 25.0, None)]
    names = ["SIGTERM w3 (graceful stop)", "SIGKILL w1 (crash, reported stopped)",
             "SIGSTOP w2 (hung, found by its TTL)", "start 2 new streams", "stop 2 streams"]
    for t, name in zip([5.0, 10.0, 15.0, 15.5, 16.0], names, strict=True):
        obs.note(t, f"{name}: holds 4 streams", kind="action")
    incidents = [Incident(n, t, ["s1"], {"s1": 1.2345}) for t, n in
                 zip([5.0, 10.0, 15.0, 15.5, 16.0], names, strict=True)]
    incidents[1].crashed, incidents[2].crashed = "w1", "w2"
    return obs, incidents


def _hatched(fig: Any) -> list[tuple[float, float]]:
    ax = fig.axes[0]
    return [(p.get_paths()[0].vertices[:, 0].min(), p.get_paths()[0].vertices[:, 0].max())
            for p in ax.collections if p.get_hatch()]


def test_killed_and_hung_workers_leases_are_hatched() -> None:
    """Owners are <worker>#<incarnation>: the SIGKILLed and the SIGSTOPped workers' leases are
    hatched from the signal; a later incarnation's holding is not."""
    obs, incidents = _scenario()
    fig = draw_timeline(obs, incidents, 40.0)
    assert sorted(_hatched(fig)) == [(10.0, 12.0), (15.0, 20.0)]
    labels = fig.axes[0].get_legend_handles_labels()[1] or [
        t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"w1", "w2", "w3"} <= set(labels)


def test_title_and_action_labels_fit_and_do_not_overlap() -> None:
    """The title stays inside the figure and no two action labels overlap."""
    obs, incidents = _scenario()
    fig = draw_timeline(obs, incidents, 40.0)
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    width = fig.bbox.width
    title = next(t for t in (ax.title, ax._left_title) if t.get_text())
    box = title.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= width
    marks = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(marks) == 5
    for i, a in enumerate(marks):
        for b in marks[i + 1:]:
            assert not a.overlaps(b)
