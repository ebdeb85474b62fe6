"""Worker settings from the environment (as an ECS task definition sets them), validated once.

Every bad value is a ``ConfigError`` whose message names the variable and says what is allowed;
``python -m worker`` prints it and exits 2 instead of starting half-configured.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from holdfast.core import names, rules
from holdfast.core.batch import RenewMode
from holdfast.core.exceptions import ConfigError
from holdfast.core.model import MAX_WORKER_ID_LEN
from holdfast.core.orders import validate_prefix
from holdfast.core.rules import LeaseTiming
from holdfast.core.urls import UrlPolicy, policy_from_env

__all__ = ["MEMORY_RESERVE_MIB", "HandlerFailureConfig", "WorkerConfig", "buffer_bytes",
           "default_worker_id", "ecs_task_id", "handler_failure_config", "load_config"]

_WORKER_ID = re.compile(rf"^[A-Za-z0-9._:@/+=-]{{1,{MAX_WORKER_ID_LEN}}}$")
# What the task needs besides frame buffers: the interpreter, boto3, and each connection's
# socket, TLS and parser state.
MEMORY_RESERVE_MIB = 256


# --- the handler contract: retries and what happens after the last one ----------------------
# One block (its dataclass and its reader), so it moves as one into the typed settings schema.
@dataclass(frozen=True, slots=True)
class HandlerFailureConfig:
    """How a failed handler call is retried, and what happens after ``attempts`` calls."""

    attempts: int = 5  # calls per message, the first included (1: no retry)
    retry_base_s: float = 1.0  # back-off before the first retry, doubling per retry
    retry_cap_s: float = 30.0
    on_failure: str = names.HANDLER_ON_FAILURE_PARK  # or HANDLER_ON_FAILURE_SKIP
    queue_url: str | None = None  # the on-failure SQS queue (required to skip)


def handler_failure_config(e: _Env) -> HandlerFailureConfig:
    """Read ``HOLDFAST_HANDLER_ATTEMPTS`` and the rest; ``ConfigError`` names the variable."""
    on_failure = e.choice(names.ENV_HANDLER_ON_FAILURE, names.HANDLER_ON_FAILURE_PARK,
                          names.HANDLER_ON_FAILURE_POLICIES)
    queue_url = e.raw(names.ENV_FAILURE_QUEUE_URL)
    if on_failure == names.HANDLER_ON_FAILURE_SKIP and queue_url is None:
        raise ConfigError(f"{names.ENV_FAILURE_QUEUE_URL} is required when "
                          f"{names.ENV_HANDLER_ON_FAILURE}={on_failure}: the SQS queue that "
                          "receives a message whose handler calls all failed")
    if queue_url is not None and not queue_url.startswith(("https://", "http://")):
        raise ConfigError(f"{names.ENV_FAILURE_QUEUE_URL}={queue_url[:80]!r} is not a queue URL")
    base = e.number(names.ENV_HANDLER_RETRY_BASE_SECONDS, 1, lo=0.001, hi=3600)
    cap = e.number(names.ENV_HANDLER_RETRY_CAP_SECONDS, 30, lo=0.001, hi=3600)
    if cap < base:
        raise ConfigError(f"{names.ENV_HANDLER_RETRY_CAP_SECONDS}={cap:g} must not be below "
                          f"{names.ENV_HANDLER_RETRY_BASE_SECONDS}={base:g}")
    return HandlerFailureConfig(
        attempts=int(e.number(names.ENV_HANDLER_ATTEMPTS, 5, lo=1, hi=100, integer=True)),
        retry_base_s=base, retry_cap_s=cap, on_failure=on_failure, queue_url=queue_url)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything the worker reads from its environment. Times in ms unless named ``_s``."""

    table: str
    queue_url: str
    worker_id: str
    session_table: str  # one heartbeat per worker there keeps all its streams
    # lease_ms is the session's TTL, heartbeat_ms its heartbeat (rules.LeaseTiming.from_env).
    timing: LeaseTiming = field(default_factory=LeaseTiming)
    # Prefix of the per-session order queue (``worker.orders``); None: orders ride the session
    # item only, so a stop waits for the next heartbeat.
    orders_queue_prefix: str | None = None
    checkpoint_ms: int = 20_000
    max_connections: int = 1000
    reconcile_s: float = 60.0
    handler: str | None = None
    protocol: str = "query"
    url_policy: UrlPolicy = field(default_factory=UrlPolicy)
    send_worker_id: bool = False  # the X-Holdfast-Worker header on upstream handshakes
    renew_mode: RenewMode = "batch"
    health_port: int = 8081
    # 256 KiB (was 1 MiB): the stack's default 500 connections x 1 MiB frames could not fit a
    # 1 GiB task (see ``buffer_bytes``).
    max_frame_bytes: int = 2**18
    max_queue: int = 2  # websockets' max_queue: frames buffered per connection
    task_memory_mib: int | None = None  # None: not known (outside the stack), not checked
    max_seq_jump: int | None = 1_000_000  # None: no bound
    poison_replays: int = 3
    handler_timeout_s: float = 30.0
    watchdog: bool = True  # exit 70 when a handler blocks the event loop past a fence
    compression: bool = False
    shutdown_s: float = 25.0
    poll_s: int = 20
    pollers: int = 2
    nudge_visibility_s: int = 5
    poll_drain_s: float = 3.0
    metrics_s: float = 60.0
    open_timeout_s: float = 10.0
    reconnect_base_s: float = 0.5
    reconnect_cap_s: float = 30.0
    max_upstream_failures: int = 6
    retry_base_s: float = 30.0
    log_level: str = "INFO"
    # Rebalancing (worker.balancing): a stream whose owner changed within the cool-down is
    # not moved again; a draining worker without a target sheds this many at once.
    cooldown_ms: int = 60_000
    drain_at_once: int = 10
    # The fleet-wide reconnect budget (worker.budget): connects per second, 0: no limit.
    connect_rate: float = 1000.0
    connect_burst: float = 1000.0
    failures: HandlerFailureConfig = field(default_factory=HandlerFailureConfig)

    @property
    def lease_ms(self) -> int:
        return self.timing.lease_ms

    @property
    def heartbeat_ms(self) -> int:
        return self.timing.heartbeat_ms


