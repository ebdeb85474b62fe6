"""The taskstopped Lambda: ECS says a worker task STOPPED -> its session is declared dead now.

An EventBridge rule (``infra.taskstopped``) sends the fleet service's "ECS Task State Change"
events with ``lastStatus`` STOPPED here. A stopped task's containers are gone, so nothing of it
can still use a lease: ``SessionStore.report_dead`` declares the session DEAD without waiting
out its TTL and releases every stream it owned, and the stream-triggered router nudges the
survivors to claim them. The same ``handle`` runs in ``holdfast task-stopped`` and in
``holdfast up`` (a worker it started exited unexpectedly), so the local fleet shows this path.

Events repeat and arrive out of order: ``HandledTasks`` (module state, a warm container's
memory) drops repeats cheaply; every write is conditional, so what it misses is harmless.
A DynamoDB error raises, so the invocation fails and is retried (then parked in the DLQ).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from holdfast.core import names, tracing
from holdfast.core import settings as S
from holdfast.core.aws import client_config, dynamodb_client, sqs_client
from holdfast.core.boto import new_session
from holdfast.core.exceptions import MalformedItem, SessionStillLive
from holdfast.core.model import validate_worker_id
from holdfast.core.nudge import REASON_REPORTED, Nudge
from holdfast.core.rules import LeaseTiming
from holdfast.core.sending import send_nudges
from holdfast.core.sessions import SessionStore, SweepLog
from holdfast.core.store import wall_clock_ms
from holdfast.lambdas.metrics import METRICS_NAMESPACE, metrics_enabled, service_name
from holdfast.lambdas.taskstopped.events import HandledTasks, Skip, parse_event, task_stopped_event
from holdfast.lambdas.taskstopped.limits import DDB_CONFIG

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_sqs import SQSClient

__all__ = ["Outcome", "TaskStoppedDeps", "configure", "deps_for_env", "handle",
           "lambda_handler", "report_stopped"]

SERVICE = service_name("holdfast-taskstopped")
logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)
tracing.setup(SERVICE)
log = logging.getLogger(__name__)

_state: dict[str, TaskStoppedDeps] = {}


@dataclass
class TaskStoppedDeps:
    sessions: SessionStore
    memory: HandledTasks = field(default_factory=HandledTasks)
    log: SweepLog = log
    # The nudge queue: each released stream is nudged here too (see ``_nudge_released``);
    # None: the router's nudges alone.
    sqs: SQSClient | None = None
    queue_url: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one event led to; ``skipped`` says why nothing was done (None: reported)."""

    worker_id: str | None
    declared_dead: bool = False
    released: int = 0
    skipped: str | None = None
    malformed: bool = False
    duplicate: bool = False

    def describe(self) -> str:
        if self.skipped is not None:
            return f"{self.worker_id or 'event'}: nothing done: {self.skipped}"
        return (f"{self.worker_id}: session "
                + ("declared dead" if self.declared_dead else "was no longer alive")
                + f", {self.released} stream{'s' * (self.released != 1)} released")


