"""Judge a finished soak again from its files (after a checker change, or to inspect):
``python -m holdfast.chaos --recheck RUN_DIR``."""

from __future__ import annotations

import json
from pathlib import Path

from holdfast.chaos.evidence import Action, Evidence, load_conn_log, load_samples
from holdfast.chaos.invariants import check
from holdfast.chaos.proxy import FaultWindow
from holdfast.chaos.soak import SoakResult
from holdfast.chaos.verdict import Limits
from holdfast.fleet.recorder import read_records

__all__ = ["recheck"]


def recheck(run_dir: Path) -> SoakResult:
    """The verdict of the soak whose files are in ``run_dir``, judged by today's checker."""
    saved = json.loads((run_dir / "verdict.json").read_text())
    ev = Evidence(conns=load_conn_log(run_dir / "upstream-connections.jsonl"),
                  handled=list(read_records(run_dir / "handled")),
                  samples=load_samples(run_dir / "samples.jsonl"),
                  actions=[Action(**a) for a in saved["actions"]],
                  faults=[FaultWindow(**f) for f in saved.get("faults", [])],
                  exits={a["target"]: None for a in saved["actions"] if a["kind"] == "crash"},
                  expected_bad=set(saved.get("hostile", {})))
    verdict = check(ev, Limits(**saved["limits"]), until_ms=saved["until_ms"],
                    from_ms=saved.get("from_ms", 0))
    return SoakResult(verdict, ev, run_dir, saved.get("hostile", {}))
