"""A soak's SIGSTOP pauses, for the checks that excuse what a paused process cannot help:
its socket stays open, and a handler call it had begun runs on when it wakes
(``holdfast.chaos.invariants``)."""

from __future__ import annotations

from collections import defaultdict

from holdfast.chaos.evidence import Action
from holdfast.fleet.recorder import Handled

__all__ = ["IN_FLIGHT_WAKE_MS", "calls_across_pauses", "paused_at", "pauses_of"]

# How soon after its SIGCONT a woken worker's call begun before the pause is recorded: it
# resumes where it stopped, the recorder's stamp microseconds on (0 ms in the soak that showed
# it, seed 13), or a CPU slice later on a busy machine.
IN_FLIGHT_WAKE_MS = 20


def pauses_of(actions: list[Action]) -> dict[str, list[tuple[int, int]]]:
    """Worker -> [(SIGSTOP ms, SIGCONT ms)]; a pause never resumed lasts forever."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    started: dict[str, int] = {}
    for a in sorted(actions, key=lambda a: a.wall_ms):
        if a.kind == "sigstop":
            started[a.target] = a.wall_ms
        elif a.kind in ("sigcont", "sigkill") and a.target in started:
            out[a.target].append((started.pop(a.target), a.wall_ms))
    for worker, t in started.items():
        out[worker].append((t, 2**62))
    return out


def paused_at(pauses: dict[str, list[tuple[int, int]]], worker: str, at_ms: int,
              grace_ms: int) -> tuple[int, int] | None:
    """The pause of ``worker`` that ``at_ms`` falls in (or ``grace_ms`` after its end)."""
    for start, end in pauses.get(worker, []):
        if start <= at_ms <= end + grace_ms:
            return start, end
    return None


def calls_across_pauses(handled: list[Handled], pauses: dict[str, list[tuple[int, int]]],
                        ) -> set[int]:
    """Indexes into ``handled`` of the calls a worker began just before a SIGSTOP and that
    were recorded when it woke (see the module): per worker, stream and pause, the first
    record after the pause began, if it comes within ``IN_FLIGHT_WAKE_MS`` of the SIGCONT and
    is the seq after the worker's last record of the stream before the pause, or that seq."""
    order = sorted(range(len(handled)), key=lambda i: handled[i].wall_ms)
    out: set[int] = set()
    for worker, spans in pauses.items():
        for start, end in spans:
            last: dict[str, int] = {}
            seen: set[str] = set()
            for i in order:
                h = handled[i]
                if h.wall_ms > end + IN_FLIGHT_WAKE_MS:
                    break  # in time order: nothing later can be this pause's
                if h.worker_id != worker or h.conn_id in seen:
                    continue
                if h.wall_ms <= start:
                    last[h.conn_id] = h.seq
                    continue
                seen.add(h.conn_id)  # only the first record after the pause began
                if h.conn_id in last and last[h.conn_id] <= h.seq <= last[h.conn_id] + 1:
                    out.add(i)
    return out
