"""holdfast.fleet.traces: the acquisition path from span lines, hop by hop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from holdfast.core import names
from holdfast.fleet.traces import (
    CONNECTED_BEFORE,
    Hop,
    acquisition_paths,
    moved_path,
    read_spans,
)

MS = 1_000_000


def _span(name: str, span_id: str, parent: str, start_ms: int, end_ms: int,
          stream: str = "s-1", worker: str = "", trace: str = "t1") -> dict[str, Any]:
    attrs = [{"key": names.TRACE_ATTR_STREAM_ID, "value": {"stringValue": stream}}]
    if worker:
        attrs.append({"key": names.TRACE_ATTR_WORKER_ID, "value": {"stringValue": worker}})
    return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": name,
            "startTimeUnixNano": str(start_ms * MS), "endTimeUnixNano": str(end_ms * MS),
            "attributes": attrs}


def _acquisition(prefix: str, t0: int, stream: str = "s-1",
                 worker: str = "w1") -> list[dict[str, Any]]:
    return [_span(names.SPAN_ROUTE, f"{prefix}r", "", t0, t0 + 10, stream, trace=prefix),
            _span(names.SPAN_CLAIM, f"{prefix}c", f"{prefix}r", t0 + 25, t0 + 40, stream,
                  worker, prefix),
            _span(names.SPAN_CONNECT, f"{prefix}k", f"{prefix}c", t0 + 41, t0 + 46, stream,
                  worker, prefix),
            _span(names.SPAN_FIRST_MESSAGE, f"{prefix}f", f"{prefix}c", t0 + 46, t0 + 146,
                  stream, worker, prefix)]


def test_hops_and_their_milliseconds() -> None:
    """router, nudge queue (router end to claim start), claim, connect, first message."""
    (path,) = acquisition_paths(_acquisition("a", 1000))
    assert path.stream_id == "s-1" and path.worker_id == "w1" and path.trace_id == "a"
    assert path.hops == (Hop("route", 10), Hop("nudge queue", 15), Hop("claim", 15),
                         Hop("connect", 5), Hop("first message", 100))
    assert "route 10 ms -> nudge queue 15 ms -> claim 15 ms" in path.describe()


def test_incomplete_or_unlinked_claims_are_not_paths() -> None:
    """A claim without a sender parent, or without a first message, is skipped."""
    spans = _acquisition("a", 0)
    assert acquisition_paths([s for s in spans if s["name"] != names.SPAN_FIRST_MESSAGE]) == []
    assert acquisition_paths([s for s in spans if s["name"] != names.SPAN_ROUTE]) == []
    refused = _span(names.SPAN_CLAIM, "x", "ar", 30, 31, worker="w2")  # a lost race
    assert len(acquisition_paths([*spans, refused])) == 1


def test_a_claim_whose_upstream_was_opened_before_it_is_a_path() -> None:
    """No connect span under the claim (a prestart, a warm handoff): the connect hop says it
    was before the claim, 0 ms."""
    spans = [s for s in _acquisition("a", 1000) if s["name"] != names.SPAN_CONNECT]
    (path,) = acquisition_paths(spans)
    assert path.hops[3] == Hop(CONNECTED_BEFORE, 0.0) and path.hops[4] == Hop("first message", 100)


def test_moved_path_prefers_a_stream_acquired_twice(tmp_path: Path) -> None:
    """The latest acquisition of a stream that moved wins over a later first-time one."""
    spans = [*_acquisition("a", 0, "moved", "w1"), *_acquisition("b", 500, "moved", "w2"),
             *_acquisition("c", 900, "new", "w3")]
    path = moved_path(spans)
    assert path is not None and path.stream_id == "moved" and path.worker_id == "w2"
    assert moved_path(_acquisition("c", 0, "new")) is not None
    assert moved_path([]) is None
    file = tmp_path / "spans.jsonl"
    file.write_text("".join(json.dumps(s) + "\n" for s in spans) + '{"torn": \n')
    assert read_spans(file) == spans
    assert read_spans(tmp_path / "missing.jsonl") == []
