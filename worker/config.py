"""Worker settings from the environment (as an ECS task definition sets them), validated once.

Every bad value is a ``ConfigError`` whose message names the variable and says what is allowed;
``python -m worker`` prints it and exits 2 instead of starting half-configured.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import socket
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from holdfast.core import names
from holdfast.core import settings as S
from holdfast.core.batch import RenewMode
from holdfast.core.exceptions import ConfigError
from holdfast.core.framebuffers import check_buffers_fit
from holdfast.core.model import VERSION_PATTERN
from holdfast.core.rules import LeaseTiming
from holdfast.core.urls import UrlPolicy, policy_from_env

__all__ = ["HandlerFailureConfig", "WorkerConfig", "default_worker_id", "ecs_task_id",
           "ecs_task_metadata", "ecs_task_version", "handler_failure_config", "load_config"]

_WORKER_ID = re.compile(S.WORKER_ID.pattern)  # the default id must pass the same check


# --- the handler contract: retries and what happens after the last one ----------------------
# Defaults and limits are in holdfast.core.settings (``handler_failure_config`` reads them).
@dataclass(frozen=True, slots=True)
class HandlerFailureConfig:
    """How a failed handler call is retried, and what happens after ``attempts`` calls."""

    attempts: int  # calls per message, the first included (1: no retry)
    retry_base_s: float  # back-off before the first retry, doubling per retry
    retry_cap_s: float
    on_failure: str  # names.HANDLER_ON_FAILURE_PARK or _SKIP
    queue_url: str | None  # the on-failure SQS queue (required to skip)


def handler_failure_config(e: Mapping[str, str]) -> HandlerFailureConfig:
    """Read ``HOLDFAST_HANDLER_ATTEMPTS`` and the rest; ``ConfigError`` names the variable."""
    on_failure = S.HANDLER_ON_FAILURE.read(e)
    queue_url = S.FAILURE_QUEUE_URL.get(e)
    if on_failure == names.HANDLER_ON_FAILURE_SKIP and queue_url is None:
        raise ConfigError(f"{S.FAILURE_QUEUE_URL.name} is required when "
                          f"{S.HANDLER_ON_FAILURE.name}={on_failure}: the SQS queue that "
                          "receives a message whose handler calls all failed")
    base, cap = S.HANDLER_RETRY_BASE_SECONDS.read(e), S.HANDLER_RETRY_CAP_SECONDS.read(e)
    if cap < base:
        raise ConfigError(f"{S.HANDLER_RETRY_CAP_SECONDS.name}={cap:g} must not be below "
                          f"{S.HANDLER_RETRY_BASE_SECONDS.name}={base:g}")
    return HandlerFailureConfig(attempts=S.HANDLER_ATTEMPTS.read(e), retry_base_s=base,
                                retry_cap_s=cap, on_failure=on_failure, queue_url=queue_url)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything the worker reads from its environment. Times in ms unless named ``_s``.

    Defaults, units and limits are in ``holdfast.core.settings`` (``load_config`` builds this)."""

    table: str
    queue_url: str
    worker_id: str
    session_table: str  # one heartbeat per worker there keeps all its streams
    # lease_ms is the session's TTL, heartbeat_ms its heartbeat (rules.LeaseTiming.from_env).
    timing: LeaseTiming
    # Prefix of the per-session order queue (``worker.orders``); None: orders ride the session
    # item only, so a stop waits for the next heartbeat.
    orders_queue_prefix: str | None
    checkpoint_ms: int
    max_connections: int
    reconcile_s: float
    handler: str | None
    protocol: str
    url_policy: UrlPolicy
    send_worker_id: bool  # the X-Holdfast-Worker header on upstream handshakes
    renew_mode: RenewMode
    health_port: int
    # 256 KiB by default (was 1 MiB): the stack's default 500 connections x 1 MiB frames could
    # not fit a 1 GiB task (``holdfast.core.framebuffers``).
    max_frame_bytes: int
    max_queue: int  # websockets' max_queue: frames buffered per connection
    task_memory_mib: int | None  # None: not known (outside the stack), not checked
    max_seq_jump: int | None  # None: no bound
    poison_replays: int
    handler_timeout_s: float
    watchdog: bool  # exit 70 when a handler blocks the event loop past a fence
    compression: bool
    single_connection: bool  # the fleet default of a stream's ``single_connection``
    shutdown_s: float
    poll_s: int
    pollers: int
    nudge_visibility_s: int
    poll_drain_s: float
    metrics_s: float
    open_timeout_s: float
    reconnect_base_s: float
    reconnect_cap_s: float
    max_upstream_failures: int
    retry_base_s: float
    log_level: str
    # Rebalancing (worker.balancing): a stream whose owner changed within the cool-down is
    # not moved again; a draining worker without a target sheds this many at once.
    cooldown_ms: int
    drain_at_once: int
    # The fleet-wide reconnect budget (worker.budget): connects per second, 0: no limit.
    connect_rate: float
    connect_burst: float
    failures: HandlerFailureConfig = field(default_factory=lambda: handler_failure_config({}))
    version: str = ""  # HOLDFAST_WORKER_VERSION, else the ECS task definition; "": not known

    @property
    def lease_ms(self) -> int:
        return self.timing.lease_ms

    @property
    def heartbeat_ms(self) -> int:
        return self.timing.heartbeat_ms


