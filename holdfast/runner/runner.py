"""The local runner: change records -> filter -> batch -> router handler, plus the sweeper.

One thread polls the table's shards (every ``poll_ms`` when idle, at once while records keep coming)
and invokes the handler; a second thread runs the sweeper loop with no deadline. Both stop
when ``stop`` is set (SIGTERM/SIGINT in ``__main__``). ``ready`` is set once the shards
position is fixed, so a caller writing after it is sure to be seen (even from LATEST).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.aws import client_config, dynamodb_client, sqs_client
from holdfast.core.filters import FILTER_PATTERNS
from holdfast.runner.config import DEFAULT_HANDLER, RunnerConfig
from holdfast.runner.esm import Batcher, EsmStats, Handler, Invoker
from holdfast.runner.exceptions import ChangesNotFound
from holdfast.runner.matcher import FilterSet
from holdfast.runner.shards import ShardReader, changes_arn_of, to_lambda_record
from lambdas.settings import Settings
from lambdas.sweeper.loop import SweepDeps, memory_for, run_sweeps, session_store_for

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_sqs import SQSClient

__all__ = ["Runner", "RunnerStats", "load_handler"]

log = logging.getLogger("holdfast.runner")
MAX_ERROR_WAIT_S = 5.0
SUMMARY_EVERY_S = 60.0  # a progress line while records flow; silence while idle


@dataclass
class RunnerStats:
    records_read: int = 0
    records_filtered_out: int = 0
    read_errors: int = 0
    esm: EsmStats = field(default_factory=EsmStats)

    def summary(self) -> str:
        e = self.esm
        return (f"{self.records_read} records read, {self.records_filtered_out} filtered out, "
                f"{e.invocations} invocations ({e.records_delivered} records delivered, "
                f"{e.retries} retries, {e.function_errors} function errors, {e.dropped} "
                f"dropped), {self.read_errors} read errors")


def load_handler(spec: str) -> Handler:
    """Import ``module:function``; the default router also starts "cold" (fresh clients)."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    if spec == DEFAULT_HANDLER:
        module.configure(None)
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
        self.handler = handler or load_handler(config.handler)
        self.stop = stop or threading.Event()
        self.ready = threading.Event()
        self.stats = RunnerStats()
        self.filters = FilterSet(FILTER_PATTERNS)
        self._sweeper: threading.Thread | None = None

    def run(self) -> RunnerStats:
        """Run until ``stop`` is set; returns the counts (also logged)."""
        arn = self._wait_for_changes()
        if arn is None:
            return self.stats
        reader = ShardReader(self.changes, arn, start=self.config.start,
                              refresh_s=self.config.refresh_ms / 1000)
        reader.refresh()
        reader.prime()
        batcher = Batcher(self.config.esm)
        invoker = Invoker(self.handler, self.config.esm, wait=self.stop.wait,
                          stats=self.stats.esm)
        if self.config.sweeper:
            self._start_sweeper()
        log.info("runner reading %s from %s (%d shards); filters: %d patterns; sweeper %s",
                 arn, self.config.start, len(reader.shards), len(self.filters.patterns),
                 "on" if self.config.sweeper else "off")
        self.ready.set()
        try:
            self._loop(reader, batcher, invoker, arn)
        finally:
            self.stop.set()
            for shard_id, batch in batcher.ready(flush=True):
                invoker.deliver(shard_id, batch)
            if self._sweeper is not None:
                self._sweeper.join(10)
            log.info("runner stopped: %s", self.stats.summary())
        return self.stats

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

    def _loop(self, reader: ShardReader, batcher: Batcher, invoker: Invoker, arn: str) -> None:
        errors_in_row = 0
        next_summary, read_at_summary = time.monotonic() + SUMMARY_EVERY_S, 0
        while not self.stop.is_set():
            if time.monotonic() >= next_summary:
                if self.stats.records_read != read_at_summary:
                    log.info("runner so far: %s", self.stats.summary())
                next_summary = time.monotonic() + SUMMARY_EVERY_S
                read_at_summary = self.stats.records_read
            try:
                polled = reader.poll()
            except (BotoCoreError, ClientError) as exc:
                errors_in_row += 1
                self.stats.read_errors += 1
                wait = min(MAX_ERROR_WAIT_S, 0.1 * 2 ** min(errors_in_row, 10))
                log.error("reading the shards failed (%d in a row, next try in %.1f s): %s",
                          errors_in_row, wait, exc)
                self.stop.wait(wait)
                continue
            errors_in_row = 0
            for shard_id, records in polled:
                self.stats.records_read += len(records)
                matched = [to_lambda_record(r, arn) for r in records if self.filters(r)]
                self.stats.records_filtered_out += len(records) - len(matched)
                batcher.add(shard_id, matched)
            for shard_id, batch in batcher.ready():
                invoker.deliver(shard_id, batch)
            if not polled:
                wait = self.config.poll_ms / 1000
                deadline = batcher.next_deadline()
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - time.monotonic()))
                self.stop.wait(wait)

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
    return boto3.session.Session().client("dynamodbstreams", config=client_config())
