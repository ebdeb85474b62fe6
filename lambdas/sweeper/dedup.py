"""Which orphans the sweeper nudges: pure bookkeeping, no clock and no I/O.

The sweep runs every second, but claiming an orphan takes a nudge's trip through SQS and a
conditional write, so the same orphan is usually seen by a few sweeps in a row. An orphan is
identified by (connection id, expiry): once claimed its expiry changes, so a later expiry of the
same connection is a new orphan and is nudged at once.

- An expired lease (expiry > 0: its holder died or its back-off ended) is nudged on sight.
- A released or never-claimed one (expiry 0) was already nudged by the router when it was
  written, so the sweeper waits ``unclaimed_grace_ms`` of continuous orphanhood before nudging
  it: the sweeper is the backup for a lost stream record or a nudge that went astray (a
  crashed worker's long polls still pending in SQS take messages no one will claim), not a
  second copy of every release. The sweep wakes when a grace ends (``next_due_ms``).
- A nudged orphan still orphaned after ``first_ms`` is nudged again (the nudge may be lost, or no
  worker had room), then after 2x, 4x ... up to ``max_ms``, so a fleet that is down is not
  flooded with duplicates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from holdfast.core import settings as S
from holdfast.core.table import Orphan

__all__ = ["NudgeMemory", "RenudgePolicy"]

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RenudgePolicy:
    first_ms: int = S.SWEEP_RENUDGE_MS.read({})  # the settings' defaults: said once
    max_ms: int = S.SWEEP_RENUDGE_MAX_MS.read({})
    unclaimed_grace_ms: int = S.SWEEP_UNCLAIMED_GRACE_MS.read({})

    def window_ms(self, times_nudged: int) -> int:
        """How long after the last nudge an orphan nudged ``times_nudged`` times waits."""
        doublings: int = max(0, min(times_nudged - 1, 30))
        return min(self.max_ms, self.first_ms << doublings)


@dataclass(slots=True)
class _Entry:
    first_seen_ms: int
    last_nudged_ms: int | None = None
    times_nudged: int = 0


class NudgeMemory:
    """Remembers orphans seen and nudged; one instance lives as long as the sweeper process."""

    def __init__(self, policy: RenudgePolicy | None = None) -> None:
        self.policy = policy or RenudgePolicy()
        self._entries: dict[Key, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def select(self, orphans: Iterable[Orphan], now_ms: int) -> list[Orphan]:
        """The orphans to nudge now; remembers first sightings of the others."""
        chosen: list[Orphan] = []
        for orphan in orphans:
            key = (orphan.conn_id, orphan.expires_at_ms)
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(first_seen_ms=now_ms)
            if self._due(orphan, entry, now_ms):
                chosen.append(orphan)
        return chosen

    def _due(self, orphan: Orphan, entry: _Entry, now_ms: int) -> bool:
        return now_ms >= self._due_at(orphan.expires_at_ms, entry)

    def _due_at(self, expires_at_ms: int, entry: _Entry) -> int:
        if entry.last_nudged_ms is not None:
            return entry.last_nudged_ms + self.policy.window_ms(entry.times_nudged)
        if expires_at_ms == 0:
            return entry.first_seen_ms + self.policy.unclaimed_grace_ms
        return entry.first_seen_ms

    def next_due_ms(self, now_ms: int) -> int | None:
        """When the first orphan remembered now becomes due (None: none waits), so the sweep
        can wake then: a released stream whose router nudge went astray (into a dead worker's
        pending long poll) is nudged again at the end of its grace, not up to a sweep later."""
        due = [self._due_at(expires, e) for (_, expires), e in self._entries.items()]
        return min((t for t in due if t > now_ms), default=None)

    def unowned_since_ms(self, orphan: Orphan) -> int | None:
        """When this process first saw ``orphan`` (None: never). For a released or never-claimed
        item (expiry 0) this is the only age there is: the KEYS_ONLY index has no timestamp."""
        entry = self._entries.get((orphan.conn_id, orphan.expires_at_ms))
        return None if entry is None else entry.first_seen_ms

    def record_sent(self, orphans: Iterable[Orphan], now_ms: int) -> None:
        """Note that these orphans were nudged at ``now_ms`` (call only for nudges SQS took)."""
        for orphan in orphans:
            key = (orphan.conn_id, orphan.expires_at_ms)
            entry = self._entries.setdefault(key, _Entry(first_seen_ms=now_ms))
            entry.last_nudged_ms = now_ms
            entry.times_nudged += 1

    def retain_only(self, orphans: Iterable[Orphan]) -> None:
        """After a sweep that saw every orphan: forget the ones no longer orphaned."""
        keep = {(o.conn_id, o.expires_at_ms) for o in orphans}
        self._entries = {k: e for k, e in self._entries.items() if k in keep}

    def prune(self, now_ms: int) -> None:
        """After a partial sweep: forget entries untouched for longer than any window."""
        horizon = 2 * self.policy.max_ms + self.policy.unclaimed_grace_ms
        self._entries = {
            k: e for k, e in self._entries.items()
            if now_ms - (e.last_nudged_ms if e.last_nudged_ms is not None else e.first_seen_ms)
            <= horizon}