class _Env:
    """Typed reads of one environment mapping (the readers in ``holdfast.core.rules``, shared
    with the Lambdas); each error names its variable."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def raw(self, name: str) -> str | None:
        return rules.env_text(self.env, name)

    def required(self, name: str, what: str) -> str:
        return rules.env_required(self.env, name, what)

    def number(self, name: str, default: float, *, lo: float, hi: float,
               integer: bool = False) -> float:
        return rules.env_number(self.env, name, default, lo=lo, hi=hi, integer=integer)

    def boolean(self, name: str, default: bool) -> bool:
        return rules.env_flag(self.env, name, default)

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        text = self.raw(name) or default
        if text not in allowed:
            raise ConfigError(f"{name}={text[:40]!r} must be one of {', '.join(allowed)}")
        return text


def load_config(env: Mapping[str, str] | None = None, *,
                worker_id: Callable[[Mapping[str, str]], str] | None = None) -> WorkerConfig:
    """Read and validate the worker's settings; ``ConfigError`` names the first bad variable."""
    e = _Env(os.environ if env is None else env)
    table = e.required(names.ENV_TABLE, "the DynamoDB lease table")
    queue_url = e.required(names.ENV_QUEUE_URL, "the SQS nudge queue URL")
    if not queue_url.startswith(("https://", "http://")):
        raise ConfigError(f"{names.ENV_QUEUE_URL}={queue_url[:80]!r} is not a queue URL")
    session_table = e.required(names.ENV_SESSION_TABLE, "the worker session table")
    orders_prefix = e.raw(names.ENV_ORDERS_QUEUE_PREFIX)
    if orders_prefix is not None:
        try:
            validate_prefix(orders_prefix)
        except ValueError as exc:
            raise ConfigError(f"{names.ENV_ORDERS_QUEUE_PREFIX}: {exc}") from None
    timing = LeaseTiming.from_env(e.env)
    checkpoint_s = e.number(names.ENV_CHECKPOINT_SECONDS, 20, lo=0.05, hi=3600)
    try:  # HOLDFAST_ALLOWED_HOSTS and HOLDFAST_LOG_URL_PATHS (names in holdfast.core.urls)
        policy = policy_from_env(e.env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    wid = e.raw("HOLDFAST_WORKER_ID") or (worker_id or default_worker_id)(e.env)
    if not _WORKER_ID.fullmatch(wid):
        raise ConfigError(f"HOLDFAST_WORKER_ID={wid[:60]!r} must be 1-{MAX_WORKER_ID_LEN} "
                          "letters, digits and ._:@/+=-")
    mode: Literal["batch", "single"] = "batch" if e.choice(
        names.ENV_RENEW_MODE, "batch", ("batch", "single")) == "batch" else "single"
    handler = e.raw(names.ENV_HANDLER)
    if handler is not None and not re.fullmatch(r"[\w.]+:[\w.]+", handler):
        raise ConfigError(f"{names.ENV_HANDLER}={handler[:80]!r} must look like "
                          "'package.module:function'")
    shutdown_s = e.number(names.ENV_SHUTDOWN_SECONDS, 25, lo=1, hi=7200)
    max_connections = int(e.number(names.ENV_MAX_CONNECTIONS, 1000, lo=1, hi=100_000,
                                   integer=True))
    max_frame = int(e.number(names.ENV_MAX_FRAME_BYTES, 2**18, lo=1024, hi=2**30, integer=True))
    max_queue = int(e.number(names.ENV_MAX_QUEUE, 2, lo=1, hi=1024, integer=True))
    memory = e.raw(names.ENV_TASK_MEMORY_MIB)
    task_memory = None if memory is None else int(e.number(
        names.ENV_TASK_MEMORY_MIB, 0, lo=1, hi=10**7, integer=True))
    if task_memory is not None:
        _check_memory(max_connections, max_frame, max_queue, task_memory)
    jump = int(e.number(names.ENV_MAX_SEQ_JUMP, 1_000_000, lo=0, hi=2**63, integer=True))
    max_failures = int(e.number("HOLDFAST_UPSTREAM_MAX_FAILURES", 6, lo=1, hi=1000,
                                integer=True))
    poison = int(e.number(names.ENV_POISON_REPLAYS, 3, lo=1, hi=1000, integer=True))
    if poison > max_failures:
        raise ConfigError(f"{names.ENV_POISON_REPLAYS}={poison} must not exceed "
                          f"HOLDFAST_UPSTREAM_MAX_FAILURES={max_failures}: the upstream "
                          "give-up would always come first")
    rate = e.number(names.ENV_CONNECT_RATE, 1000, lo=0, hi=10**6)
    return WorkerConfig(
        table=table, queue_url=queue_url, worker_id=wid, timing=timing,
        session_table=session_table, orders_queue_prefix=orders_prefix,
        checkpoint_ms=round(checkpoint_s * 1000),
        max_connections=max_connections,
        reconcile_s=e.number(names.ENV_RECONCILE_SECONDS, 60, lo=0, hi=86_400),
        handler=handler,
        protocol=e.raw("HOLDFAST_PROTOCOL") or "query",
        url_policy=policy, renew_mode=mode,
        send_worker_id=e.boolean("HOLDFAST_SEND_WORKER_ID", False),
        health_port=int(e.number("HOLDFAST_HEALTH_PORT", 8081, lo=0, hi=65535, integer=True)),
        max_frame_bytes=max_frame, max_queue=max_queue, task_memory_mib=task_memory,
        max_seq_jump=jump or None, poison_replays=poison,
        handler_timeout_s=e.number(names.ENV_HANDLER_TIMEOUT_SECONDS, 30, lo=0.01, hi=86_400),
        watchdog=e.boolean(names.ENV_WATCHDOG, True),
        compression=e.boolean("HOLDFAST_COMPRESSION", False),
        shutdown_s=shutdown_s,
        poll_s=int(e.number("HOLDFAST_POLL_SECONDS", 20, lo=0, hi=20, integer=True)),
        pollers=int(e.number("HOLDFAST_POLLERS", 2, lo=1, hi=16, integer=True)),
        nudge_visibility_s=int(e.number("HOLDFAST_NUDGE_VISIBILITY_SECONDS", 5, lo=1,
                                        hi=43_200, integer=True)),
        poll_drain_s=e.number("HOLDFAST_POLL_DRAIN_SECONDS", 3, lo=0, hi=20),
        metrics_s=e.number("HOLDFAST_METRICS_SECONDS", 60, lo=0.1, hi=3600),
        open_timeout_s=e.number("HOLDFAST_OPEN_TIMEOUT_SECONDS", 10, lo=0.1, hi=300),
        reconnect_base_s=e.number("HOLDFAST_RECONNECT_BASE_SECONDS", 0.5, lo=0.01, hi=600),
        reconnect_cap_s=e.number("HOLDFAST_RECONNECT_CAP_SECONDS", 30, lo=0.01, hi=3600),
        max_upstream_failures=max_failures,
        retry_base_s=e.number("HOLDFAST_RETRY_BASE_SECONDS", 30, lo=0.1, hi=86_400),
        log_level=e.choice("HOLDFAST_LOG_LEVEL", (e.raw("LOG_LEVEL") or "INFO").upper(),
                           ("DEBUG", "INFO", "WARNING", "ERROR")),
        cooldown_ms=round(1000 * e.number(names.ENV_REBALANCE_COOLDOWN_SECONDS, 60, lo=0,
                                          hi=86_400)),
        drain_at_once=int(e.number(names.ENV_DRAIN_AT_ONCE, 10, lo=1, hi=10_000,
                                   integer=True)),
        connect_rate=rate,
        connect_burst=e.number(names.ENV_CONNECT_BURST, rate or 1, lo=1, hi=10**6),
        failures=handler_failure_config(e),
    )


def buffer_bytes(max_connections: int, max_frame: int, max_queue: int) -> int:
    """The most frame data the worker can hold at once, each connection at its worst.

    Per connection (websockets 17): the queue pauses reading only once it holds more than
    ``max_queue`` frames, so ``max_queue + 1`` queued; one message in the handler's hands; one
    frame half-read in the parser. Each up to ``max_frame`` bytes: ``max_queue + 3``.
    """
    return max_connections * max_frame * (max_queue + 3)


def _check_memory(max_connections: int, max_frame: int, max_queue: int, task_mib: int) -> None:
    # An OOM kill releases nothing: every stream waits out its lease. Refuse to start instead.
    need = buffer_bytes(max_connections, max_frame, max_queue)
    have = (task_mib - MEMORY_RESERVE_MIB) * 2**20
    if need > have:
        raise ConfigError(
            f"{names.ENV_MAX_CONNECTIONS}={max_connections} x {names.ENV_MAX_FRAME_BYTES}="
            f"{max_frame} x ({names.ENV_MAX_QUEUE}={max_queue} + 3) = {need / 2**20:.0f} MiB of "
            f"frame buffers does not fit {names.ENV_TASK_MEMORY_MIB}={task_mib} minus "
            f"{MEMORY_RESERVE_MIB} MiB reserve: lower one of the first three or give the task "
            "more memory")


def ecs_task_id(env: Mapping[str, str], timeout_s: float = 1.0) -> str | None:
    """The ECS task id from the task metadata endpoint (v4), or None outside ECS."""
    base = env.get("ECS_CONTAINER_METADATA_URI_V4")
    if not base or not base.startswith("http://"):
        return None
    try:
        with urllib.request.urlopen(f"{base}/task", timeout=timeout_s) as resp:
            arn = json.loads(resp.read(1_000_000)).get("TaskARN", "")
    except (OSError, ValueError, AttributeError):
        return None
    task_id = arn.rsplit("/", 1)[-1] if isinstance(arn, str) else ""
    return task_id if task_id and _WORKER_ID.fullmatch(task_id) else None


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
