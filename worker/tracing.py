"""The spans of one held stream after its claim: ``connect``, then ``first message handled``.

Created only when tracing is on (``holdfast.core.tracing``) and dropped at the first handled
message, so a held stream's per-message path carries one ``is None`` check and nothing else.
Both spans are children of the stream's ``claim`` span, which has ended by then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holdfast.core import names, tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["StreamTrace"]


class StreamTrace:
    """The acquisition trace of one stream from its claim to its first handled message."""

    def __init__(self, claim: Span, conn_id: str, worker_id: str) -> None:
        self.claim, self.conn_id, self.worker_id = claim, conn_id, worker_id
        self._connect: Span | None = None
        self._first: Span | None = None

    def connecting(self) -> None:
        """A dial begins; the first one starts ``connect`` (reconnects before it opens count)."""
        if self._connect is None and self._first is None:
            self._connect = tracing.start_span(names.SPAN_CONNECT, self.conn_id,
                                               worker_id=self.worker_id, parent=self.claim)

    def connected(self) -> None:
        """The WebSocket is open: ``connect`` ends, waiting for the first message begins."""
        if self._connect is not None:
            self._connect.end()
            self._connect = None
        if self._first is None:
            self._first = tracing.start_span(names.SPAN_FIRST_MESSAGE, self.conn_id,
                                             worker_id=self.worker_id, parent=self.claim)

    def close(self) -> None:
        """End what is still open: at the first handled message (the trace is complete, the
        caller drops it), or when the stream stops before it."""
        for span in (self._connect, self._first):
            if span is not None:
                span.end()
        self._connect = self._first = None
