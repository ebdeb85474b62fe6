"""The deploy scenario's summary table (``holdfast up --scenario deploy``) from its figures
(``holdfast.fleet.deploy``)."""

from __future__ import annotations

from rich.table import Table

from holdfast.fleet.deploy import DeployReport

__all__ = ["deploy_table"]


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def _red(value: int, text: str | None = None) -> str:
    shown = str(value) if text is None else text
    return f"[red]{shown}[/]" if value else f"[green]{shown}[/]"


def deploy_table(r: DeployReport) -> Table:
    """The deploy's summary as a two-column table."""
    table = Table("deploy", "cost", title=f"Holdfast deploy summary ({r.style})",
                  title_justify="left", header_style="bold")
    table.add_row("style", f"{r.style}: {r.workers} workers replaced, {r.streams} streams, "
                           f"{r.window_s:.1f} s")
    table.add_row("moves per stream", f"mean {r.moves_mean:.2f}, max {r.moves_max} "
                                      f"({r.moves} moves; {r.never_moved} streams never moved)")
    table.add_row("streams moved more than once", str(r.moved_more_than_once))
    table.add_row("moves onto an old worker", f"{r.moves_onto_old} ({r.streams_onto_old} "
                                              "streams)")
    table.add_row("moves after the last old worker stopped", str(r.moves_after_last_stop))
    table.add_row("delivery gap per move p50 / p99 / max",
                  f"{_s(r.gap_p50_s)} / {_s(r.gap_p99_s)} / {_s(r.gap_max_s)} ({r.gaps} gaps)")
    table.add_row("delay a move added (gap less the feed's spacing) p50 / p99 / max",
                  f"{_s(r.added_p50_s)} / {_s(r.added_p99_s)} / {_s(r.added_max_s)}")
    table.add_row("meanwhile, streams not moving: between two deliveries p99 / max",
                  f"{_s(r.steady_p99_s)} / {_s(r.steady_max_s)}")
    table.add_row("duplicates", _red(r.duplicates))
    table.add_row("lost seqs", _red(r.lost))
    table.add_row("unowned at the end", _red(len(r.unowned_at_end),
                                             ", ".join(r.unowned_at_end) or "0"))
    return table
