"""Test handler plug-ins for worker processes (named by ``HOLDFAST_HANDLER``).

``record`` appends one JSON line per message to ``$HOLDFAST_TEST_RECORD`` (a file per worker),
so a test can check afterwards that every seq of every stream was handled.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from typing import IO, Any

from holdfast.worker.handler import Message

__all__ = ["block_on_3", "explode_on_7", "not_async", "record", "slow_record"]

_FILES: dict[str, IO[str]] = {}


def _out() -> IO[str]:
    path = os.environ["HOLDFAST_TEST_RECORD"]
    if path not in _FILES:
        _FILES[path] = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    return _FILES[path]


async def record(message: Message) -> None:
    _out().write(json.dumps({"conn_id": message.conn_id, "seq": message.seq,
                             "worker_id": message.worker_id, "t": time.time()}) + "\n")


async def slow_record(message: Message) -> None:
    await asyncio.sleep(float(os.environ.get("HOLDFAST_TEST_HANDLER_DELAY", "0.2")))
    await record(message)


async def explode_on_7(message: Message) -> None:
    if message.seq is not None and message.seq % 7 == 0:
        raise RuntimeError(f"handler exploded on seq {message.seq}")
    await record(message)


def not_async(message: Message) -> None:
    """Not a valid handler: the worker must refuse it at start-up."""


async def lambda_style(event: Message, context: object) -> None:
    """Not a valid handler: it takes a Lambda's (event, context), and is called with one."""


async def block_on_3(message: Message) -> None:
    """Blocks the event loop (a synchronous sleep) on seq 3: the watchdog must end the process."""
    await record(message)
    if message.seq == 3:
        time.sleep(float(os.environ.get("HOLDFAST_TEST_BLOCK_SECONDS", "30")))  # noqa: ASYNC251


def _traced(fn: Any) -> Any:
    """A user's decorator: a sync wrapper (``functools.wraps``) returning the coroutine."""
    @functools.wraps(fn)
    def wrapper(message: Message) -> Any:
        return fn(message)
    return wrapper


@_traced
async def decorated(message: Message) -> None:
    """An async handler behind a decorator whose wrapper is not itself async."""
    await asyncio.sleep(0)
