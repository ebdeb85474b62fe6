"""The delivery rules of one held stream, as a pure cursor: no socket, no clock, no DynamoDB.

The seq contract: on one connection an upstream sends increasing seqs, resuming at the
``from_seq`` we asked for (checkpoint + 1), possibly after a short overlap it re-sends.
For every parsed frame the connection asks ``admit(seq, now_mono_ms, fence_mono_ms)``:

- ``SKIP_REPLAY``: the resume overlap, silent. ``seq`` is at or below the checkpoint, the
  connection has sent nothing but such replays so far, and ``seq`` is within ``overlap`` of the
  checkpoint, or at or past the seq the connection asked to resume from (a warm handoff's
  socket, opened from the holder's checkpoint while the holder went on: its frames up to the
  transferred checkpoint, however many): the upstream re-sends what was already handled;
- ``FENCED``: the fence deadline has passed (the process was paused: SIGSTOP, a stalled VM);
  another worker may hold the lease by now, so nothing more reaches the handler;
- ``WENT_BACK``: any other seq at or below the checkpoint: the upstream went back (its
  numbering restarted, or a seq repeats after later ones on this connection). Not handed to the
  handler (its seq is already checkpointed: a sink would refuse it, the checkpoint cannot go
  back), logged (rate-limited per stream) and counted (``FramesSkipped``);
- ``REFUSED_JUMP``: ``seq`` is more than ``max_jump`` past the checkpoint: not handed to the
  handler, the checkpoint stays, logged (rate-limited) and counted. One absurd seq
  (``{"seq": 9223372036854775807}``) would otherwise become the checkpoint, and every later
  frame would go back below it;
- ``STALLED``: the ``stall_after``-th ``WENT_BACK`` or ``REFUSED_JUMP`` in a row on one
  connection, with no seq delivered between: the stream cannot make progress. The connection
  gives it up: released in BACKOFF with ``last_error`` naming the seqs (fix the upstream, or set
  ``last_seq`` to its new numbering), retried later with the growing give-up delay;
- ``GAP``: ``seq`` jumps past ``checkpoint + 1`` (by at most ``max_jump``); logged, and
  delivered all the same (the upstream lost them, waiting would not bring them back);
- ``DELIVER``: the next message (or a frame without a seq, which moves no checkpoint and
  touches none of the counters above).

A frame without a seq has no idempotency key, so the cursor can only place it: one that comes
between a replayed seq below the checkpoint and the checkpoint's own seq (or any later one) is
inside the replay, handled already (by this worker before a reconnect, or by the holder a warm
handoff's socket took over from), and is skipped as ``SKIP_REPLAY`` too. Before a connection's
first replayed seq (a greeting of that connection) and after the replay it is delivered; so one
the holder handled after its last seq, just before it stopped, reaches the successor too.

An upstream reset that restarts within ``overlap`` of the checkpoint looks exactly like a resume
overlap: it is skipped silently up to the checkpoint, then delivered. A reset further back is
``WENT_BACK`` for every frame up to the checkpoint, so it stalls and is given up.

Nothing moves the checkpoint but ``done(seq)``, which the connection calls once a handler call
for ``seq`` has succeeded (a failed call is retried; after the last attempt the message is
either sent to the on-failure queue first, or not passed at all: the stream parks on it,
``worker.handler``); it never moves backwards, so the checkpoint is never past a seq the
handler did not take. In particular a frame that kills the
connection (too big, not UTF-8) is never skipped: ``worker.connection`` gives the stream up
into BACKOFF instead. The jump bound needs a checkpoint to measure from: the very first seq of
a never-checkpointed stream is taken as it comes (and anchored first, ``anchor_for``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from holdfast.core import names

__all__ = ["RESUME_OVERLAP", "STALL_AFTER", "Delivery", "Step", "Verdict", "first_checkpoint"]

RESUME_OVERLAP = 100  # how far below the checkpoint a resume may start re-sending
STALL_AFTER = 100  # out-of-contract frames in a row on one connection before giving up


def first_checkpoint(seq: int | None) -> int | None:
    """The checkpoint a stream that starts at ``seq`` is anchored at (None: no seq)."""
    return None if seq is None else seq - 1


class Step(Enum):
    """What to do with one frame."""

    SKIP_REPLAY = "skip_replay"  # resume overlap: not delivered, silent
    WENT_BACK = "went_back"  # at or below the checkpoint, not an overlap: not delivered
    REFUSED_JUMP = "refused_jump"  # seq too far ahead of the checkpoint: not delivered
    STALLED = "stalled"  # too many of the two above in a row: give the stream up
    FENCED = "fenced"
    GAP = "gap"  # deliver, and log the seqs that never came
    DELIVER = "deliver"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A step and, for every step but ``DELIVER``, ``SKIP_REPLAY`` and ``FENCED``, the seq
    that was expected instead; ``streak`` counts the out-of-contract frames in a row on this
    connection, and ``cause`` says which kind the last one was (for ``STALLED``)."""

    step: Step
    expected: int | None = None
    streak: int = 0
    cause: Step | None = None

    def explain(self, seq: int | None) -> tuple[str, str]:
        """For an out-of-contract ``seq``: what it did, and what an operator can do about it."""
        checkpoint = None if self.expected is None else self.expected - 1
        if (self.cause or self.step) is Step.WENT_BACK:
            return (f"seq went back to {seq}, at or below the checkpoint {checkpoint}",
                    "upstream reset? set last_seq to resume from its new numbering")
        return (f"seq jumps to {seq}, more than {names.ENV_MAX_SEQ_JUMP} past the checkpoint "
                f"{checkpoint}", f"fix the upstream, or set last_seq or {names.ENV_MAX_SEQ_JUMP}")


