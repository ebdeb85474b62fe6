"""Names shared between the stack and the code it runs: environment variables and metrics.

The worker, router and sweeper emit these metrics (Powertools EMF); the stack scales and alarms
on them. Keeping one list here means a renamed metric breaks a test instead of silently
flat-lining a dashboard or an alarm.
"""

from __future__ import annotations

from typing import Final

from holdfast.core import urls

__all__ = [
    "DIMENSION_REASON",
    "DIMENSION_RESULT",
    "DIMENSION_SERVICE",
    "ENV_ALLOWED_HOSTS",
    "ENV_BALANCE",
    "ENV_BALANCE_BAND",
    "ENV_BALANCE_BAND_MIN",
    "ENV_BALANCE_INTERVAL_MS",
    "ENV_BALANCE_MOTION",
    "ENV_BALANCE_TARGET_TTL_MS",
    "ENV_CHECKPOINT_SECONDS",
    "ENV_CONNECT_BURST",
    "ENV_CONNECT_RATE",
    "ENV_DRAIN_AT_ONCE",
    "ENV_FAILURE_QUEUE_URL",
    "ENV_HANDLER",
    "ENV_HANDLER_ATTEMPTS",
    "ENV_HANDLER_ON_FAILURE",
    "ENV_HANDLER_RETRY_BASE_SECONDS",
    "ENV_HANDLER_RETRY_CAP_SECONDS",
    "ENV_HANDLER_TIMEOUT_SECONDS",
    "ENV_HEARTBEAT_SECONDS",
    "ENV_LEASE_SECONDS",
    "ENV_MARGIN_MS",
    "ENV_MAX_CONNECTIONS",
    "ENV_MAX_FRAME_BYTES",
    "ENV_MAX_QUEUE",
    "ENV_MAX_SEQ_JUMP",
    "ENV_METRICS_NAMESPACE",
    "ENV_ORDERS_QUEUE_PREFIX",
    "ENV_POISON_REPLAYS",
    "ENV_QUEUE_URL",
    "ENV_REBALANCE_COOLDOWN_SECONDS",
    "ENV_RECONCILE_SECONDS",
    "ENV_RECORD_AWS_CALLS",
    "ENV_RENEW_MODE",
    "ENV_SERVICE_NAME",
    "ENV_SESSION_TABLE",
    "ENV_SHUTDOWN_SECONDS",
    "ENV_SKEW_MS",
    "ENV_TABLE",
    "ENV_TASK_MEMORY_MIB",
    "ENV_TRACE_FILE",
    "ENV_TRACING",
    "ENV_WATCHDOG",
    "ENV_WORKER_VERSION",
    "FAILURE_FIELDS",
    "HANDLER_ON_FAILURE_PARK",
    "HANDLER_ON_FAILURE_POLICIES",
    "HANDLER_ON_FAILURE_SKIP",
    "LOG_HANDLER_RAISED",
    "LOG_HANDLER_TIMED_OUT",
    "METRIC_ACTIVE_CONNECTIONS",
    "METRIC_BALANCE_TARGETS",
    "METRIC_CLAIMS",
    "METRIC_CLAIMS_PAUSED_LAGGING",
    "METRIC_CLAIM_CONFLICTS",
    "METRIC_CONNECTS_DELAYED",
    "METRIC_DEAD_SESSIONS",
    "METRIC_FRAMES_SKIPPED",
    "METRIC_HANDLER_ERRORS",
    "METRIC_HANDLER_FAILURES_PARKED",
    "METRIC_HANDLER_FAILURES_SENT_TO_QUEUE",
    "METRIC_HANDLER_RETRIES",
    "METRIC_HANDLER_TIMEOUTS",
    "METRIC_HOLDINGS_TAKEN_BACK",
    "METRIC_IMBALANCE",
    "METRIC_ITEM_ERRORS",
    "METRIC_LEASES_FENCED",
    "METRIC_LEASES_LOST",
    "METRIC_MALFORMED_FRAMES",
    "METRIC_MALFORMED_RECORDS",
    "METRIC_MESSAGES_HANDLED",
    "METRIC_NORMALISED",
    "METRIC_NUDGES",
    "METRIC_NUDGES_FAILED",
    "METRIC_NUDGES_HANDED_ON",
    "METRIC_OLDEST_ORPHAN_AGE",
    "METRIC_ORDER_QUEUE_SENDS",
    "METRIC_POISON_MESSAGES",
    "METRIC_RECONNECTS",
    "METRIC_RECORDS",
    "METRIC_RECORDS_SKIPPED",
    "METRIC_RENEW_FAILURES",
    "METRIC_RENEW_LATENCY",
    "METRIC_REPORTED_DEAD_SESSIONS",
    "METRIC_SESSION_RENEW_FAILURES",
    "METRIC_STRANDED_RELEASED",
    "METRIC_STRANDED_STREAMS",
    "METRIC_STREAMS_HANDED_OFF",
    "METRIC_STREAMS_QUARANTINED",
    "METRIC_STREAMS_REAPED",
    "METRIC_STREAMS_SHED",
    "METRIC_SWEEPS",
    "METRIC_SWEEP_ERRORS",
    "METRIC_TASK_EVENTS_MALFORMED",
    "METRIC_TASK_EVENTS_SKIPPED",
    "METRIC_TASK_STOPS_REPORTED",
    "METRIC_UNOWNED_TIME",
    "METRIC_UPSTREAM_GIVE_UPS",
    "NAMESPACE",
    "SPAN_CLAIM",
    "SPAN_CONNECT",
    "SPAN_FIRST_MESSAGE",
    "SPAN_ROUTE",
    "SPAN_SWEEP",
    "SQS_MAX_BODY_BYTES",
    "TASKSTOPPED_SERVICE",
    "TRACE_ATTR_COMPONENT",
    "TRACE_ATTR_STREAM_ID",
    "TRACE_ATTR_WORKER_ID",
    "TRACING_MODES",
    "WORKER_HEALTH_COMMAND",
    "service_names",
]

