"""The PNG timeline: who owned each stream when (one colour per worker), with the actions and a
mark per rebalancing move (at the new owner's claim)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from holdfast.fleet.observer import Observer, worker_id_of
from holdfast.fleet.report import Incident

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["draw_timeline", "write_timeline"]

_TITLE_WIDTH = 110  # characters a title line may take before it wraps: fits the axes at 12 in


def write_timeline(path: Path, observer: Observer, incidents: list[Incident],
                   end_t: float) -> Path:
    """Draw ownership segments per stream and a marker per action; returns ``path``."""
    import matplotlib.pyplot as plt

    fig = draw_timeline(observer, incidents, end_t)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _title(incidents: list[Incident], moves: int, worst_move_s: float) -> str:
    gaps = [f"{i.name}: max {max(i.gaps()):.2f} s unowned" for i in incidents
            if i.gaps() and i.expect_owner]
    lines = ["Holdfast: ownership per stream"]
    # Wrapped to the axes' width: a centred line wider than the axes ran off the figure's left.
    lines += textwrap.wrap("; ".join(gaps), _TITLE_WIDTH)
    if moves:
        lines.append(f"{moves} rebalancing moves (\u25bc): max {worst_move_s:.2f} s unowned")
    return "\n".join(lines)


def draw_timeline(observer: Observer, incidents: list[Incident], end_t: float) -> Figure:
    """The timeline figure (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed: CI, ssh, a pipe
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    streams = sorted({s.conn_id for s in observer.segments} | set(observer.streams),
                     reverse=True)
    # Owners are ``<worker>#<incarnation>``: colour, legend and deaths go by worker id (the
    # scenario names its victims by worker id; an incarnation in the legend is noise).
    workers = sorted({worker_id_of(s.owner) for s in observer.segments})
    cmap = plt.get_cmap("tab10")
    color = {w: cmap(i % 10) for i, w in enumerate(workers)}
    row = {c: i for i, c in enumerate(streams)}
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.35 * len(streams) + 2.2)))
    deaths = {i.crashed: i.t for i in incidents if i.crashed}
    for seg in observer.segments:
        worker = worker_id_of(seg.owner)
        end = seg.end if seg.end is not None else end_t
        died = deaths.get(worker)
        alive_end = min(end, died) if died is not None and died > seg.start else end
        ax.broken_barh([(seg.start, max(0.05, alive_end - seg.start))],
                       (row[seg.conn_id] - 0.35, 0.7), facecolors=color[worker])
        if alive_end < end:  # the table still names a killed or hung worker until it is freed
            ax.broken_barh([(alive_end, end - alive_end)], (row[seg.conn_id] - 0.35, 0.7),
                           facecolors="none", edgecolors="grey", hatch="///", linewidth=0.5)
    handles: list[Artist] = [Rectangle((0, 0), 1, 1, color=color[w]) for w in workers]
    labels = list(workers)
    # Actions are numbered on the plot and named in the legend: names written along the
    # lines overlapped whenever two actions were seconds apart.
    actions = [ev for ev in observer.events if ev.kind == "action"]
    for n, ev in enumerate(actions, 1):
        ax.axvline(ev.t, color="black", linestyle="--", linewidth=0.8)
        ax.annotate(str(n), (ev.t, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 2 + 9 * ((n - 1) % 2)), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=0.8))
        labels.append(f"{n}: {ev.text.split(':')[0][:40]}")
    # Completed moves only: one cut short by a crash is drawn as that crash's.
    moves = [m for i in incidents for m in (i.moves or []) if m.conn_id in row and m.completed]
    for m in moves:
        ax.plot([m.t], [row[m.conn_id]], marker="v", color="black", markersize=6,
                linestyle="none")
    ax.set_yticks(range(len(streams)), streams, fontsize=7)
    ax.set_xlabel("seconds since start")
    ax.set_xlim(0, max(end_t, 1.0))
    ax.set_ylim(-0.8, len(streams) - 0.2)
    worst = max((m.unowned_ms or 0) for m in moves) / 1000 if moves else 0.0
    ax.set_title(_title(incidents, len(moves), worst), fontsize=9, loc="left", pad=22)
    if deaths:
        handles.append(Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="grey", hatch="///"))
        labels.append("held by a killed or hung worker")
    if moves:
        handles.append(Line2D([], [], marker="v", color="black", linestyle="none"))
        labels.append("rebalancing move")
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
                  title="owner / action")
    fig.tight_layout()
    return fig
