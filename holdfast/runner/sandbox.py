"""Execution environments for the handler: child processes, like Lambda's sandboxes.

Each sandbox is a process that imports the handler once (its cold start) and then serves
invocations (warm starts), one at a time, as Lambda runs one invocation per execution
environment. Concurrent batches therefore never share the handler's module state (Powertools'
batch processor and logger keep per-invocation state in module globals), and the handler's
CPU never competes with the reader or the sweeper for one interpreter lock.

The function's timeout is enforced as Lambda enforces it: an invocation still running when its
time is up is a function error (``FunctionTimedOut``), and its sandbox is killed (with the
others of the pool, which are replaced: their invocations fail and are retried), so a handler
that overruns its deadline fails locally as it would on AWS instead of counting as a success.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from holdfast.runner.context import LocalContext

__all__ = ["FunctionTimedOut", "Sandboxes"]


class FunctionTimedOut(RuntimeError):
    """An invocation ran past the function's timeout (Lambda's "Task timed out")."""

_handler: dict[str, Any] = {}


def _init(spec: str) -> None:
    # A signal to the runner's process group is the runner's to handle: it finishes the
    # batches in flight, then shuts the sandboxes down; if it dies, they exit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    # The runner's own filter does not reach a spawned process.
    warnings.filterwarnings("ignore", "No application metrics to publish")
    from holdfast.runner.runner import load_handler

    _handler["fn"] = load_handler(spec, init=True)


def _exit_when_orphaned(parent: int) -> None:
    # A pool's child outlives a SIGKILLed parent (measured); nothing else would end it.
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _ready() -> None:
    time.sleep(0.05)  # long enough for the other warm-up calls to find no idle sandbox


def _invoke(event: dict[str, Any], function_name: str, remaining_ms: int,
            request_id: str) -> Any:
    context = LocalContext(function_name, remaining_ms, aws_request_id=request_id)
    return _handler["fn"](event, context)


class Sandboxes:
    """A handler callable that runs each invocation in one of ``size`` child processes."""

    def __init__(self, spec: str, size: int) -> None:
        self.spec, self.size = spec, size
        self._lock = threading.Lock()
        self.pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.size, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init, initargs=(self.spec,))

    def warm(self) -> None:
        """Start every sandbox now (imports and clients take a second or more on a loaded
        machine) rather than on the first records."""
        for future in [self.pool.submit(_ready) for _ in range(self.size)]:
            future.result()

    def __call__(self, event: dict[str, Any], context: LocalContext) -> Any:
        # An exception raised in the sandbox comes back here: a function error.
        pool = self.pool
        remaining_ms = context.get_remaining_time_in_millis()
        future = pool.submit(_invoke, event, context.function_name, remaining_ms,
                             context.aws_request_id)
        try:
            return future.result(timeout=max(0, remaining_ms) / 1000)
        except FutureTimeout:
            self._replace(pool, kill=True)
            raise FunctionTimedOut(f"Task timed out after {remaining_ms / 1000:.2f} seconds"
                                   ) from None
        except BrokenProcessPool:
            # A sandbox died (killed, out of memory, a crash in C): this invocation is a
            # function error, retried as Lambda would; the next ones get fresh sandboxes, as
            # Lambda gives them (a broken pool refused every later batch, and the local router
            # sent nothing for the rest of the runner's life).
            self._replace(pool)
            raise

    def _replace(self, pool: ProcessPoolExecutor, *, kill: bool = False) -> None:
        with self._lock:
            if self.pool is not pool:
                return  # replaced already by another invocation's failure
            self.pool = self._new_pool()
        if kill:
            # Lambda stops a timed-out invocation's sandbox; a pool cannot stop one of its
            # processes, so all of them go (the private map is the only handle to them).
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