# --- environment variables read by the worker and the Lambdas -------------------------------
ENV_TABLE: Final = "HOLDFAST_TABLE"
ENV_SESSION_TABLE: Final = "HOLDFAST_SESSION_TABLE"  # worker sessions (one item per worker)
# How often a running stream's last_seq is written; also the replay window after a crash.
ENV_CHECKPOINT_SECONDS: Final = "HOLDFAST_CHECKPOINT_SECONDS"
ENV_QUEUE_URL: Final = "HOLDFAST_QUEUE_URL"
# Name prefix of the per-session order queues (holdfast.core.orders); unset: orders ride the
# session item only (the next heartbeat).
ENV_ORDERS_QUEUE_PREFIX: Final = "HOLDFAST_ORDERS_QUEUE_PREFIX"
# Rebalancing (holdfast.core.balance). The decider (sweeper): on/off, how often it decides,
# the balance band (fraction of a share, and its floor in streams), the share of the fleet's
# streams that may be in motion at once, and how long a target holds unless renewed.
ENV_BALANCE: Final = "HOLDFAST_BALANCE"
ENV_BALANCE_INTERVAL_MS: Final = "HOLDFAST_BALANCE_INTERVAL_MS"
ENV_BALANCE_BAND: Final = "HOLDFAST_BALANCE_BAND"
ENV_BALANCE_BAND_MIN: Final = "HOLDFAST_BALANCE_BAND_MIN"
ENV_BALANCE_MOTION: Final = "HOLDFAST_BALANCE_MOTION"
ENV_BALANCE_TARGET_TTL_MS: Final = "HOLDFAST_BALANCE_TARGET_TTL_MS"
# The worker: no stream moves again within the cool-down after its owner changed; the
# fleet-wide budget of upstream connects per second (each worker takes its share, 0: no
# limit) and its burst; how many streams a draining worker sheds at once without a target.
ENV_REBALANCE_COOLDOWN_SECONDS: Final = "HOLDFAST_REBALANCE_COOLDOWN_SECONDS"
ENV_CONNECT_RATE: Final = "HOLDFAST_CONNECT_RATE"
ENV_CONNECT_BURST: Final = "HOLDFAST_CONNECT_BURST"
ENV_DRAIN_AT_ONCE: Final = "HOLDFAST_DRAIN_AT_ONCE"
# The lease timings (``rules.LeaseTiming.from_env``), the same for the worker, the Lambdas and
# the stack: the session TTL, its heartbeat, the clock-skew allowance and the fence's margin.
ENV_LEASE_SECONDS: Final = "HOLDFAST_LEASE_SECONDS"
ENV_HEARTBEAT_SECONDS: Final = "HOLDFAST_HEARTBEAT_SECONDS"
ENV_SKEW_MS: Final = "HOLDFAST_SKEW_MS"
ENV_MARGIN_MS: Final = "HOLDFAST_MARGIN_MS"
ENV_MAX_CONNECTIONS: Final = "HOLDFAST_MAX_CONNECTIONS"
ENV_RECONCILE_SECONDS: Final = "HOLDFAST_RECONCILE_SECONDS"
ENV_SHUTDOWN_SECONDS: Final = "HOLDFAST_SHUTDOWN_SECONDS"
ENV_RENEW_MODE: Final = "HOLDFAST_RENEW_MODE"
ENV_HANDLER: Final = "HOLDFAST_HANDLER"
# Poison frames and memory: the frame size limit, websockets' max_queue (frames buffered per
# connection), the task's memory (set by the stack: the settings must fit in it), how far past
# the checkpoint a seq may jump, and how many deaths at one resume point give the stream up.
ENV_MAX_FRAME_BYTES: Final = "HOLDFAST_MAX_FRAME_BYTES"
ENV_MAX_QUEUE: Final = "HOLDFAST_MAX_QUEUE"
ENV_TASK_MEMORY_MIB: Final = "HOLDFAST_TASK_MEMORY_MIB"
ENV_MAX_SEQ_JUMP: Final = "HOLDFAST_MAX_SEQ_JUMP"
ENV_POISON_REPLAYS: Final = "HOLDFAST_POISON_REPLAYS"
ENV_HANDLER_TIMEOUT_SECONDS: Final = "HOLDFAST_HANDLER_TIMEOUT_SECONDS"
# The handler contract (worker.handler): a call that raises or times out is retried with
# jittered back-off (from the base, doubling to the cap) up to HOLDFAST_HANDLER_ATTEMPTS calls;
# then the policy decides: "park" the stream (BACKOFF, resumed later from the failed seq) or
# "skip" the message after sending it to the on-failure SQS queue (required for "skip").
ENV_HANDLER_ATTEMPTS: Final = "HOLDFAST_HANDLER_ATTEMPTS"
ENV_HANDLER_RETRY_BASE_SECONDS: Final = "HOLDFAST_HANDLER_RETRY_BASE_SECONDS"
ENV_HANDLER_RETRY_CAP_SECONDS: Final = "HOLDFAST_HANDLER_RETRY_CAP_SECONDS"
ENV_HANDLER_ON_FAILURE: Final = "HOLDFAST_HANDLER_ON_FAILURE"
ENV_FAILURE_QUEUE_URL: Final = "HOLDFAST_FAILURE_QUEUE_URL"
HANDLER_ON_FAILURE_PARK: Final = "park"
HANDLER_ON_FAILURE_SKIP: Final = "skip"
HANDLER_ON_FAILURE_POLICIES: Final = (HANDLER_ON_FAILURE_PARK, HANDLER_ON_FAILURE_SKIP)
# The on-failure queue's message body (JSON), like a Lambda on-failure destination's record:
# the delivery attempt (conn_id, seq, epoch, worker_id), why it failed (error, attempts) and
# the message (payload: the text, or base64 of bytes, per payload_encoding; null with
# payload_truncated true and its size in payload_bytes when the body would pass SQS's limit).
FAILURE_FIELDS: Final = ("conn_id", "seq", "epoch", "worker_id", "error", "attempts",
                         "payload", "payload_encoding", "payload_truncated", "payload_bytes")
