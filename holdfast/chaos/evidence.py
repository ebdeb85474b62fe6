"""What the checker reads: the upstream's connections, the recorder's handled seqs, table
samples and the soak's own actions. Plain dataclasses plus loaders for the files on disk."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from holdfast.chaos.proxy import FaultWindow
from holdfast.core.schema import LeaseStatus
from holdfast.fleet.recorder import Handled, read_records

__all__ = ["Action", "ConnSpan", "Evidence", "Sample", "load_conn_log", "load_samples"]


@dataclass(frozen=True, slots=True)
class ConnSpan:
    """One upstream connection as the upstream saw it (``close_ns`` None: still open)."""

    conn_no: int
    stream: str
    worker: str
    open_ns: int
    open_ms: int
    close_ns: int | None = None
    close_ms: int | None = None
    first_seq: int | None = None
    last_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One item in one table scan; fields the scan could not parse are None."""

    wall_ms: int
    conn_id: str
    state: str | None
    owner: str | None
    expires_ms: int | None
    last_seq: int | None
    status: str | None
    epoch: int | None
    updated_ms: int | None = None
    # When its owner stopped being a live session, if it was not one at this scan (None: a
    # live owner, no owner, or no session table sampled). See holdfast.chaos.sampler.
    owner_down_ms: int | None = None

    def waiting(self) -> bool:
        """Unowned on purpose at the scan: parked (BACKOFF, INVALID) until its expiry, the
        back-off's or the quarantine's end. Past it, the stream is wanted again (its status
        stays until the next claim): judged as any other."""
        return (self.status in (LeaseStatus.BACKOFF, LeaseStatus.INVALID)
                and self.expires_ms is not None and self.expires_ms > self.wall_ms)

    def live_owner(self) -> str | None:
        """The owner holding it at the time of the scan: a lease not expired, and an owner
        that is a live session (with sessions the expiry is only a one-hour backstop)."""
        if (self.owner and self.owner_down_ms is None and self.expires_ms is not None
                and self.expires_ms > self.wall_ms):
            return self.owner
        return None


@dataclass(frozen=True, slots=True)
class Action:
    """Something the soak did, with the wall time it did it."""

    wall_ms: int
    kind: str  # sigkill sigterm sigstop sigcont start stop create hostile fault restart
    target: str
    detail: str = ""


@dataclass
class Evidence:
    """Everything one soak produced."""

    conns: list[ConnSpan] = field(default_factory=list)
    handled: list[Handled] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    faults: list[FaultWindow] = field(default_factory=list)
    exits: dict[str, int | None] = field(default_factory=dict)  # worker -> unexpected exit
    expected_bad: set[str] = field(default_factory=set)  # hostile items / rejecting upstreams

    @classmethod
    def load(cls, conn_log: Path, record_dir: Path, samples: Path) -> Evidence:
        return cls(conns=load_conn_log(conn_log), handled=list(read_records(record_dir)),
                   samples=load_samples(samples))


def load_conn_log(path: Path) -> list[ConnSpan]:
    """Open/close lines of the upstream's JSONL log merged into one span per connection."""
    opened: dict[int, dict[str, object]] = {}
    closed: dict[int, dict[str, object]] = {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
            (opened if rec["event"] == "open" else closed)[int(rec["conn_no"])] = rec
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line of a killed upstream
    spans = []
    for no, rec in sorted(opened.items()):
        end = closed.get(no, {})
        spans.append(ConnSpan(no, str(rec["stream_id"]), str(rec.get("worker") or "?"),
                              _int(rec["opened_ns"]) or 0, _int(rec["opened_wall_ms"]) or 0,
                              _int(end.get("closed_ns")), _int(end.get("closed_wall_ms")),
                              _int(end.get("first_seq")), _int(end.get("last_seq"))))
    return spans


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_samples(path: Path) -> list[Sample]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(Sample(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def dump_samples(samples: Iterable[Sample], path: Path) -> None:
    from dataclasses import asdict
    with path.open("a") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")
