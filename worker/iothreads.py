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
import concurrent.futures
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Final, ParamSpec, TypeVar

from aws_lambda_powertools import Logger

from holdfast.worker.logs import WORKER_LOGGER

__all__ = ["IO_THREADS", "in_daemon_thread", "logs_failure", "on_io_threads", "on_pool"]

logger = Logger(service=WORKER_LOGGER, child=True)

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


def in_daemon_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run blocking ``fn`` in a daemon thread: a 20 s long poll must not delay process exit
    (the default executor's threads are joined at exit; ``wrap_future`` drops a late answer)."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()
    awaited = asyncio.wrap_future(done)

    def work() -> None:
        if done.set_running_or_notify_cancel():
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the awaiting coroutine
                done.set_exception(exc)

    threading.Thread(target=work, name="holdfast-sqs-poll", daemon=True).start()
    return awaited


def logs_failure(what: str, *,
                 traceback: bool = False) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback for a task whose outcome nobody awaits: logs ``what`` failed, if so
    (with its traceback if ``traceback``)."""

    def done(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error(f"{what} failed", error=f"{type(exc).__name__}: {exc}"[:300],
                         exc_info=exc if traceback else None)
    return done
