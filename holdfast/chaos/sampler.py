"""Table samples for the checker: a thread scanning the lease table straight from the backend
(never through the fault proxy, so the checker keeps its eyes during an injected outage)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from holdfast.chaos.evidence import Sample, dump_samples

__all__ = ["Sampler", "sample_items"]


def _n(raw: dict[str, Any], name: str) -> int | None:
    value = raw.get(name, {}).get("N") if isinstance(raw.get(name), dict) else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _s(raw: dict[str, Any], name: str) -> str | None:
    value = raw.get(name)
    return value.get("S") if isinstance(value, dict) else None


def sample_items(items: list[dict[str, Any]], wall_ms: int) -> list[Sample]:
    """Lenient parse: a hostile item yields a sample with None for what it lacks."""
    out = []
    for raw in items:
        pk = _s(raw, "Pk") or ""
        out.append(Sample(wall_ms, pk.removeprefix("CONN#"), _s(raw, "desired_state"),
                          _s(raw, "lease_owner"), _n(raw, "lease_expires_at_ms"),
                          _n(raw, "last_seq"), _s(raw, "status"), _n(raw, "lease_epoch"),
                          _n(raw, "updated_at_ms")))
    return out


class Sampler:
    """Scan every ``period_s``; samples go to memory and to ``path`` (JSONL)."""

    def __init__(self, client: Any, table: str, path: Path, period_s: float = 0.25) -> None:
        self.client, self.table, self.path, self.period_s = client, table, path, period_s
        self.samples: list[Sample] = []
        self.latest: dict[str, Sample] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def scan_once(self) -> list[Sample]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        wall = time.time_ns() // 10**6
        while True:
            resp = self.client.scan(**kwargs)
            items.extend(resp.get("Items", []))
            if not resp.get("LastEvaluatedKey"):
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        got = sample_items(items, wall)
        self.samples.extend(got)
        self.latest = {s.conn_id: s for s in got}
        dump_samples(got, self.path)
        return got

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.scan_once()
            except Exception:  # a failed scan is a gap in samples, not a verdict
                self.errors += 1
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))