SQS_MAX_BODY_BYTES: Final = 262_144  # SQS's limit for one message (256 KiB)
# "false" turns off the thread that exits the process when the loop is blocked past a fence.
ENV_WATCHDOG: Final = "HOLDFAST_WATCHDOG"
ENV_ALLOWED_HOSTS: Final = urls.ENV_ALLOWED_HOSTS  # defined once, with the URL policy
ENV_WORKER_VERSION: Final = "HOLDFAST_WORKER_VERSION"  # what a worker runs (its session item)
ENV_RECORD_AWS_CALLS: Final = "HOLDFAST_RECORD_AWS_CALLS"  # tests: a directory to log calls in
# Powertools reads these two itself, so no code has to pass a service name or namespace.
ENV_SERVICE_NAME: Final = "POWERTOOLS_SERVICE_NAME"
ENV_METRICS_NAMESPACE: Final = "POWERTOOLS_METRICS_NAMESPACE"

# Tracing of the acquisition path (``holdfast.core.tracing``): "off" (default), "file" (one
# OTLP-JSON line per span appended to HOLDFAST_TRACE_FILE) or "otlp" (the standard
# OTEL_EXPORTER_OTLP_* variables say where: the ADOT collector sidecar or Lambda layer).
ENV_TRACING: Final = "HOLDFAST_TRACING"
ENV_TRACE_FILE: Final = "HOLDFAST_TRACE_FILE"
TRACING_MODES: Final = ("off", "file", "otlp")

