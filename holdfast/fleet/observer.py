"""What the table says happened, derived from periodic scans: pure, no clock and no I/O.

Each ``observe(t, wall_ms, items)`` compares the lease items with the previous scan and emits
events (claimed, released, expired, moved, resumed from seq N) and closes or opens ownership
segments for the timeline. ``t`` is seconds since the run started (monotonic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from holdfast.cli.fleetstate import holding
from holdfast.core.liveness import Liveness, owner_liveness
from holdfast.core.model import LeaseItem
from holdfast.core.redact import scrub
from holdfast.core.schema import LeaseStatus, SessionState, session_of_owner
from holdfast.core.sessions import SessionItem

__all__ = ["RATE_QUIET_S", "Event", "Observer", "Segment", "StreamView", "worker_id_of"]

# A stream whose checkpoint has not moved for this long, or three of its own intervals if
# longer, shows 0 checkpointed/s (it stopped delivering, or checkpoints every 20 s).
RATE_QUIET_S = 5.0


def worker_id_of(owner: str) -> str:
    """The worker id of a lease owner: ``<worker>#<incarnation>`` for a session owner, else
    the owner itself (the seed's per-stream leases name the worker alone)."""
    session = session_of_owner(owner)
    return session[0] if session else owner


def _released_how(owner: str, sessions: Mapping[str, SessionItem] | None) -> str:
    """Who wrote a release the scan saw: the holder itself, unless its session was already
    dead (a SIGKILL the platform reported, a hang past its TTL): a dead process writes nothing,
    so the reaper (taskstopped or the sweeper) freed the stream from that session."""
    session = _session(owner, sessions)
    if session is None:
        return "released by"
    if session.owner != owner:
        return f"freed by {session.worker_id}'s next incarnation from its predecessor"
    if session.state is SessionState.DEAD:
        return "freed by the reaper (taskstopped or sweeper) from the dead session of"
    return "released by"


def _gone(owner: str, sessions: Mapping[str, SessionItem] | None, wall_ms: int,
          skew_ms: int) -> bool:
    """Whether ``owner``'s session is known to have died (DEAD, silent past its TTL, or
    replaced by a new incarnation): its streams moved by failover, not by its own handoff
    (an ENDED one said goodbye after handing them over)."""
    session = _session(owner, sessions)
    verdict, _ = owner_liveness(owner, session, wall_ms, skew_ms)
    ended = session is not None and session.owner == owner and (
        session.state is SessionState.ENDED)
    return verdict is Liveness.SILENT or (verdict is Liveness.GONE and not ended)


def _session(owner: str, sessions: Mapping[str, SessionItem] | None) -> SessionItem | None:
    """The session item of ``owner``'s worker as the scan read it (maybe a later incarnation's);
    None: none, or ``owner`` names no session."""
    parsed = session_of_owner(owner)
    return sessions.get(parsed[0]) if sessions is not None and parsed else None


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the event log."""

    t: float
    kind: str  # claimed / released / expired / moved / stopped / removed / note / action
    conn_id: str | None
    text: str


@dataclass(slots=True)
class Segment:
    """``owner`` held ``conn_id`` from ``start`` to ``end`` (None: still holds it)."""

    conn_id: str
    owner: str
    start: float
    end: float | None = None


@dataclass(slots=True)
class StreamView:
    """The latest known state of one stream, for the live view."""

    conn_id: str
    desired_state: str
    owner: str | None
    epoch: int
    last_seq: int | None
    lease_left_ms: int | None
    status: str | None
    rate: float = 0.0  # checkpointed messages per second, smoothed
    seq_at: tuple[float, int] | None = None  # when ``last_seq`` was last seen to move
    rate_from_move: bool = False  # ``seq_at`` is a move seen (not the first sight)
    move_every_s: float = 0.0  # the time between the last two moves seen


@dataclass
class Observer:
    """Turns successive scans into events, segments and per-stream views."""

    streams: dict[str, StreamView] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    _open: dict[str, Segment] = field(default_factory=dict)

    def owner_of(self, conn_id: str) -> str | None:
        view = self.streams.get(conn_id)
        return view.owner if view else None

    def worker_of(self, conn_id: str) -> str | None:
        """The worker id holding ``conn_id`` now (None: nobody)."""
        owner = self.owner_of(conn_id)
        return worker_id_of(owner) if owner else None

    def loads(self) -> dict[str, int]:
        """Streams held per worker id (a session owner ``<worker>#<incarnation>`` counts for
        its worker, so the scenario's "busiest worker" and the live view see real loads)."""
        out: dict[str, int] = {}
        for v in self.streams.values():
            if v.owner:
                worker = worker_id_of(v.owner)
                out[worker] = out.get(worker, 0) + 1
        return out

    def observe(self, t: float, wall_ms: int, items: list[LeaseItem],
                sessions: Mapping[str, SessionItem] | None = None, skew_ms: int = 0) -> list[Event]:
        """One scan; with ``sessions`` (worker id -> session item) only a live session holds a
        stream (``holdfast.cli.fleetstate.holding``), else an unexpired lease does."""
        new: list[Event] = []
        seen: set[str] = set()
        for item in items:
            seen.add(item.conn_id)
            h = holding(item, wall_ms, sessions, skew_ms)
            owner = item.lease_owner if h.held else None
            old = self.streams.get(item.conn_id)
            view = StreamView(item.conn_id, item.desired_state, owner, item.epoch,
                              item.last_seq, h.left_ms, item.status)
            if old is not None:
                view.rate, view.seq_at = old.rate, old.seq_at
                view.rate_from_move, view.move_every_s = old.rate_from_move, old.move_every_s
                if old.desired_state != item.desired_state:
                    new.append(Event(t, item.desired_state.lower(), item.conn_id,
                                     f"{item.conn_id} set to {item.desired_state}"))
            self._rate(view, t)
            self.streams[item.conn_id] = view
            prev_owner = old.owner if old else None
            prev_epoch = old.epoch if old else item.epoch
            if owner == prev_owner and item.epoch == prev_epoch:
                continue
            if prev_owner is not None:
                self._close(item.conn_id, t)
            resume = "" if item.last_seq is None else f", resumed from seq {item.last_seq + 1}"
            if owner is not None:
                self._open[item.conn_id] = seg = Segment(item.conn_id, owner, t)
                self.segments.append(seg)
                if prev_owner is not None and prev_owner != owner:
                    # Between two scans: a handoff, or a claim after its holder went silent.
                    verb = ("failed over" if _gone(prev_owner, sessions, wall_ms, skew_ms)
                            else "moved")
                    new.append(Event(t, "moved", item.conn_id,
                                     f"{item.conn_id} {verb} {prev_owner} -> {owner}{resume}"))
                else:
                    new.append(Event(t, "claimed", item.conn_id,
                                     f"{item.conn_id} claimed by {owner}{resume}"))
            elif prev_owner is not None:
                released = item.lease_owner is None
                kind = "released" if released else "expired"
                how = _released_how(prev_owner, sessions) if released else (
                    f"stranded ({h.stranded}), was held by" if h.stranded
                    else "lease expired, was held by")
                # A give-up says why, here where the user watches (the handler's errors, the
                # upstream's), not only in the worker logs and `holdfast ls`.
                why = (f"; gave up: {scrub(item.last_error, item.ws_url)[:200]}"
                       if released and item.status == LeaseStatus.BACKOFF and item.last_error
                       else "")
                new.append(Event(t, kind, item.conn_id,
                                 f"{item.conn_id} {how} {prev_owner} (last_seq "
                                 f"{item.last_seq}{why})"))
        for gone in [c for c in self.streams if c not in seen]:
            if self.streams[gone].owner is not None:
                self._close(gone, t)
            del self.streams[gone]
            new.append(Event(t, "removed", gone, f"{gone} removed from the table"))
        self.events.extend(new)
        return new

    def note(self, t: float, text: str, kind: str = "note") -> Event:
        event = Event(t, kind, None, text)
        self.events.append(event)
        return event

    def finish(self, t: float) -> None:
        for conn_id in list(self._open):
            self._close(conn_id, t)

    def _close(self, conn_id: str, t: float) -> None:
        seg = self._open.pop(conn_id, None)
        if seg is not None:
            seg.end = t

    @staticmethod
    def _rate(view: StreamView, t: float) -> None:
        """Checkpointed seqs per second, measured from one checkpoint move seen to the next:
        a checkpoint moves once per interval (2 s in the local fleet), so a fixed 1 s window
        saw a whole interval's seqs or none and the rate swung between 6.6 and 13.2 on a
        10 msgs/s feed. One whose checkpoint stands still long enough shows 0 (``RATE_QUIET_S``)."""
        if view.last_seq is None:
            return
        if view.seq_at is None:
            view.seq_at = (t, view.last_seq)
            view.rate_from_move = False  # seen mid-interval: the first move measures nothing
            return
        t0, s0 = view.seq_at
        if view.last_seq == s0:
            if t - t0 >= max(RATE_QUIET_S, 3 * view.move_every_s):
                view.rate = 0.0
            return
        if view.rate_from_move and t > t0:
            inst = max(0.0, (view.last_seq - s0) / (t - t0))
            view.rate = inst if view.rate == 0 else 0.7 * view.rate + 0.3 * inst
            view.move_every_s = t - t0
        view.seq_at, view.rate_from_move = (t, view.last_seq), True
