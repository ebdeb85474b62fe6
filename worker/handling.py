"""One frame of a held stream, from the socket to the handler: the delivery rules' I/O.

Which frame reaches the handler is decided by the pure rules of ``worker.delivery`` (the seq
contract; nothing is skipped without a handler call); this module applies them and calls the
handler. A handler that keeps failing on one message is retried on this stream's task only
(other streams never wait for it) and then, by the policy (``worker.handler``), parks the
stream (``GiveUp``: the supervisor hands the lease back, BACKOFF, ``last_error``) or skips the
message once the on-failure queue has it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holdfast.core import names
from holdfast.worker.delivery import Step
from holdfast.worker.handler import Message, call_once, failure_body
from holdfast.worker.protocol import Parsed, checked

if TYPE_CHECKING:
    from holdfast.worker.connection import Connection

__all__ = ["ANCHOR_RETRY_S", "ANCHOR_TRIES", "GiveUp", "Handling"]

# Between two tries of a first checkpoint that did not land (each a DynamoDB write with its
# own retries): the stream waits, unhandled, until it lands or the stream is fenced; past
# ANCHOR_TRIES (a refusal for good, the item's own fault, with the session healthy) it gives up.
ANCHOR_RETRY_S = 0.2
ANCHOR_TRIES = 50


class GiveUp(Exception):
    """The stream cannot make progress on this upstream: hand it back with this error."""

    def __init__(self, error: str,
                 why: str = "upstream breaks the seq contract, giving the stream back") -> None:
        super().__init__(error)
        self.why = why


class Handling:
    """The frames of one connection (``worker.connection``): rules applied, handler called."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.in_call = False  # a handler call (or its on-failure send) is in flight
        # The last frame taken (in flight, or done) carried a seq. A handoff's stop waits for
        # such a frame: what follows a seq-less one cannot be told apart from it at the
        # successor, which would hand it on again (``worker.delivery``).
        self.after_seq = False

    async def frame(self, frame: str | bytes) -> None:
        """Apply the delivery rules (``worker.delivery``) to one frame; here only the I/O."""
        conn = self.conn
        held = conn.held
        try:
            parsed = checked(conn.ctx.protocol.parse(frame))
        except Exception:  # a plugged-in protocol's bug must not kill the stream on every replay
            parsed = Parsed(None, frame, malformed=True)
        if parsed.malformed:
            conn.ctx.metrics.incr(names.METRIC_MALFORMED_FRAMES)
            conn.log_limited("malformed", "warning", "frame out of contract, handed on "
                             "without seq", why=parsed.why or "not parseable", size=len(frame))
        seq = parsed.seq
        self.after_seq = seq is not None
        anchor = held.cursor.anchor_for(seq)
        if anchor is not None:
            # No checkpoint anywhere yet: the stream starts here for whoever holds it next.
            # Nothing is handled before it is stored: a crash would leave the next holder to
            # start wherever the upstream is then. Tried again until it lands, or the stream
            # is fenced (its session failing too), aborted, lost, or stopping (STOPPED meanwhile:
            # the write is refused for good, and the stop waits for this frame to end).
            tries = 0
            while conn.ctx.anchor is not None and not await conn.ctx.anchor(conn, anchor):
                if not held.live or held.stopping:
                    return
                tries += 1
                if tries >= ANCHOR_TRIES:
                    raise GiveUp(f"the first checkpoint could not be stored ({tries} tries, "
                                 "see the worker's log): nothing handled")
                await conn.ctx.sleep(ANCHOR_RETRY_S)
            held.cursor.anchored(anchor)
        if not held.live:
            return  # aborted, fenced or lost meanwhile: no more handler calls
        verdict = held.admit(seq, conn.ctx.mono())
        if verdict.step is Step.SKIP_REPLAY:
            return  # a replay of what was already handled (resume overlap)
        if verdict.step in (Step.WENT_BACK, Step.REFUSED_JUMP, Step.STALLED):
            # Out of the seq contract (``worker.delivery``): counted, logged, not handled.
            conn.ctx.metrics.incr(names.METRIC_FRAMES_SKIPPED)
            what, fix = verdict.explain(seq)
            if verdict.step is Step.STALLED:  # the stream cannot make progress: given up
                raise GiveUp(f"{what}: {verdict.streak} frames in a row out of the seq "
                             f"contract, none handled ({fix})")
            conn.log_limited((verdict.cause or verdict.step).value, "error",
                             f"{what}: frame not handled, checkpoint kept",
                             expected=verdict.expected, got=seq, streak=verdict.streak)
            return
        if verdict.step is Step.FENCED:
            # Past the fence (the process was paused: SIGSTOP, a stalled VM): another worker
            # may hold the lease by now, and frames buffered during the pause must not reach
            # the handler before the fence watcher runs. Found by the chaos soak.
            conn.log("error", "self-fencing: past the fence deadline, frame not handled",
                     seq=seq)
            conn.fence()
            return
        if verdict.step is Step.GAP:
            # Limited: an upstream whose seqs are sparse (one counter over many channels)
            # makes every frame a gap, and a line per frame.
            conn.log_limited("gap", "warning", "gap in upstream sequence",
                             expected=verdict.expected, got=seq)
        message = Message(conn.conn_id, seq, parsed.data, conn.ctx.worker_id,
                          epoch=held.lease.epoch)
        if not await self._until_done(message):
            return  # stopped meanwhile: not handled, the checkpoint stays before it
        held.cursor.done(seq)
        conn.ctx.metrics.incr(names.METRIC_MESSAGES_HANDLED)
        if conn.trace is not None:  # the first handled message ends the trace; then nothing
            conn.trace.close()
            conn.trace = None

    async def _until_done(self, message: Message) -> bool:
        """Call the handler until a call succeeds; True once the checkpoint may pass it.

        A call that raises or times out is retried after a jittered back-off (this stream's
        task sleeps, no other); after ``handler_attempts`` calls the policy parks the stream
        (``GiveUp``) or sends the message to the on-failure queue. False: the stream stopped
        meanwhile, the message stays unhandled for whoever resumes it.
        """
        conn = self.conn
        ctx, held = conn.ctx, conn.held
        attempt = 0
        while True:
            attempt += 1
            self.in_call = True  # a drain lets the call in flight finish
            try:
                failed = await call_once(ctx.handler, message, ctx.handler_timeout_s)
            finally:
                self.in_call = False
            if failed is None:
                return True
            ctx.metrics.incr(names.METRIC_HANDLER_TIMEOUTS if failed.timed_out
                             else names.METRIC_HANDLER_ERRORS)
            conn.log("error", names.LOG_HANDLER_TIMED_OUT if failed.timed_out
                     else names.LOG_HANDLER_RAISED, seq=message.seq, attempt=attempt,
                     error=failed.error,
                     # Where in the handler it failed, once per message (not per retry).
                     **({"exc_info": failed.exc} if failed.exc is not None and attempt == 1
                        else {}))
            if held.stopping or attempt >= ctx.handler_attempts:
                break
            ctx.metrics.incr(names.METRIC_HANDLER_RETRIES)
            await ctx.sleep(ctx.handler_backoff.delay_s(attempt))  # a drain cancels it
            if held.stopping or self._past_fence(message, "retry not made"):
                break
        if held.stopping or self._past_fence(message, "not sent to the on-failure queue"):
            return False  # the next holder has the message too: it is not ours to send
        return await self._after_failures(message, failed.error, attempt)

    def _past_fence(self, message: Message, what: str) -> bool:
        """Past the fence (the process was paused meanwhile): the stream is fenced, nothing
        more of it is handed on, not even to the on-failure queue."""
        conn, held = self.conn, self.conn.held
        if not held.live or conn.ctx.mono() < held.deadline():
            return False
        conn.log("error", f"self-fencing: past the fence deadline, {what}", seq=message.seq)
        conn.fence()
        return True

    async def _after_failures(self, message: Message, error: str, attempts: int) -> bool:
        """The last attempt failed: skip once the on-failure queue has it, else park."""
        conn = self.conn
        if conn.ctx.on_failure == names.HANDLER_ON_FAILURE_SKIP and conn.ctx.send_failure:
            self.in_call = True  # a drain waits for SQS's answer
            try:
                await conn.ctx.send_failure(failure_body(message, error, attempts))
            except Exception as exc:  # nothing lost: the stream parks on this seq instead
                error = (f"{error[:300]}; not skipped, the on-failure queue refused it: "
                         f"{type(exc).__name__}: {str(exc)[:300]}")
            else:
                conn.ctx.metrics.incr(names.METRIC_HANDLER_FAILURES_SENT_TO_QUEUE)
                conn.log("warning", "handler failed, message sent to the on-failure queue and "
                         "skipped", seq=message.seq, attempts=attempts)
                return True
            finally:
                self.in_call = False
        conn.ctx.metrics.incr(names.METRIC_HANDLER_FAILURES_PARKED)
        if message.seq is None:
            # No seq, no resume point: the next holder starts after the last checkpoint, at the
            # upstream's next seq, and this frame is never delivered again. Said, not silent.
            conn.log("error", "a frame without a seq failed every attempt and is lost (nothing "
                     "to resume it from; HOLDFAST_HANDLER_ON_FAILURE=skip would queue it)",
                     attempts=attempts, size=len(message.data), error=error[:300])
            raise GiveUp(f"handler failed {attempts} times on a frame without a seq (lost: "
                         f"nothing to resume it from), stream parked: {error}"[:1000],
                         why="handler keeps failing, parking the stream")
        raise GiveUp(f"handler failed {attempts} times on seq {message.seq}, stream parked to "
                      f"resume from it: {error}"[:1000],
                      why="handler keeps failing, parking the stream")
