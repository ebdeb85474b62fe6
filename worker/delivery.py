"""The delivery rules of one held stream, as a pure cursor: no socket, no clock, no DynamoDB.

For every parsed frame the connection asks ``admit(seq, now_mono_ms, fence_mono_ms)``:

- ``SKIP_REPLAY``: ``seq`` is at or below the checkpoint, a replay of what was already handled
  (the resume overlap after a reconnect or a handover): not handed to the handler;
- ``FENCED``: the fence deadline has passed (the process was paused: SIGSTOP, a stalled VM);
  another worker may hold the lease by now, so nothing more reaches the handler;
- ``REFUSED_JUMP``: ``seq`` is more than ``max_jump`` past the checkpoint: not handed to the
  handler and the checkpoint stays. One absurd seq (``{"seq": 9223372036854775807}``) would
  otherwise become the checkpoint, and every later frame would be skipped as a replay forever;
- ``GAP``: ``seq`` jumps past ``checkpoint + 1`` (by at most ``max_jump``); logged, and
  delivered all the same (the upstream lost them, waiting would not bring them back);
- ``DELIVER``: the next message (or a frame without a seq, which moves no checkpoint).

A replay is skipped before the fence is looked at: skipping hands nothing to the handler, so it
is safe either way. The jump bound needs a checkpoint to measure from: the very first seq of a
never-checkpointed stream is taken as it comes. The checkpoint moves only in ``done(seq)``,
which the connection calls after the handler call has returned (or raised: a failed message is
not retried), and in ``skip_poison``; it never moves backwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Delivery", "Step", "Verdict"]


class Step(Enum):
    """What to do with one frame."""

    SKIP_REPLAY = "skip_replay"
    REFUSED_JUMP = "refused_jump"  # seq too far ahead of the checkpoint: not delivered
    FENCED = "fenced"
    GAP = "gap"  # deliver, and log the seqs that never came
    DELIVER = "deliver"

    @property
    def delivers(self) -> bool:
        return self in (Step.GAP, Step.DELIVER)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A step and, for ``GAP`` and ``REFUSED_JUMP``, the seq that was expected instead."""

    step: Step
    expected: int | None = None


class Delivery:
    """The cursor of one held stream: its checkpoint and how many messages were handled.

    ``checkpoint`` is the highest seq whose handler call has returned; None until the stream
    has one (never checkpointed, and no frame with a seq seen yet).
    """

    __slots__ = ("_checkpoint", "_handled", "_max_jump")

    def __init__(self, checkpoint: int | None, *, max_jump: int | None = None) -> None:
        self._checkpoint = checkpoint
        self._handled = 0
        self._max_jump = max_jump  # None: any jump forward is a gap, delivered

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

    def anchor_for(self, seq: int | None) -> int | None:
        """The first checkpoint (``seq - 1``) a never-checkpointed stream must write before
        handling ``seq``, so that a crash before the next heartbeat cannot skip it; else None."""
        if seq is None or self._checkpoint is not None:
            return None
        return seq - 1

    def anchored(self, checkpoint: int) -> None:
        """The stream starts at ``checkpoint`` (written or not); a no-op once it has one."""
        if self._checkpoint is None:
            self._checkpoint = checkpoint

    def admit(self, seq: int | None, now_mono_ms: int, fence_mono_ms: int) -> Verdict:
        """Decide for one frame carrying ``seq`` (None: it has no seq)."""
        last = self._checkpoint
        if seq is not None and last is not None and seq <= last:
            return Verdict(Step.SKIP_REPLAY)
        if (seq is not None and last is not None and self._max_jump is not None
                and seq > last + self._max_jump):
            return Verdict(Step.REFUSED_JUMP, expected=last + 1)
        if now_mono_ms >= fence_mono_ms:
            return Verdict(Step.FENCED)
        if seq is not None and last is not None and seq > last + 1:
            return Verdict(Step.GAP, expected=last + 1)
        return Verdict(Step.DELIVER)

    def skip_poison(self, seq: int) -> bool:
        """Give up on ``seq`` (the frame at the resume point kept killing the connection): the
        checkpoint moves to it without a handler call. False if it is already behind us."""
        if self._checkpoint is not None and seq <= self._checkpoint:
            return False
        self._checkpoint = seq
        return True

    def done(self, seq: int | None) -> None:
        """The handler call for ``seq`` has returned (or raised): the checkpoint may move."""
        self._handled += 1
        if seq is not None and (self._checkpoint is None or seq > self._checkpoint):
            self._checkpoint = seq
