"""The handler plug-in: one async function called per upstream message, in order per stream.

``HOLDFAST_HANDLER="package.module:function"`` names it. It receives a ``Message`` with
``conn_id``, ``seq`` (int or None), ``data`` (str or bytes), ``worker_id`` and ``epoch``.
Whatever it raises is logged and counted by the caller; it never ends the stream or the worker.

``epoch`` is the lease epoch, a fencing token: +1 on every acquisition of the stream, so a
later holder always has a higher one. A downstream that remembers the highest epoch it has
seen per ``conn_id`` can refuse a late write from a holder that lost the lease (a paused
process); ``conn_id:epoch:seq`` names one delivery attempt uniquely. Deduplicate replays on
``conn_id:seq``: after a handover the new holder replays the overlap under a new epoch.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from holdfast.core.exceptions import ConfigError

__all__ = ["Handler", "HandlerLoadError", "Message", "default_handler", "load_handler"]

logger = Logger(service="holdfast-worker", child=True)


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
    module_name, _, attr = spec.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise HandlerLoadError(f"HOLDFAST_HANDLER={spec!r} cannot be loaded: "
                               f"{type(exc).__name__}: {exc}") from None
    if not inspect.iscoroutinefunction(obj) and not inspect.iscoroutinefunction(
            getattr(obj, "__call__", None)):  # noqa: B004 - an async callable object is fine
        raise HandlerLoadError(f"HOLDFAST_HANDLER={spec!r} must be an async function "
                               f"(async def), got {type(obj).__name__}")
    return obj  # type: ignore[return-value]