class Delivery:
    """The cursor of one held stream: its checkpoint and how many messages were handled.

    ``checkpoint`` is the highest seq whose handler call has returned; None until the stream
    has one (never checkpointed, and no frame with a seq seen yet). The two counters of the
    current connection (still in its resume overlap; out-of-contract frames in a row) start
    again at ``connected()``.
    """

    __slots__ = ("_checkpoint", "_handled", "_in_overlap", "_max_jump", "_overlap",
                 "_replaying", "_resumed_from", "_stall_after", "_streak", "replayed")

    def __init__(self, checkpoint: int | None, *, max_jump: int | None = None,
                 overlap: int = RESUME_OVERLAP, stall_after: int = STALL_AFTER) -> None:
        self._checkpoint = checkpoint
        self._handled = 0
        self._max_jump = max_jump  # None: any jump forward is a gap, delivered
        self._overlap = overlap
        self._stall_after = stall_after
        self._in_overlap = True
        self._replaying = False  # between a replayed seq below the checkpoint and the checkpoint
        self._resumed_from: int | None = None
        self._streak = 0
        self.replayed = 0  # seqs of this connection skipped as its resume overlap

    @property
    def checkpoint(self) -> int | None:
        return self._checkpoint

    @property
    def handled(self) -> int:
        """Handler calls that have returned or raised."""
        return self._handled

    @property
    def next_seq(self) -> int | None:
        """The seq to resume from: right after the checkpoint (None: wherever upstream starts)."""
        return None if self._checkpoint is None else self._checkpoint + 1

    def connected(self, resumed_from: int | None = None) -> None:
        """A new connection (asked to resume from ``resumed_from``, if it was opened before
        the checkpoint moved: a warm handoff's): its first frames may be a resume overlap."""
        self._in_overlap = True
        self._replaying = False
        self._resumed_from = resumed_from
        self._streak = 0
        self.replayed = 0

    def closed_why(self, before: int | None) -> str:
        """Why a connection the upstream closed failed (``before``: the checkpoint when it
        opened): saying so when all it sent were seqs at or below the checkpoint. An upstream
        that restarts near it on every connection, ignoring the resume point, gave up as
        "closed the connection", its replays skipped without a word."""
        if self.replayed and self._checkpoint == before:
            return (f"upstream closed the connection after re-sending only seqs at or below "
                    f"the checkpoint {before} ({self.replayed} of them): is it ignoring the "
                    "resume point?")
        return "upstream closed the connection"

    def anchor_for(self, seq: int | None) -> int | None:
        """The first checkpoint (``seq - 1``) a never-checkpointed stream must write before
        handling ``seq``, so that a crash before the next heartbeat cannot skip it; else None."""
        if self._checkpoint is not None:
            return None
        return first_checkpoint(seq)

    def anchored(self, checkpoint: int) -> None:
        """The stream starts at ``checkpoint`` (written or not); a no-op once it has one."""
        if self._checkpoint is None:
            self._checkpoint = checkpoint

    def admit(self, seq: int | None, now_mono_ms: int, fence_mono_ms: int) -> Verdict:
        """Decide for one frame carrying ``seq`` (None: it has no seq).

        Moves no checkpoint; it only keeps the current connection's counters.
        """
        last = self._checkpoint
        if seq is None and self._replaying:
            return Verdict(Step.SKIP_REPLAY)  # inside a replay: the holder handled it
        if (seq is not None and last is not None and seq <= last and self._in_overlap
                and (seq > last - self._overlap or (
                    self._resumed_from is not None and seq >= self._resumed_from))):
            self._replaying = seq < last  # the checkpoint's own seq ends the replay
            self.replayed += 1
            return Verdict(Step.SKIP_REPLAY)  # hands nothing on: safe past the fence too
        if seq is not None:
            self._replaying = False
        if now_mono_ms >= fence_mono_ms:
            return Verdict(Step.FENCED)
        if seq is None or last is None:
            return Verdict(Step.DELIVER)
        if seq <= last:
            return self._out_of_contract(Step.WENT_BACK, last + 1)
        if self._max_jump is not None and seq > last + self._max_jump:
            return self._out_of_contract(Step.REFUSED_JUMP, last + 1)
        self._in_overlap, self._streak = False, 0
        if seq > last + 1:
            return Verdict(Step.GAP, expected=last + 1)
        return Verdict(Step.DELIVER)

    def _out_of_contract(self, step: Step, expected: int) -> Verdict:
        self._in_overlap = False
        self._streak += 1
        if self._streak >= self._stall_after:
            return Verdict(Step.STALLED, expected, self._streak, cause=step)
        return Verdict(step, expected, self._streak)

    def done(self, seq: int | None) -> None:
        """``seq`` is taken (a handler call succeeded, or the on-failure queue has it): the
        checkpoint may move past it."""
        self._handled += 1
        if seq is not None and (self._checkpoint is None or seq > self._checkpoint):
            self._checkpoint = seq
