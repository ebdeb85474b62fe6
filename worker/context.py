"""What every stream of one worker shares: its handler, protocol, URL policy, back-offs,
connect options and clocks (``ConnectionContext``), made from the worker's settings once
(``for_worker``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from holdfast.core import names
from holdfast.core import settings as S
from holdfast.core.urls import UrlPolicy
from holdfast.worker.backoff import Backoff
from holdfast.worker.dial import ConnectOptions, Resolver, getaddrinfo
from holdfast.worker.handler import FailureQueue, Handler
from holdfast.worker.held import monotonic_ms
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.protocol import ResumeProtocol

if TYPE_CHECKING:
    from holdfast.worker.config import WorkerConfig
    from holdfast.worker.connection import Connection

__all__ = ["ConnectionContext"]


@dataclass
class ConnectionContext:
    """What every stream of one worker shares."""

    worker_id: str
    handler: Handler
    protocol: ResumeProtocol
    metrics: WorkerMetrics
    policy: UrlPolicy = field(default_factory=UrlPolicy)
    backoff: Backoff = field(default_factory=Backoff)
    options: ConnectOptions = field(default_factory=ConnectOptions)
    resolve: Resolver = getaddrinfo
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # Writes a first checkpoint (seq - 1) before a never-checkpointed stream's first handler
    # call, so a crash before the first heartbeat cannot skip what this worker handled.
    anchor: Callable[[Connection, int], Awaitable[bool]] | None = None
    mono: Callable[[], int] = monotonic_ms  # the clock of fence deadlines
    # A handler call longer than this is cancelled and counted as failed (``HandlerTimeouts``).
    # The fence deadline is the other bound: the fence watcher cancels the call at it.
    handler_timeout_s: float = S.HANDLER_TIMEOUT_SECONDS.read({})  # the settings' defaults
    # The handler contract (``worker.handler``): calls per message, the back-off between them
    # (``delay_s``), then park the stream or send the message to the on-failure queue.
    handler_attempts: int = S.HANDLER_ATTEMPTS.read({})
    handler_backoff: Backoff = field(default_factory=lambda: Backoff(
        S.HANDLER_RETRY_BASE_SECONDS.read({}), S.HANDLER_RETRY_CAP_SECONDS.read({})))
    on_failure: str = names.HANDLER_ON_FAILURE_PARK
    send_failure: Callable[[str], Awaitable[None]] | None = None
    # Connection deaths in a row by a frame at one resume point before the stream is given up.
    poison_replays: int = S.POISON_REPLAYS.read({})
    # Waits for a token of the fleet's reconnect budget before each connect (worker.budget).
    admit_connect: Callable[[], Awaitable[float]] | None = None

    @classmethod
    def for_worker(cls, config: WorkerConfig, *, handler: Handler, protocol: ResumeProtocol,
                   metrics: WorkerMetrics, anchor: Callable[[Connection, int], Awaitable[bool]],
                   mono: Callable[[], int],
                   admit_connect: Callable[[], Awaitable[float]] | None) -> ConnectionContext:
        """The context of a worker run with ``config``."""
        return cls(
            worker_id=config.worker_id, handler=handler, protocol=protocol, metrics=metrics,
            policy=config.url_policy,
            backoff=Backoff(config.reconnect_base_s, config.reconnect_cap_s,
                            config.max_upstream_failures, config.retry_base_s),
            options=ConnectOptions(max_size=config.max_frame_bytes,
                                   max_queue=config.max_queue,
                                   compression=config.compression,
                                   open_timeout_s=config.open_timeout_s,
                                   send_worker_id=config.send_worker_id),
            anchor=anchor, mono=mono, handler_timeout_s=config.handler_timeout_s,
            poison_replays=config.poison_replays,
            handler_attempts=config.failures.attempts,
            handler_backoff=Backoff(config.failures.retry_base_s, config.failures.retry_cap_s),
            on_failure=config.failures.on_failure,
            send_failure=None if config.failures.queue_url is None else FailureQueue(
                config.failures.queue_url).send,
            admit_connect=admit_connect)
