"""The worker's own blocking calls (claims, releases, reads, sweeps) on threads of their own.

``asyncio.to_thread`` uses the loop's default executor, which the user's handler shares: the
docs tell handlers to run blocking work with ``asyncio.to_thread``, and a handler blocking its
threads (a slow or throttled downstream) would otherwise queue every claim and release of the
worker behind it — measured: 2 of 8 streams claimed only after 23 s. The session heartbeat and
the checkpoints have their own small pools already (``worker.session``,
``worker.checkpointer``); everything else goes through ``on_io_threads``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

__all__ = ["IO_THREADS", "on_io_threads", "on_pool"]

P = ParamSpec("P")
T = TypeVar("T")

# Claims of a burst run side by side up to this many; with the checkpointer's 2 + 4 threads it
# stays within the bulk DynamoDB client's 32 pooled connections (holdfast.core.aws).
IO_THREADS: Final = 16
_POOL: Final = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="holdfast-io")


async def on_io_threads(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``asyncio.to_thread``, on the worker's own pool (context variables kept: tracing)."""
    return await on_pool(_POOL, fn, *args, **kwargs)


async def on_pool(pool: Executor, fn: Callable[P, T], /, *args: P.args,
                  **kwargs: P.kwargs) -> T:
    """``asyncio.to_thread`` on ``pool`` (context variables kept): for calls that must not
    take the I/O threads either (the resolver's, ``worker.dial``)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool, call)
