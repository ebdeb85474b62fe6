"""The end-of-run verdict: per event, how long streams went unowned; per stream, missed seqs.

Pure functions over the scenario's records and the handler's recorded seqs, so the verdict is
testable without a fleet.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from holdfast.fleet.moves import Balance, Move, cut_short, unowned_stats
from holdfast.fleet.recorder import Handled

__all__ = ["Incident", "SeqCheck", "check_seqs", "summary_rows", "summary_table"]


@dataclass(slots=True)
class Incident:
    """One scenario action and the streams it left without an owner."""

    name: str
    t: float
    affected: list[str]
    # conn_id -> seconds from the action until another worker held it (None: never)
    recovered: dict[str, float | None] = field(default_factory=dict)
    note: str = ""
    expect_owner: bool = True  # False for a stop: its streams are meant to end unowned
    crashed: str | None = None  # worker killed at ``t``: its leases were dead from then on
    # Rebalancing (the scenario's last step): every move of the run and the final holdings.
    moves: list[Move] | None = None
    balance: Balance | None = None

    def gaps(self) -> list[float]:
        return [v for v in self.recovered.values() if v is not None]

    def unrecovered(self) -> list[str]:
        if self.balance is not None:  # a fleet left out of balance is this step's failure
            return [] if self.balance.balanced else [f"out of balance: {self.balance.describe()}"]
        if not self.expect_owner:
            return []
        return [c for c in self.affected if self.recovered.get(c) is None]


@dataclass(frozen=True, slots=True)
class SeqCheck:
    """The handled seqs of one stream: first..last, what is missing, how many repeats."""

    conn_id: str
    first: int | None
    last: int | None
    handled: int
    missing: list[int]
    duplicates: int
    checkpoint: int | None

    @property
    def ok(self) -> bool:
        return not self.missing


def check_seqs(records: Iterable[Handled],
               checkpoints: dict[str, int | None]) -> dict[str, SeqCheck]:
    """For each stream: every seq from the first handled one to the last (and to the stored
    checkpoint, which claims they were all handled) must have been handled at least once."""
    seen: dict[str, list[int]] = {c: [] for c in checkpoints}
    for rec in records:
        seen.setdefault(rec.conn_id, []).append(rec.seq)
    out: dict[str, SeqCheck] = {}
    for conn_id, seqs in seen.items():
        checkpoint = checkpoints.get(conn_id)
        unique = set(seqs)
        if not unique:
            missing = list(range(0, checkpoint + 1)) if checkpoint is not None else []
            out[conn_id] = SeqCheck(conn_id, None, None, 0, missing, 0, checkpoint)
            continue
        first, last = min(unique), max(unique)
        top = max(last, checkpoint) if checkpoint is not None else last
        missing = [s for s in range(first, top + 1) if s not in unique]
        out[conn_id] = SeqCheck(conn_id, first, last, len(seqs), missing,
                                len(seqs) - len(unique), checkpoint)
    return out


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def summary_rows(incidents: list[Incident], seqs: dict[str, SeqCheck]) -> list[dict[str, Any]]:
    """One dict per incident (plus a total row): the numbers of the summary table."""
    rows: list[dict[str, Any]] = []
    for inc in incidents:
        if inc.moves is not None:
            rows += _balance_rows(inc, seqs)
            continue
        gaps = inc.gaps()
        rows.append({
            "event": inc.name, "affected": len(inc.affected),
            "max_unowned_s": max(gaps) if gaps else None,
            "p50_unowned_s": statistics.median(gaps) if gaps else None,
            "unrecovered": inc.unrecovered(),
            "missed": sum(len(seqs[c].missing) for c in inc.affected if c in seqs),
            # Not per event: a stream's repeats are counted over the whole run, so a sum over
            # the affected streams would repeat run-wide totals on every row (a graceful stop
            # showing a crash's replays). The total row has them; the moves row its own.
            "duplicates": None,
            "note": inc.note})
    rows.append({
        "event": "all streams, whole run", "affected": len(seqs),
        "max_unowned_s": None, "p50_unowned_s": None, "unrecovered": [],
        "missed": sum(len(s.missing) for s in seqs.values()),
        "duplicates": sum(s.duplicates for s in seqs.values()),
        "handled": sum(s.handled for s in seqs.values()), "note": ""})
    return rows


def _balance_rows(inc: Incident, seqs: dict[str, SeqCheck]) -> list[dict[str, Any]]:
    """The moves row (count, unowned per move, seqs handled twice across a move) and the
    holdings row (per live worker at the end, balanced or not)."""
    # A move its holder never finished (it crashed or hung mid-move) was failover's: its
    # unowned time and replays belong to that failure's row, not to rebalancing's figures.
    moves = [m for m in inc.moves or [] if m.completed]
    cut = cut_short(inc.moves or [])
    stats = unowned_stats(moves)
    moved = sorted({m.conn_id for m in moves})
    rows: list[dict[str, Any]] = [{
        "event": f"rebalancing: {len(moves)} moves", "kind": "moves", "moves": len(moves),
        "cut_short": cut,
        "affected": len(moved), "max_unowned_s": stats["max"], "p50_unowned_s": stats["p50"],
        "p99_unowned_s": stats["p99"], "unrecovered": [],
        "missed": sum(len(seqs[c].missing) for c in moved if c in seqs),
        "duplicates": sum(m.duplicates or 0 for m in moves),
        "by_reason": {r: sum(1 for m in moves if m.reason == r)
                      for r in sorted({m.reason for m in moves})},
        "note": inc.note}]
    b = inc.balance
    if b is not None:
        rows.append({
            "event": f"holdings at the end (balanced: {'yes' if b.balanced else 'no'})",
            "kind": "holdings", "balanced": b.balanced, "holdings": b.holdings,
            "share": b.share, "band": b.band, "text": b.describe(), "affected": len(b.holdings),
            "max_unowned_s": None, "p50_unowned_s": None, "unrecovered": inc.unrecovered(),
            "missed": 0, "duplicates": 0, "note": ""})
    return rows


def summary_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    table = Table("event", "streams affected", "max unowned", "p50 unowned", "missed seqs",
                  "duplicates", title=title or "Holdfast failover summary",
                  title_justify="left", header_style="bold")
    for r in rows:
        missed = r["missed"]
        unrec = r["unrecovered"]
        status = (f"[red]{missed}[/]" if missed else "[green]0[/]")
        affected = str(r["affected"]) + (f" ([red]{len(unrec)} never recovered[/])"
                                         if unrec else "")
        if "handled" in r:
            affected += f" ({r['handled']} msgs handled)"
        if r.get("kind") == "moves":
            affected += f" (p99 {_fmt(r['p99_unowned_s'])})"
        if r.get("kind") == "holdings":
            affected = r["text"] if r["balanced"] else f"[red]{r['text']}[/]"
            table.add_row(r["event"], affected, "", "", "", "")
            continue
        table.add_row(r["event"], affected, _fmt(r["max_unowned_s"]),
                      _fmt(r["p50_unowned_s"]), status,
                      "-" if r["duplicates"] is None else str(r["duplicates"]))
    return table
