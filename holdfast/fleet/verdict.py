"""The verdict of a ``holdfast up`` scenario (``holdfast.fleet.cli``): the summary table, the
check of every stream's seqs, the timeline and the acquisition path, ``summary.json``; its exit
code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from holdfast.fleet.deploy import DeployReport
from holdfast.fleet.deploy_table import deploy_table
from holdfast.fleet.recorder import read_records
from holdfast.fleet.report import Incident, check_seqs, summary_rows, summary_table
from holdfast.fleet.session import Session
from holdfast.fleet.traces import moved_path, read_spans

__all__ = ["SPANS_FILE", "seq_json", "verdict"]

SPANS_FILE = "spans.jsonl"  # every process of the run appends its spans (OTLP JSON lines)


def verdict(console: Console, session: Session, incidents: list[Incident],
             run_dir: Path, deploy: DeployReport | None = None) -> int:
    """Summary table, seq check, timeline; 0 if every stream recovered and no seq was missed
    (and, after a deploy, none was lost or delivered twice across it)."""
    checkpoints = {c: i.last_seq for c, i in session.items.items()}
    seqs = check_seqs(read_records(session.fleet.record_dir), checkpoints)
    rows = summary_rows(incidents, seqs)
    console.print()
    failures: list[str] = []
    if deploy is not None:
        console.print(deploy_table(deploy))
        if deploy.note:
            console.print(f"  {escape(deploy.note)}")
        failures += deploy.failures()
    console.print(summary_table(rows, title="Holdfast run summary" if deploy else None))
    for inc in incidents:
        if inc.note:
            console.print(f"  {inc.name}: {escape(inc.note)}")
        if inc.unrecovered():
            failures.append(f"{inc.name}: never recovered: {', '.join(inc.unrecovered())}")
    for check in seqs.values():
        if check.missing:
            failures.append(f"{check.conn_id}: {len(check.missing)} seqs missed "
                            f"(first {check.missing[:5]})")
        if check.handled == 0:
            failures.append(f"{check.conn_id}: no message handled at all")
    failures += session.crashes
    (run_dir / "summary.json").write_text(json.dumps({
        "rows": rows, "failures": failures, "seqs": {c: seq_json(s) for c, s in seqs.items()},
        **({"deploy": deploy.to_json()} if deploy else {})}, indent=1))
    try:
        from holdfast.fleet.timeline import write_timeline
        png = write_timeline(run_dir / "timeline.png", session.observer, incidents,
                             session.now())
        console.print(f"timeline: {escape(str(png))}")
    except Exception as exc:  # a missing plot must not hide the verdict
        console.print(f"[yellow]timeline not written: {type(exc).__name__}: "
                      f"{escape(str(exc))}[/]")
    path = moved_path(read_spans(run_dir / SPANS_FILE))
    if path is not None:
        console.print(f"acquisition path of {path.describe()}")
        console.print(f"spans: {escape(str(run_dir / SPANS_FILE))}")
    console.print(f"summary: {escape(str(run_dir / 'summary.json'))}")
    if failures:
        for f in failures:
            console.print(f"[red]FAIL[/] {escape(f)}")
        return 1
    console.print("[green]PASS[/]: every stream recovered, no sequence number missed")
    return 0


def seq_json(s: Any) -> dict[str, Any]:
    return {"first": s.first, "last": s.last, "handled": s.handled,
            "missing": s.missing[:100], "duplicates": s.duplicates, "checkpoint": s.checkpoint}
