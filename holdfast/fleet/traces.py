"""The acquisition path of a stream, read back from ``spans.jsonl`` (one OTLP-JSON span a line).

A complete path is a ``claim`` span whose parent is the router's ``route`` (or the sweeper's)
span, with a ``first message handled`` child and a ``connect`` child, unless the upstream was
opened before the claim (a new stream's prestart, a warm handoff): then its connect hop is
``CONNECTED_BEFORE``, 0 ms. Its hops, in milliseconds: the router's span, the nudge queue
(router span end to claim start), the claim, the connect, and the wait for the first handled
message.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holdfast.core import names

__all__ = ["CONNECTED_BEFORE", "AcquisitionPath", "Hop", "acquisition_paths", "moved_path",
           "read_spans"]

_SENDERS = (names.SPAN_ROUTE, names.SPAN_SWEEP)
# The connect hop of a claim whose upstream was opened before it (no connect span under it).
CONNECTED_BEFORE = "connected before the claim"


@dataclass(frozen=True, slots=True)
class Hop:
    name: str
    ms: float


@dataclass(frozen=True, slots=True)
class AcquisitionPath:
    """One acquisition, from the record (or sweep) to the first handled message."""

    stream_id: str
    worker_id: str
    trace_id: str
    start_ns: int  # the claim's start: paths sort by it
    hops: tuple[Hop, ...]

    def describe(self) -> str:
        steps = " -> ".join(f"{h.name} {h.ms:.0f} ms" for h in self.hops)
        return f"{self.stream_id} (worker {self.worker_id}): {steps}"


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans in ``path`` (missing file: none; a torn or foreign line is skipped)."""
    if not path.exists():
        return []
    spans = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            span = json.loads(line)
        except ValueError:
            continue
        if isinstance(span, dict) and isinstance(span.get("spanId"), str):
            spans.append(span)
    return spans


def _attr(span: dict[str, Any], key: str) -> str:
    for kv in span.get("attributes") or []:
        if isinstance(kv, dict) and kv.get("key") == key:
            return str((kv.get("value") or {}).get("stringValue", ""))
    return ""


def _ns(span: dict[str, Any], which: str) -> int:
    try:
        return int(span.get(f"{which}TimeUnixNano", 0))
    except (TypeError, ValueError):
        return 0


def _ms(start_ns: int, end_ns: int) -> float:
    return max(0.0, (end_ns - start_ns) / 1e6)


def acquisition_paths(spans: Iterable[dict[str, Any]]) -> list[AcquisitionPath]:
    """Every complete acquisition path in ``spans``, oldest claim first."""
    spans = list(spans)
    by_id = {s["spanId"]: s for s in spans}
    children: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for s in spans:
        if s.get("parentSpanId"):
            children[s["parentSpanId"]][str(s.get("name"))] = s
    paths = []
    for claim in spans:
        if claim.get("name") != names.SPAN_CLAIM:
            continue
        sender = by_id.get(claim.get("parentSpanId") or "")
        kids = children.get(claim["spanId"], {})
        connect, first = kids.get(names.SPAN_CONNECT), kids.get(names.SPAN_FIRST_MESSAGE)
        if sender is None or sender.get("name") not in _SENDERS or not first:
            continue
        hops = (Hop(str(sender["name"]), _ms(_ns(sender, "start"), _ns(sender, "end"))),
                Hop("nudge queue", _ms(_ns(sender, "end"), _ns(claim, "start"))),
                Hop("claim", _ms(_ns(claim, "start"), _ns(claim, "end"))),
                Hop("connect", _ms(_ns(connect, "start"), _ns(connect, "end"))) if connect
                else Hop(CONNECTED_BEFORE, 0.0),
                Hop("first message", _ms(_ns(first, "start"), _ns(first, "end"))))
        paths.append(AcquisitionPath(
            _attr(claim, names.TRACE_ATTR_STREAM_ID), _attr(claim, names.TRACE_ATTR_WORKER_ID),
            str(claim.get("traceId", "")), _ns(claim, "start"), hops))
    return sorted(paths, key=lambda p: p.start_ns)


def moved_path(spans: Iterable[dict[str, Any]]) -> AcquisitionPath | None:
    """The latest path of a stream acquired more than once (moved); else the latest path."""
    paths = acquisition_paths(spans)
    seen: dict[str, int] = defaultdict(int)
    for p in paths:
        seen[p.stream_id] += 1
    moved = [p for p in paths if seen[p.stream_id] > 1]
    pick = moved or paths
    return pick[-1] if pick else None
