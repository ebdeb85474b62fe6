"""The PNG timeline: who owned each stream when (one colour per worker), with the actions and a
mark per rebalancing move (at the new owner's claim)."""

from __future__ import annotations

from pathlib import Path

from holdfast.fleet.observer import Observer
from holdfast.fleet.report import Incident

__all__ = ["write_timeline"]


def write_timeline(path: Path, observer: Observer, incidents: list[Incident],
                   end_t: float) -> Path:
    """Draw ownership segments per stream and a marker per action; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed: CI, ssh, a pipe
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    streams = sorted({s.conn_id for s in observer.segments} | set(observer.streams),
                     reverse=True)
    workers = sorted({s.owner for s in observer.segments})
    cmap = plt.get_cmap("tab10")
    color = {w: cmap(i % 10) for i, w in enumerate(workers)}
    row = {c: i for i, c in enumerate(streams)}
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.35 * len(streams) + 1.8)))
    deaths = {i.crashed: i.t for i in incidents if i.crashed}
    for seg in observer.segments:
        end = seg.end if seg.end is not None else end_t
        died = deaths.get(seg.owner)
        alive_end = min(end, died) if died is not None and died > seg.start else end
        ax.broken_barh([(seg.start, max(0.05, alive_end - seg.start))],
                       (row[seg.conn_id] - 0.35, 0.7), facecolors=color[seg.owner])
        if alive_end < end:  # the table still names a killed worker until its lease expires
            ax.broken_barh([(alive_end, end - alive_end)], (row[seg.conn_id] - 0.35, 0.7),
                           facecolors="none", edgecolors="grey", hatch="///", linewidth=0.5)
    for ev in observer.events:
        if ev.kind == "action":
            ax.axvline(ev.t, color="black", linestyle="--", linewidth=0.8)
            ax.text(ev.t, len(streams) - 0.4, " " + ev.text.split(":")[0][:40], rotation=90,
                    va="top", ha="left", fontsize=7)
    moves = [m for i in incidents for m in (i.moves or []) if m.conn_id in row]
    for m in moves:
        ax.plot([m.t], [row[m.conn_id]], marker="v", color="black", markersize=6,
                linestyle="none")
    ax.set_yticks(range(len(streams)), streams, fontsize=7)
    ax.set_xlabel("seconds since start")
    ax.set_xlim(0, max(end_t, 1.0))
    ax.set_ylim(-0.8, len(streams) - 0.2)
    gaps = [f"{i.name}: max {max(i.gaps()):.2f} s unowned" for i in incidents
            if i.gaps() and i.expect_owner]
    lines = ["Holdfast: ownership per stream"]
    for i in range(0, len(gaps), 3):  # three to a line: a long title runs off the figure
        lines.append("; ".join(gaps[i:i + 3]))
    if moves:
        worst = max((m.unowned_ms or 0) for m in moves) / 1000
        lines.append(f"{len(moves)} rebalancing moves (\u25bc): max {worst:.2f} s unowned")
    ax.set_title("\n".join(lines), fontsize=9)
    handles: list[Artist] = [Rectangle((0, 0), 1, 1, color=color[w]) for w in workers]
    labels = list(workers)
    if deaths:
        handles.append(Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="grey", hatch="///"))
        labels.append("lease of a killed worker")
    if moves:
        handles.append(Line2D([], [], marker="v", color="black", linestyle="none"))
        labels.append("rebalancing move")
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
                  title="owner")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
