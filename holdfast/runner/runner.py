"""The local runner: change records -> filter -> batch -> router handler, plus the sweeper.

Three kinds of thread, none waiting for another's work: the reader polls every shard (again at
once after records, ``poll_ms`` after an empty read; several shards concurrently) and only
queues what it reads; ``parallelization`` invoker threads take batches (``dispatch``: order
kept per item) and invoke the handler, the default router in sandbox processes
(``sandbox``); the sweeper loop runs on its own thread with no deadline. So a slow router call
(a stop order writes to SQS and DynamoDB per stream) or a long sweep never delays the next
GetRecords, as on Lambda, where the mapping's pollers and the two functions are apart. All stop
when ``stop`` is set (SIGTERM/SIGINT in ``__main__``). ``ready`` is set once the shards'
position is fixed, so a caller writing after it is sure to be seen (even from LATEST).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.aws import client_config, dynamodb_client, sqs_client
from holdfast.core.boto import new_session
from holdfast.core.filters import FILTER_PATTERNS
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.loop import SweepDeps, memory_for, run_sweeps, session_store_for
from holdfast.runner.config import DEFAULT_HANDLER, RunnerConfig
from holdfast.runner.dispatch import Dispatcher
from holdfast.runner.esm import EsmStats, Handler, Invoker
from holdfast.runner.exceptions import ChangesNotFound
from holdfast.runner.matcher import FilterSet
from holdfast.runner.sandbox import Sandboxes
from holdfast.runner.shards import ShardReader, changes_arn_of, to_lambda_record

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_sqs import SQSClient

__all__ = ["Runner", "RunnerStats", "load_handler"]

log = logging.getLogger("holdfast.runner")
MAX_ERROR_WAIT_S = 5.0
SUMMARY_EVERY_S = 60.0  # a progress line while records flow; silence while idle
READ_THREADS = 4  # GetRecords of that many shards at once
MAX_PENDING = 10_000  # records read but not yet invoked before the reader pauses
STOP_FLUSH_S = 5.0


@dataclass
class Timing:
    """Count, mean and max of one duration (ms): the runner's own cadence, for its log."""

    n: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0

    def add(self, ms: float) -> None:
        self.n += 1
        self.total_ms += ms
        self.max_ms = max(self.max_ms, ms)

    def __str__(self) -> str:
        return f"{self.total_ms / self.n:.0f}/{self.max_ms:.0f} ms" if self.n else "-"


@dataclass
class RunnerStats:
    records_read: int = 0
    records_filtered_out: int = 0
    read_errors: int = 0
    esm: EsmStats = field(default_factory=EsmStats)
    get_records: Timing = field(default_factory=Timing)  # one GetRecords call
    poll_gap: Timing = field(default_factory=Timing)  # start to start, per shard

    def summary(self) -> str:
        e = self.esm
        return (f"{self.records_read} records read, {self.records_filtered_out} filtered out, "
                f"{e.invocations} invocations ({e.records_delivered} records delivered, "
                f"{e.retries} retries, {e.function_errors} function errors, {e.dropped} "
                f"dropped), {self.read_errors} read errors; GetRecords mean/max "
                f"{self.get_records}, between polls of a shard {self.poll_gap}")