def load_config(env: Mapping[str, str] | None = None, *,
                worker_id: Callable[[Mapping[str, str]], str] | None = None) -> WorkerConfig:
    """Read and validate the worker's settings (``holdfast.core.settings`` types each one);
    ``ConfigError`` names the first bad variable."""
    e = os.environ if env is None else env
    table, queue_url = S.TABLE.read(e), S.QUEUE_URL.read(e)
    session_table, orders_prefix = S.SESSION_TABLE.read(e), S.ORDERS_QUEUE_PREFIX.get(e)
    timing = LeaseTiming.from_env(e)
    try:  # HOLDFAST_ALLOWED_HOSTS and HOLDFAST_LOG_URL_PATHS (names in holdfast.core.urls)
        policy = policy_from_env(e)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    wid = S.WORKER_ID.get(e) or (worker_id or default_worker_id)(e)
    if not _WORKER_ID.fullmatch(wid):
        raise ConfigError(f"{S.WORKER_ID.name}={wid[:60]!r} must be {S.WORKER_ID.shape}")
    max_connections = S.MAX_CONNECTIONS.read(e)
    max_frame, max_queue = S.MAX_FRAME_BYTES.read(e), S.MAX_QUEUE.read(e)
    task_memory = S.TASK_MEMORY_MIB.get(e)
    check_buffers_fit(e)
    max_failures = S.UPSTREAM_MAX_FAILURES.read(e)
    poison = S.POISON_REPLAYS.read(e)
    if poison > max_failures:
        raise ConfigError(f"{S.POISON_REPLAYS.name}={poison} must not exceed "
                          f"{S.UPSTREAM_MAX_FAILURES.name}={max_failures}: the upstream "
                          "give-up would always come first")
    rate = S.CONNECT_RATE.read(e)
    burst = S.CONNECT_BURST.get(e)
    return WorkerConfig(
        table=table, queue_url=queue_url, worker_id=wid, timing=timing,
        session_table=session_table, orders_queue_prefix=orders_prefix,
        checkpoint_ms=round(S.CHECKPOINT_SECONDS.read(e) * 1000),
        max_connections=max_connections,
        reconcile_s=S.RECONCILE_SECONDS.read(e),
        handler=S.HANDLER.get(e),
        protocol=S.PROTOCOL.read(e),
        url_policy=policy,
        renew_mode="single" if S.RENEW_MODE.read(e) == "single" else "batch",
        send_worker_id=S.SEND_WORKER_ID.read(e),
        health_port=S.HEALTH_PORT.read(e),
        max_frame_bytes=max_frame, max_queue=max_queue, task_memory_mib=task_memory,
        max_seq_jump=S.MAX_SEQ_JUMP.read(e) or None, poison_replays=poison,
        handler_timeout_s=S.HANDLER_TIMEOUT_SECONDS.read(e),
        watchdog=S.WATCHDOG.read(e),
        compression=S.COMPRESSION.read(e),
        single_connection=S.SINGLE_CONNECTION.read(e),
        shutdown_s=S.SHUTDOWN_SECONDS.read(e),
        poll_s=S.POLL_SECONDS.read(e),
        pollers=S.POLLERS.read(e),
        nudge_visibility_s=S.NUDGE_VISIBILITY_SECONDS.read(e),
        poll_drain_s=S.POLL_DRAIN_SECONDS.read(e),
        metrics_s=S.METRICS_SECONDS.read(e),
        open_timeout_s=S.OPEN_TIMEOUT_SECONDS.read(e),
        reconnect_base_s=S.RECONNECT_BASE_SECONDS.read(e),
        reconnect_cap_s=S.RECONNECT_CAP_SECONDS.read(e),
        max_upstream_failures=max_failures,
        retry_base_s=S.RETRY_BASE_SECONDS.read(e),
        log_level=S.LOG_LEVEL.read(e, default=(e.get("LOG_LEVEL") or "").strip() or None),
        cooldown_ms=round(1000 * S.REBALANCE_COOLDOWN_SECONDS.read(e)),
        drain_at_once=S.DRAIN_AT_ONCE.read(e),
        connect_rate=rate,
        connect_burst=burst if burst is not None else (rate or 1),
        failures=handler_failure_config(e),
        version=S.WORKER_VERSION.get(e) or ecs_task_version(e) or "",
    )


def ecs_task_metadata(env: Mapping[str, str], timeout_s: float = 1.0) -> dict[str, Any]:
    """The task metadata endpoint's (v4) answer about this task; {} outside ECS or if it
    cannot be read. Read once per process: the worker id and the version both come from it."""
    base = env.get("ECS_CONTAINER_METADATA_URI_V4")
    if not base or not base.startswith("http://"):
        return {}
    return _task_metadata(base, timeout_s)


@functools.lru_cache(maxsize=4)
def _task_metadata(base: str, timeout_s: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{base}/task", timeout=timeout_s) as resp:
            data = json.loads(resp.read(1_000_000))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ecs_task_id(env: Mapping[str, str], timeout_s: float = 1.0) -> str | None:
    """The ECS task id from the task metadata endpoint (v4), or None outside ECS."""
    arn = ecs_task_metadata(env, timeout_s).get("TaskARN", "")
    task_id = arn.rsplit("/", 1)[-1] if isinstance(arn, str) else ""
    return task_id if task_id and _WORKER_ID.fullmatch(task_id) else None


def ecs_task_version(env: Mapping[str, str], timeout_s: float = 1.0) -> str | None:
    """``family:revision`` of this task's definition (what a deploy changes), or None."""
    meta = ecs_task_metadata(env, timeout_s)
    family, revision = meta.get("Family"), meta.get("Revision")
    if not isinstance(family, str) or not isinstance(revision, str | int):
        return None
    version = f"{family}:{revision}"
    return version if VERSION_PATTERN.fullmatch(version) else None


def default_worker_id(env: Mapping[str, str]) -> str:
    """ECS task id when running on ECS, else host-pid-random: unique per process.

    The store treats ``lease_owner == me`` as proof of ownership, so two processes must never
    share an id (a restarted process on the same host gets a new random suffix).
    """
    task = ecs_task_id(env)
    if task:
        return task
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:100] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"