# --- spans (one trace per acquisition) and the attributes every span carries ---------------
SPAN_ROUTE: Final = "route"  # the router, one per stream record that nudges
SPAN_SWEEP: Final = "sweep nudge"  # the sweeper, one per orphan it nudges
SPAN_CLAIM: Final = "claim"  # the worker's acquire (child of the nudge's span)
SPAN_CONNECT: Final = "connect"  # the first WebSocket open (child of claim)
SPAN_FIRST_MESSAGE: Final = "first message handled"  # open -> first handled (child of claim)
TRACE_ATTR_STREAM_ID: Final = "holdfast.stream_id"
TRACE_ATTR_WORKER_ID: Final = "holdfast.worker_id"
TRACE_ATTR_COMPONENT: Final = "holdfast.component"

# --- metrics (CloudWatch namespace, EMF) ---------------------------------------------------
NAMESPACE: Final = "Holdfast"
# Powertools Metrics adds the dimension ``service`` = POWERTOOLS_SERVICE_NAME to every metric.
DIMENSION_SERVICE: Final = "service"

# Worker (one EMF record per task per flush; the stack averages ActiveConnections across tasks).
METRIC_ACTIVE_CONNECTIONS: Final = "ActiveConnections"
METRIC_CLAIMS: Final = "Claims"
METRIC_CLAIM_CONFLICTS: Final = "ClaimConflicts"
METRIC_LEASES_LOST: Final = "LeasesLost"
# A holding a write outside the protocol removed, written back by its holder (``overwrites``).
METRIC_HOLDINGS_TAKEN_BACK: Final = "HoldingsTakenBack"
METRIC_LEASES_FENCED: Final = "LeasesFenced"
METRIC_RENEW_FAILURES: Final = "RenewFailures"
METRIC_RENEW_LATENCY: Final = "RenewLatency"
# Per claim, how long the stream had been unowned (ms; holdfast.core.unowned says which
# claims can be measured). The dashboard shows its percentiles; an alarm watches p99.
METRIC_UNOWNED_TIME: Final = "UnownedTime"
METRIC_RECONNECTS: Final = "Reconnects"
METRIC_HANDLER_ERRORS: Final = "HandlerErrors"
METRIC_UPSTREAM_GIVE_UPS: Final = "UpstreamGiveUps"
# Claims refused because the stream's item breaks the schema: the worker parks it as INVALID
# (the reason in last_error) and the sweeper finds it again every quarantine (5 min), so the
# orphan age never grows: this count is how such a stream is noticed.
METRIC_STREAMS_QUARANTINED: Final = "StreamsQuarantined"
# Text frames that are not JSON (handed on without a seq); frames not delivered (a seq that went
# back below the checkpoint or jumped past HOLDFAST_MAX_SEQ_JUMP); handler calls cut by the
# timeout.
METRIC_MALFORMED_FRAMES: Final = "MalformedFrames"
METRIC_FRAMES_SKIPPED: Final = "FramesSkipped"
METRIC_HANDLER_TIMEOUTS: Final = "HandlerTimeouts"
# The handler contract: calls retried after a failure; streams parked (BACKOFF) after the last
# attempt; messages skipped after the on-failure queue accepted them.
METRIC_HANDLER_RETRIES: Final = "HandlerRetries"
METRIC_HANDLER_FAILURES_PARKED: Final = "HandlerFailuresParked"
METRIC_HANDLER_FAILURES_SENT_TO_QUEUE: Final = "HandlerFailuresSentToQueue"
METRIC_SESSION_RENEW_FAILURES: Final = "SessionRenewFailures"
METRIC_MESSAGES_HANDLED: Final = "MessagesHandled"
# Rebalancing: streams a worker shed (a move, or draining), and connects it delayed for the
# reconnect budget; the sweeper's targets written, and the load above the fair shares.
METRIC_STREAMS_SHED: Final = "StreamsShed"
METRIC_CONNECTS_DELAYED: Final = "ConnectsDelayed"
# Nudges a worker passed to the others (full, stopping, a move above its share): many of them
# mean nudges hop between workers before one claims.
METRIC_NUDGES_HANDED_ON: Final = "NudgesHandedOn"
# Releases that named the successor the decider chose (a handoff, not "whoever polls first").
METRIC_STREAMS_HANDED_OFF: Final = "StreamsHandedOff"
# Times a worker stopped taking claims because its event loop lagged past 1 s.
METRIC_CLAIMS_PAUSED_LAGGING: Final = "ClaimsPausedLagging"
METRIC_BALANCE_TARGETS: Final = "BalanceTargets"
METRIC_IMBALANCE: Final = "Imbalance"
METRIC_POISON_MESSAGES: Final = "PoisonMessages"  # nudges that are not a nudge
# Router and sweeper: nudges sent, one metric per ``reason`` (extra dimension), and failures.
METRIC_NUDGES: Final = "Nudges"
DIMENSION_REASON: Final = "reason"
METRIC_NUDGES_FAILED: Final = "NudgesFailed"
METRIC_MALFORMED_RECORDS: Final = "MalformedRecords"
METRIC_NORMALISED: Final = "Normalised"
# Router, per invocation: stream records received and those it had nothing to do for; stop
# orders sent to a worker's order queue, one metric per ``result`` (extra dimension).
METRIC_RECORDS: Final = "Records"
METRIC_RECORDS_SKIPPED: Final = "RecordsSkipped"
METRIC_ORDER_QUEUE_SENDS: Final = "OrderQueueSends"
DIMENSION_RESULT: Final = "result"
# Sweeper, per invocation: sweeps run, sweeps that failed, and the age (now - expiry, ms) of
# the longest-expired STARTED lease it found unowned. The "wanted but unowned" alarm watches
# that age.
METRIC_SWEEPS: Final = "Sweeps"
METRIC_SWEEP_ERRORS: Final = "SweepErrors"
METRIC_OLDEST_ORPHAN_AGE: Final = "OldestOrphanAge"
# Sessions the sweeper declared dead (silent past their TTL), and the streams it released
# from dead or ended sessions. The dead-session alarm watches the first.
METRIC_DEAD_SESSIONS: Final = "DeadSessions"
METRIC_STREAMS_REAPED: Final = "StreamsReaped"
# The owner audit (holdfast.core.liveness): streams owned by a session that is not live, still
# waiting at the last pass (their age folds into OldestOrphanAge, whose alarm watches it), and
# those it released; items a release could not write (one item's error, retried next sweep).
METRIC_STRANDED_STREAMS: Final = "StrandedStreams"
METRIC_STRANDED_RELEASED: Final = "StrandedReleased"
METRIC_ITEM_ERRORS: Final = "ItemErrors"
# The taskstopped function (ECS reported a worker task STOPPED): stops it acted on, sessions it
# declared dead (no TTL waited out), and events it skipped (not STOPPED, repeats, malformed);
# the streams it released count as StreamsReaped under its own service dimension.
METRIC_TASK_STOPS_REPORTED: Final = "TaskStopsReported"
METRIC_REPORTED_DEAD_SESSIONS: Final = "ReportedDeadSessions"
METRIC_TASK_EVENTS_SKIPPED: Final = "TaskEventsSkipped"
METRIC_TASK_EVENTS_MALFORMED: Final = "TaskEventsMalformed"
# Its ``service`` suffix (``<fleet>-taskstopped``), like ``service_names`` gives the others.
TASKSTOPPED_SERVICE: Final = "taskstopped"

# A stream's handler call that failed: the worker's error line (with ``seq`` and ``error``),
# which the test harness quotes when a wait times out (``holdfast.testing``).
LOG_HANDLER_RAISED: Final = "handler raised"
LOG_HANDLER_TIMED_OUT: Final = "handler timed out, call cancelled"

# The container health check: exits 0 while the worker's supervisor loop is alive.
WORKER_HEALTH_COMMAND: Final = ("python", "-m", "holdfast.worker.health")


def service_names(fleet: str) -> dict[str, str]:
    """The ``service`` dimension value of each component of the fleet named ``fleet``.

    Two fleets in one account and region (staging, prod) must not average each other's
    connections, so the fleet name is part of every service name.
    """
    return {part: f"{fleet}-{part}"
            for part in ("worker", "router", "sweeper", TASKSTOPPED_SERVICE)}
