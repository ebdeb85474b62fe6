"""The handler plug-in: one async function called per upstream message, in order per stream.

``HOLDFAST_HANDLER="package.module:function"`` names it. It receives a ``Message`` with
``conn_id``, ``seq`` (int or None), ``data`` (str or bytes), ``worker_id`` and ``epoch``.
Whatever it raises (also ``SystemExit`` or a ``CancelledError`` of its own) is its call's
failure, logged and counted by the caller; it never ends the worker.

The contract loses nothing by default: a call that raises or times out is retried (the same
message, after a jittered back-off, ``HOLDFAST_HANDLER_ATTEMPTS`` calls in all) and the
checkpoint never passes it. After the last attempt ``HOLDFAST_HANDLER_ON_FAILURE`` decides:
``park`` (default) hands the stream back in BACKOFF with ``last_error`` naming the seq, and the
next holder resumes from that seq; ``skip`` sends the message to the on-failure SQS queue
(``failure_body``, ``FailureQueue``) and moves on only once SQS accepted it (a refused send
parks instead). A handler must therefore be idempotent on ``conn_id:seq``.

``epoch`` is the lease epoch, a fencing token: higher on every acquisition of the stream
(the wall clock in milliseconds is its floor), so a later holder always has a higher one. A
downstream that remembers the highest epoch it has seen per ``conn_id`` can refuse a late
write from a holder that lost the lease (a paused process); ``conn_id:epoch:seq`` names one
delivery attempt uniquely. Deduplicate replays on ``conn_id:seq``: after a handover the new
holder replays the overlap under a new epoch.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from holdfast.core import aws, names
from holdfast.core import settings as S
from holdfast.core.exceptions import ConfigError
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["CallFailed", "FailureQueue", "Handler", "HandlerLoadError", "Message", "call_once",
           "default_handler", "failure_body", "load_handler"]

logger = Logger(service=WORKER_LOGGER, child=True)


class HandlerLoadError(ConfigError):
    """HOLDFAST_HANDLER or HOLDFAST_PROTOCOL names a plug-in that cannot be imported or used."""


@dataclass(frozen=True, slots=True)
class Message:
    """One upstream message as the handler sees it."""

    conn_id: str
    seq: int | None
    data: str | bytes
    worker_id: str
    # Last and defaulted, so ``Message(conn_id, seq, data, worker_id)`` still constructs.
    epoch: int = 0


Handler = Callable[[Message], Awaitable[object]]


async def default_handler(message: Message) -> None:
    """Log one line per message at debug level (the demo's handler)."""
    logger.debug("message", conn_id=message.conn_id, seq=message.seq,
                 size=len(message.data))


def load_handler(spec: str | None) -> Handler:
    """Import ``package.module:function``; ``HandlerLoadError`` if it is missing or not async."""
    if not spec:
        return default_handler
    try:  # the setting's own shape first: "myapp.handlers" tried getattr(module, "")
        S.HANDLER.get({S.HANDLER.name: spec})
    except ConfigError as exc:
        raise HandlerLoadError(str(exc)) from None
    module_name, _, attr = spec.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise HandlerLoadError(f"HOLDFAST_HANDLER={spec!r} cannot be loaded: "
                               f"{type(exc).__name__}: {exc}") from None
    # An async function, an async callable object, or a decorator's wrapper of one
    # (``functools.wraps`` keeps the wrapped function: tracing and retry helpers wrap so).
    if not any(inspect.iscoroutinefunction(f) for f in (
            obj, getattr(obj, "__call__", None),  # noqa: B004 - an async callable object
            inspect.unwrap(obj) if callable(obj) else None)):
        raise HandlerLoadError(f"HOLDFAST_HANDLER={spec!r} must be an async function "
                               f"(async def), got {type(obj).__name__}")
    # Called with the message alone: a Lambda habit (``event, context``) failed every call and
    # parked every stream, long after the fleet had started.
    try:
        inspect.signature(obj).bind(object())  # type: ignore[arg-type]
    except TypeError as exc:
        raise HandlerLoadError(f"HOLDFAST_HANDLER={spec!r} must take one argument, the "
                               f"message (async def handle(message)): {exc}") from None
    except ValueError:  # no signature to read (some C callables): the call will tell
        pass
    return obj  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class CallFailed:
    """One handler call that raised, ran past its timeout, or returned an awaitable it did
    not await; ``exc`` is what it raised (for the log's traceback)."""

    error: str
    timed_out: bool
    exc: BaseException | None = None


async def call_once(handler: Handler, message: Message, timeout_s: float) -> CallFailed | None:
    """One handler call, cut at ``timeout_s``; None if it returned, else how it failed.

    Whatever the handler raises is its call's failure, also ``SystemExit``,
    ``KeyboardInterrupt`` and a ``CancelledError`` of its own: each ended the whole worker (or
    looked like a stop, released and claimed again every 2 s with no error said), and so the
    next holder, on the same message. Only a cancellation of this task from outside (a stop)
    goes on up. A returned awaitable (``return store(m)``, the ``await`` forgotten) is a failure
    too: counted as handled, its message was lost while the checkpoint passed it.
    """
    limit = asyncio.timeout(timeout_s)
    try:
        async with limit:
            result = await handler(message)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # ours: the stream stops
        return CallFailed(f"CancelledError raised by the handler: {_text(exc)}"[:500], False,
                          exc)
    except BaseException as exc:  # a handler's exit is its call's failure (see above)
        if isinstance(exc, TimeoutError) and limit.expired():
            return CallFailed(f"handler timed out after {timeout_s:g} s", timed_out=True)
        return CallFailed(f"{type(exc).__name__}: {_text(exc)}"[:500], False, exc)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never run: no "never awaited" warning far from the cause
        return CallFailed(f"the handler returned {type(result).__name__} {result!r:.100} "
                          "instead of awaiting it (a missing `await`?): not handled", False)
    return None


def _text(exc: BaseException) -> str:
    """``str(exc)``, or why not: the user's exception class may fail its own ``__str__``, and
    that must stay this call's failure (retried, then skipped or parked), not end the stream."""
    try:
        return str(exc)
    except Exception as broken:  # any failure of the user's code, described
        return f"<its message could not be formatted: {type(broken).__name__}>"


def failure_body(message: Message, error: str, attempts: int,
                 limit: int = names.SQS_MAX_BODY_BYTES) -> str:
    """The on-failure queue's JSON body (fields: ``names.FAILURE_FIELDS``).

    ASCII-only JSON (every SQS-invalid character escaped); bytes go as base64. A body that
    would pass ``limit`` bytes carries no payload, ``payload_truncated`` and its size instead:
    the message can then be fetched again from the upstream at that seq.
    """
    data = message.data
    if isinstance(data, bytes):
        payload, encoding, size = base64.b64encode(data).decode(), "base64", len(data)
    else:
        payload, encoding, size = data, "text", len(data.encode("utf-8", "surrogatepass"))
    fields: dict[str, Any] = dict(zip(names.FAILURE_FIELDS, (
        message.conn_id, message.seq, message.epoch, message.worker_id, error, attempts,
        payload, encoding, False, size), strict=True))
    body = json.dumps(fields)
    if len(body) <= limit:  # ASCII: one byte per character
        return body
    fields.update(payload=None, payload_truncated=True)
    return json.dumps(fields)


class FailureQueue:
    """The on-failure destination: one SQS SendMessage per message the handler gave up on."""

    def __init__(self, queue_url: str, client: SQSClient | None = None) -> None:
        self.queue_url = queue_url
        self._client = client

    async def send(self, body: str) -> None:
        """Send ``body``; returns once SQS accepted it, raises otherwise."""
        await on_io_threads(self._send, body)  # not the handlers' default executor

    def _send(self, body: str) -> None:
        if self._client is None:  # made on first use: most workers never skip a message
            self._client = aws.sqs_client(aws.client_config(read_timeout=10))
        aws.call("SendMessage", self._client.send_message, QueueUrl=self.queue_url,
                 MessageBody=body)