def _client_for(env: Mapping[str, str], service: str = "dynamodb") -> Any:
    """The sweeper's client (short timeouts, few retries) on the endpoint ``env`` names."""
    if env is os.environ:
        return (dynamodb_client(DDB_CONFIG) if service == "dynamodb"
                else sqs_client(client_config(read_timeout=3.0, retries=2)))

    session = new_session(
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"))
    endpoint = (env.get(f"AWS_ENDPOINT_URL_{service.upper()}") or env.get("AWS_ENDPOINT_URL")
                or None)
    return session.client(service, endpoint_url=endpoint,  # type: ignore[call-overload]
                          config=DDB_CONFIG)


def deps_for_env(env: Mapping[str, str] | None = None, *,
                 logger_: SweepLog = log) -> TaskStoppedDeps:
    """Deps on the tables ``env`` names (default: this process's environment).

    ``ConfigError`` if HOLDFAST_TABLE or HOLDFAST_SESSION_TABLE is not set."""
    e = os.environ if env is None else env
    table, session_table = S.TABLE.read(e), S.SESSION_TABLE.read(e)
    timing = LeaseTiming.from_env(e)
    store = SessionStore(_client_for(e), session_table, table, ttl_ms=timing.lease_ms,
                         skew_ms=timing.skew_ms)
    queue_url = S.QUEUE_URL.get(e)
    return TaskStoppedDeps(store, log=logger_, queue_url=queue_url,
                           sqs=_client_for(e, "sqs") if queue_url else None)


def handle(event: object, deps: TaskStoppedDeps) -> Outcome:
    """Handle one event: parse, drop a repeat, report the death. Raises only on AWS errors (a
    worker's broken session item is logged and skipped: retrying cannot mend it)."""
    stop = parse_event(event)
    if isinstance(stop, Skip):
        if stop.malformed:
            deps.log.error("skipping malformed task event: %s", stop.reason,
                           extra={"reason": stop.reason})
        return Outcome(None, skipped=stop.reason, malformed=stop.malformed)
    if stop in deps.memory:
        return Outcome(stop.worker_id, skipped="already handled (a repeated event)",
                       duplicate=True)
    try:
        done = deps.sessions.report_dead(stop.worker_id, stopped_at_ms=stop.stopped_at_ms,
                                         reason=stop.reason)
    except MalformedItem as bad:  # its session item broken by hand: retried, it stays so
        deps.memory.add(stop)
        deps.log.error("task stopped: cannot judge its session item, fix or delete it: %s",
                       bad, extra={"worker_id": stop.worker_id, "reason": bad.reason[:300]})
        return Outcome(stop.worker_id, skipped=f"session item malformed: {bad.reason}"[:300],
                       malformed=True)
    deps.memory.add(stop)
    _nudge_released(deps, done.released_ids)
    out = Outcome(stop.worker_id, done.declared_dead, done.released, done.skipped_reason)
    deps.log.info("task stopped: %s", out.describe(),
                  extra={"worker_id": stop.worker_id, "declared_dead": done.declared_dead,
                         "released": done.released, "skipped": done.skipped_reason or "",
                         "stopped_reason": stop.reason})
    if done.not_released:
        # The sweeper reaps the rest within a sweep or two (the session stays DEAD, not
        # reaped); said here, or a throttled table's failures left no trace.
        conn_id, error = done.not_released[0]
        deps.log.error("task stopped: %d of its streams not released, left to the sweeper "
                       "(first: %s: %s)", len(done.not_released), conn_id, error[:200],
                       extra={"worker_id": stop.worker_id,
                              "not_released": len(done.not_released)})
    return out


def _nudge_released(deps: TaskStoppedDeps, conn_ids: tuple[str, ...]) -> None:
    """Nudge every stream just released, beside the router's nudge of each release record.

    The dead worker's last long polls may still be pending at SQS: whatever arrives first is
    handed to a connection that no longer exists and stays invisible for the visibility
    timeout (measured locally: every router nudge of an 8-stream worker went that way, and the
    sweeper's re-nudge a second later did the work). Each such poll takes one batch at most;
    a spare nudge costs one failed acquire.
    """
    if deps.sqs is None or deps.queue_url is None or not conn_ids:
        return
    # Now, and again a second later (SQS's shortest delay): by then the dead polls have
    # returned, so the late round reaches a live worker whatever the first rounds met.
    nudges = [Nudge(c, REASON_REPORTED, None, delay) for delay in (0, 1) for c in conn_ids]
    report = send_nudges(deps.sqs, deps.queue_url, nudges, attempts=2)
    for nudge, error in report.failed:  # the router's nudge and the sweeper still cover it
        deps.log.error("reported-death nudge not sent for %s: %s", nudge.conn_id, error,
                       extra={"conn_id": nudge.conn_id, "error": error})


def report_stopped(worker_id: str, env: Mapping[str, str] | None = None, *,
                   reason: str = "task stopped", stopped_at_ms: int | None = None,
                   deps: TaskStoppedDeps | None = None, force: bool = True) -> Outcome:
    """Report ``worker_id``'s process gone, as ECS would, on the tables ``env`` names.

    For scripts, ``holdfast task-stopped`` and ``holdfast up``: the event is built as ECS
    builds it and goes through ``handle``; ``deps`` (from ``deps_for_env``) saves building a
    client per report. Without ``force`` a session within its TTL is refused
    (``SessionStillLive``). ``ConfigError`` for missing settings; an invalid id is a
    ``ValueError``."""
    # A task ARN's last segment is the id: one with a "/" would name another session.
    if "/" in validate_worker_id(worker_id):
        raise ValueError(f"invalid worker id {worker_id[:80]!r}: an ECS task id has no '/'")
    deps = deps or deps_for_env(env)
    if not force:
        # An operator's report is a claim, not the platform's fact: a session that heartbeated
        # within its TTL is refused unless forced (``SessionStillLive`` says what force risks).
        item = deps.sessions.get(worker_id)
        now = wall_clock_ms()
        if item is not None and item.live(now, deps.sessions.skew_ms):
            raise SessionStillLive(worker_id, now - item.heartbeat_at_ms)
    event = task_stopped_event(worker_id, stopped_at_ms=stopped_at_ms or wall_clock_ms(),
                               reason=reason)
    return handle(event, deps)


def configure(deps: TaskStoppedDeps | None) -> None:
    """Use ``deps`` from now on; None rebuilds from the environment on first use."""
    _state.clear()
    if deps is not None:
        _state["deps"] = deps


def _current() -> TaskStoppedDeps:
    if "deps" not in _state:
        configure(deps_for_env(logger_=logger))
    return _state["deps"]


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (EventBridge: the fleet service's tasks reported STOPPED)."""
    try:
        out = handle(event, _current())
    finally:
        tracing.flush()  # a frozen sandbox exports nothing until its next invocation
    if metrics_enabled():
        _emit(out)
    return {"worker_id": out.worker_id, "declared_dead": out.declared_dead,
            "released": out.released, "skipped": out.skipped}


def _emit(out: Outcome) -> None:
    kind = (names.METRIC_TASK_EVENTS_MALFORMED if out.malformed
            else names.METRIC_TASK_EVENTS_SKIPPED if out.skipped is not None
            else names.METRIC_TASK_STOPS_REPORTED)
    for name, value in ((kind, 1), (names.METRIC_REPORTED_DEAD_SESSIONS, int(out.declared_dead)),
                        (names.METRIC_STREAMS_REAPED, out.released)):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
