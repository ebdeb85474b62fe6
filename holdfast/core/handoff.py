"""Make-before-break handoffs: the messages two workers exchange on their order queues.

A holder letting a stream go (a shed, a drain, a SIGTERM) to the successor the decider named
(``holdfast.core.placement``) first asks it to warm up; the lease moves only once the
successor's connection is open, in one conditional write (``store.LeaseStore.transfer``):

    holder --WARM(epoch E, from seq F)--> successor   opens the upstream from F, buffers
    holder <--READY(E)-------------------- successor   (or ABORT: no room, cannot connect)
    holder: stops delivering after seq K (the handler call in flight finishes), then writes
            owner = successor, epoch E' > E, last_seq = K   (condition: owner and epoch E)
    holder --TAKE(epoch E', seq K, at T)-> successor   delivers K + 1... from its buffer

A stream whose upstream allows one connection at a time (``single_connection`` on the item, or
``HOLDFAST_SINGLE_CONNECTION``) is handed over break-before-make the same way, with RESERVE
instead of WARM: the successor checks the item and keeps a slot but connects nothing before
READY; the holder closes its socket before it writes the transfer, and the successor connects
from K + 1 on TAKE. One write (the transfer), as for a warm handoff; a plain named release
would cost two (the release and the successor's acquire) and a nudge in the gap.

The handler never sees two deliverers (the holder stops before the write, and sends TAKE only
once the write landed) and never a seq twice (the successor's delivery rules skip what is at or
below K). The successor trusts a TAKE only from the holder it warmed up for, with an epoch past
the one it warmed up at (a stale or repeated TAKE matches no warm-up); anything else, it reads
the item back first. It also looks for the transfer in the table right after READY
(``TAKE_LOOK_*``): the item naming it past the warm-up's epoch is the same proof as TAKE, and a
read comes sooner than the message on a loaded machine. So the gap is the write and the first
of one message or one read (and, after RESERVE, the connect). In a warm handoff the upstream
sees two connections for a moment.
Every step is bounded: no READY within ``WARM_TIMEOUT_MS`` (or the stop budget), or a TAKE
that never comes (``TAKE_TIMEOUT_MS``), or a buffer past ``BUFFER_MAX_FRAMES``: the warm-up is
dropped and the holder falls back to a plain release (break-before-make, to whoever has room).
A holder that dies mid-handoff is an ordinary failover: a successor whose TAKE is late
(``TAKE_CHECK_MS``) looks in the table and takes the stream if the transfer landed, or claims
it once the holder is reaped.

Messages are JSON with the recipient's ``owner`` (one parser: ``directives.parse_inbox_body``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from holdfast.core import rules
from holdfast.core.liveness import session_owner
from holdfast.core.model import MAX_SEQ, validate_conn_id

__all__ = ["ABORT", "BUFFER_MAX_FRAMES", "READY", "RESERVE", "STEPS", "STOP_AFTER_FRAME_WAIT_MS",
           "TAKE", "TAKE_CHECK_MS", "TAKE_LOOK_EVERY_MS", "TAKE_LOOK_FIRST_MS",
           "TAKE_LOOK_FOR_MS", "TAKE_TIMEOUT_MS", "WARM", "WARM_TIMEOUT_MS", "HandoffStep",
           "parse_step", "take_says_the_transfer"]

WARM: Final = "warm"
# WARM for a stream that allows one connection at a time: keep a slot, connect only on TAKE.
# A step of its own, not a flag on WARM: a worker that does not know it ignores it (the holder
# falls back after WARM_TIMEOUT_MS) instead of reading a WARM and opening a second connection.
RESERVE: Final = "reserve"
READY: Final = "ready"
TAKE: Final = "take"
ABORT: Final = "abort"
STEPS: Final = (WARM, RESERVE, READY, TAKE, ABORT)
# A successor that has not connected by then is not waited for (a connect takes tens of ms).
WARM_TIMEOUT_MS: Final = 3_000
# A warmed-up connection the holder never hands over is closed after this long.
TAKE_TIMEOUT_MS: Final = 10_000
# A TAKE not come this long after READY is looked for in the table, as often until it comes
# (its transfer may have landed and the message been lost, or the holder died): normally it
# comes within a frame's spacing (``STOP_AFTER_FRAME_WAIT_MS``), a write and one message.
TAKE_CHECK_MS: Final = 1_000
# Right after READY the successor also looks for the transfer in the table (consistent reads,
# one BatchGetItem for all its warm-ups) every ``TAKE_LOOK_EVERY_MS`` from
# ``TAKE_LOOK_FIRST_MS`` on, for ``TAKE_LOOK_FOR_MS``; whichever comes first, the look or
# TAKE, starts the stream. Under the bench's deploy the TAKE message took 95 ms p50 from its
# send to the successor's receive (5 ms when idle); the successor's claim came 117 ms p50
# after the holder's "handed over" by TAKE, 60 ms by the looks (5 at once): the gap was p50 / p99
# 0.16 / 0.27 s with TAKE alone, 0.11 / 0.22 with the looks (3 per move p50, 6 at most). One
# GetItem per warm-up instead, with three workers stopping at once (up to 20 warm handoffs
# each), 67 of 300 warm-ups missed the 3 s READY wait.
TAKE_LOOK_FIRST_MS: Final = 60
TAKE_LOOK_EVERY_MS: Final = 25
TAKE_LOOK_FOR_MS: Final = 800
# Frames a successor buffers while the holder still delivers (at 1,000 msgs/s: 10 s).
BUFFER_MAX_FRAMES: Final = 10_000
# On READY the holder stops right after its next frame with a seq (the successor can place
# seq-less frames only by the seqs around them), when the one after is furthest away:
# the transfer and the TAKE then fit in the feed's own spacing instead of adding to it (stopping
# at once, somewhere between two frames, left on average half a spacing less room). A stream
# quiet for this long is stopped anyway: its gap is not waiting on the handoff.
STOP_AFTER_FRAME_WAIT_MS: Final = 250


@dataclass(frozen=True, slots=True)
class HandoffStep:
    """One message of a handoff: ``kind`` (``STEPS``), the stream, the epoch it is about
    (WARM, RESERVE, READY, ABORT: the holder's; TAKE: the successor's new one), ``seq`` (WARM:
    where to start reading; TAKE: the last seq the holder delivered; None: none yet) and ``peer``,
    the sender's owner (the reply goes to its order queue). ``at`` (TAKE only): when the
    holder wrote the transfer (wall ms, the item's ``moved_at_ms``; its expiry is this plus
    the lease length), so the successor needs no read to hold the stream."""

    kind: str
    conn_id: str
    epoch: int
    seq: int | None
    peer: str
    at: int | None = None

    def body(self, owner: str) -> str:
        """The order-queue message of this step for ``owner`` (the recipient)."""
        step: dict[str, Any] = {"conn_id": self.conn_id, "epoch": self.epoch, "seq": self.seq,
                                "peer": self.peer}
        if self.at is not None:
            step["at"] = self.at
        return json.dumps({"owner": owner, self.kind: step}, separators=(",", ":"))


def parse_step(data: dict[str, Any]) -> HandoffStep | None:
    """The handoff step in a parsed order-queue message (its owner already checked); None if
    it is none or malformed."""
    kinds = [k for k in STEPS if k in data]
    if len(kinds) != 1 or not isinstance(data[kinds[0]], dict):
        return None
    d = data[kinds[0]]
    conn_id, epoch, seq, peer = d.get("conn_id"), d.get("epoch"), d.get("seq"), d.get("peer")
    at = d.get("at")
    if not isinstance(conn_id, str) or not isinstance(peer, str) or session_owner(peer) is None:
        return None
    if not _int(epoch) or not (seq is None or _int(seq)) or not (at is None or _int(at)):
        return None
    try:
        conn_id = validate_conn_id(conn_id)
    except ValueError:
        return None
    return HandoffStep(kinds[0], conn_id, epoch, seq, peer, at)


def take_says_the_transfer(step: HandoffStep, *, holder_epoch: int, checkpoint: int | None,
                           now_ms: int, lease_ms: int, skew_ms: int) -> bool:
    """Whether a TAKE says what the holder's transfer of its holding at ``holder_epoch``
    (``checkpoint``: as the warm-up read it) would have written: the epoch the transfer
    computes from its time (``rules.next_epoch``), that time within a lease before ``now_ms``
    (and no further ahead than the clocks' skew), a final checkpoint not behind the one read.

    The successor starts on such a TAKE without reading the table (the handoff's gap has no
    read in it); any other goes to the read. An order queue's message is anyone's with send
    permission: a forged TAKE (epoch 2**63-1, seq -1) started a second deliverer and, through
    the handler's fence, blocked every later holder's writes."""
    if step.at is None or step.epoch != rules.next_epoch(step.at, holder_epoch):
        return False
    if not now_ms - lease_ms <= step.at <= now_ms + skew_ms:
        return False
    return checkpoint is None or (step.seq is not None and step.seq >= checkpoint)


def _int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and -1 <= x <= MAX_SEQ

