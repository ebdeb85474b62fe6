"""Who was connected to which stream, when: the record the chaos suite checks for overlaps.

"No two workers connected to the same stream at once" is checked on the upstream's side, where
it matters: every open and close is recorded with monotonic times (and optionally appended to a
JSONL file that another process can read).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

__all__ = ["ConnLog", "ConnRecord", "Overlap"]


@dataclass(slots=True)
class ConnRecord:
    """One upstream connection. ``closed_ns`` is None while it is open."""

    conn_no: int
    stream_id: str
    path: str
    client: str
    worker: str | None
    opened_ns: int
    opened_wall_ms: int
    closed_ns: int | None = None
    closed_wall_ms: int | None = None
    from_seq: int | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    sent: int = 0


@dataclass(frozen=True, slots=True)
class Overlap:
    """Two connections to one stream that were open at the same time."""

    stream_id: str
    first: ConnRecord
    second: ConnRecord


class ConnLog:
    """Thread-safe in-memory log of connections, mirrored to a JSONL file when given."""

    def __init__(self, path: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._records: list[ConnRecord] = []
        self._file: IO[str] | None = path.open("a", buffering=1) if path else None

    def opened(self, stream_id: str, path: str, client: str, worker: str | None,
               from_seq: int | None) -> ConnRecord:
        with self._lock:
            rec = ConnRecord(len(self._records), stream_id, path, client, worker,
                             time.monotonic_ns(), time.time_ns() // 10**6, from_seq=from_seq)
            self._records.append(rec)
            self._write("open", rec)
        return rec

    def closed(self, rec: ConnRecord) -> None:
        with self._lock:
            rec.closed_ns = time.monotonic_ns()
            rec.closed_wall_ms = time.time_ns() // 10**6
            self._write("close", rec)

    def records(self, stream_id: str | None = None) -> list[ConnRecord]:
        with self._lock:
            return [r for r in self._records if stream_id is None or r.stream_id == stream_id]

    def open_count(self) -> int:
        with self._lock:
            return sum(1 for r in self._records if r.closed_ns is None)

    def overlaps(self) -> list[Overlap]:
        """Every pair of connections to the same stream whose open intervals intersect."""
        by_stream: dict[str, list[ConnRecord]] = {}
        for rec in self.records():
            by_stream.setdefault(rec.stream_id, []).append(rec)
        found: list[Overlap] = []
        for stream_id, recs in by_stream.items():
            recs.sort(key=lambda r: r.opened_ns)
            for i, a in enumerate(recs):
                for b in recs[i + 1:]:
                    if a.closed_ns is not None and b.opened_ns >= a.closed_ns:
                        break
                    found.append(Overlap(stream_id, a, b))
        return found

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None

    def _write(self, event: str, rec: ConnRecord) -> None:
        if self._file:
            self._file.write(json.dumps({"event": event, **asdict(rec)}) + "\n")