def load_handler(spec: str, *, init: bool = False) -> Handler:
    """Import ``module:function``; the default router also starts "cold" (fresh clients),
    built at once with ``init`` (a sandbox's init phase) rather than on the first record."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    if spec == DEFAULT_HANDLER:
        module.configure(module.RouterDeps.from_env() if init else None)
    handler: Handler = getattr(module, attr or "lambda_handler")
    return handler


class Runner:
    """Plays the event source mapping and the sweeper schedule for one table."""

    def __init__(self, config: RunnerConfig, *, ddb: DynamoDBClient | None = None,
                 changes: DynamoDBStreamsClient | None = None, sqs: SQSClient | None = None,
                 handler: Handler | None = None, stop: threading.Event | None = None) -> None:
        self.config = config
        self.ddb = ddb or dynamodb_client()
        # Its endpoint comes from AWS_ENDPOINT_URL_DYNAMODB_STREAMS, like any client's.
        self.changes = changes or _changes_client()
        self.sqs = sqs
        # None: the configured handler, loaded in sandbox processes when the mapping starts;
        # imported here too, so that a wrong name fails now and clearly.
        self.handler = handler
        if handler is None:
            module_name, _, attr = config.handler.partition(":")
            getattr(importlib.import_module(module_name), attr or "lambda_handler")
        self.stop = stop or threading.Event()
        self.ready = threading.Event()
        self.stats = RunnerStats()
        self.filters = FilterSet(FILTER_PATTERNS)
        self._sweeper: threading.Thread | None = None
        self._counted: dict[str, float] = {}

    def run(self) -> RunnerStats:
        """Run until ``stop`` is set; returns the counts (also logged)."""
        arn = self._wait_for_changes()
        if arn is None:
            return self.stats
        reader = ShardReader(self.changes, arn, start=self.config.start,
                              refresh_s=self.config.refresh_ms / 1000)
        reader.refresh()
        reader.prime()
        esm = self.config.esm
        dispatcher = Dispatcher(batch_size=esm.batch_size, window_s=esm.batching_window_ms / 1000,
                                parallelization=esm.parallelization)
        sandboxes = (Sandboxes(self.config.handler, esm.parallelization)
                     if self.handler is None else None)
        handler = self.handler or sandboxes
        assert handler is not None
        invoker = Invoker(handler, esm, wait=self.stop.wait, stats=self.stats.esm)
        threads = [threading.Thread(target=self._invoke_loop, args=(dispatcher, invoker),
                                    name=f"invoker-{i}", daemon=True)
                   for i in range(esm.parallelization)]
        try:
            if sandboxes is not None:
                sandboxes.warm()  # the router's cold start, before the first record
            if self.config.sweeper:
                self._start_sweeper()
            for thread in threads:
                thread.start()
            log.info("runner reading %s from %s (%d shards); filters: %d patterns; %d "
                     "concurrent batches; sweeper %s", arn, self.config.start,
                     len(reader.shards), len(self.filters.patterns), esm.parallelization,
                     "on" if self.config.sweeper else "off")
            self.ready.set()
            with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="get-records") as pool:
                self._read_loop(reader, dispatcher, arn, pool)
        finally:
            self.stop.set()
            for thread in threads:
                if thread.is_alive():
                    thread.join()
            self._flush(dispatcher, invoker)
            if sandboxes is not None:
                sandboxes.close()
            if self._sweeper is not None:
                self._sweeper.join(10)
            log.info("runner stopped: %s", self.stats.summary())
        return self.stats

    def _flush(self, dispatcher: Dispatcher, invoker: Invoker) -> None:
        """Deliver what was read, for ``STOP_FLUSH_S`` at most: the reader reads ahead, and a
        supervisor (the fleet: 10 s) would SIGKILL a runner draining a long backlog."""
        deadline = time.monotonic() + STOP_FLUSH_S
        while time.monotonic() < deadline and (batch := dispatcher.take(flush=True)):
            invoker.deliver(batch.shard_id, batch.records)
            dispatcher.done(batch)
        if left := len(dispatcher):
            log.warning("shutdown: %d records read but not delivered (a restarted runner reads "
                        "them again from TRIM_HORIZON)", left)

    def _wait_for_changes(self) -> str | None:
        """The table's DynamoDB Streams ARN, waiting up to ``startup_wait_ms`` for it."""
        deadline = time.monotonic() + self.config.startup_wait_ms / 1000
        logged = False
        while True:
            try:
                return changes_arn_of(self.ddb, self.config.table)
            except (ChangesNotFound, BotoCoreError) as exc:
                if time.monotonic() >= deadline:
                    if isinstance(exc, ChangesNotFound):
                        raise
                    raise ChangesNotFound(f"cannot reach DynamoDB for table "
                                         f"{self.config.table!r}: {exc}") from None
                if not logged:
                    log.info("waiting for table %s and its DynamoDB Streams: %s",
                             self.config.table, exc)
                    logged = True
            if self.stop.wait(0.5):
                return None

    def _read_loop(self, reader: ShardReader, dispatcher: Dispatcher, arn: str,
                   pool: ThreadPoolExecutor) -> None:
        errors_in_row = 0
        next_summary, read_at_summary = time.monotonic() + SUMMARY_EVERY_S, 0
        while not self.stop.is_set():
            if time.monotonic() >= next_summary:
                if self.stats.records_read != read_at_summary:
                    log.info("runner so far: %s", self.stats.summary())
                next_summary = time.monotonic() + SUMMARY_EVERY_S
                read_at_summary = self.stats.records_read
            if len(dispatcher) >= MAX_PENDING:  # back-pressure: the handler is far behind
                self.stop.wait(self.config.poll_ms / 1000)
                continue
            try:
                polled = reader.poll(pool)
            except (BotoCoreError, ClientError) as exc:
                errors_in_row += 1
                self.stats.read_errors += 1
                wait = min(MAX_ERROR_WAIT_S, 0.1 * 2 ** min(errors_in_row, 10))
                log.error("reading the shards failed (%d in a row, next try in %.1f s): %s",
                          errors_in_row, wait, exc)
                self.stop.wait(wait)
                continue
            errors_in_row = 0
            self._count_reads(reader)
            for shard_id, records in polled:
                self.stats.records_read += len(records)
                matched = [to_lambda_record(r, arn) for r in records if self.filters(r)]
                self.stats.records_filtered_out += len(records) - len(matched)
                dispatcher.add(shard_id, matched)
            if not polled:  # after records, read again at once: more are likely
                self.stop.wait(self.config.poll_ms / 1000)

    def _count_reads(self, reader: ShardReader) -> None:
        for state in reader.shards.values():
            if state.read_at is not None and state.read_at != self._counted.get(state.shard_id):
                self._counted[state.shard_id] = state.read_at
                self.stats.get_records.add(state.read_ms)
                if state.gap_ms is not None:
                    self.stats.poll_gap.add(state.gap_ms)

    def _invoke_loop(self, dispatcher: Dispatcher, invoker: Invoker) -> None:
        while not self.stop.is_set():
            batch = dispatcher.wait_batch(self.stop)
            if batch is None:
                continue
            try:
                invoker.deliver(batch.shard_id, batch.records)
            except Exception:  # a bug here must not stop the mapping
                log.exception("delivering a batch from shard %s failed", batch.shard_id)
            finally:
                dispatcher.done(batch)

    def _start_sweeper(self) -> None:
        settings = Settings.from_env()
        sqs = self.sqs or sqs_client(client_config(read_timeout=5.0))
        deps = SweepDeps(self.ddb, sqs, settings, sleep=self.stop.wait,
                         log=logging.getLogger("holdfast.runner.sweeper"),
                         sessions=session_store_for(self.ddb, settings))
        memory = memory_for(settings)

        def sweep() -> None:
            while not self.stop.is_set():
                try:
                    run_sweeps(deps, memory, should_stop=self.stop.is_set)
                except Exception:
                    log.exception("sweeper loop crashed; restarting it in 1 s")
                    self.stop.wait(1.0)

        self._sweeper = threading.Thread(target=sweep, name="sweeper", daemon=True)
        self._sweeper.start()


def _changes_client() -> DynamoDBStreamsClient:
    return new_session().client("dynamodbstreams", config=client_config())
