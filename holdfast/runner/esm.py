"""The event source mapping's job: batch records per shard, invoke, retry, give up, count.

Semantics follow Lambda's DynamoDB Streams mapping with ``ReportBatchItemFailures``:

- a batch is at most ``batch_size`` records of one shard, sent when full or when the batching
  window since its first record has passed (window 0: as soon as records are read); up to
  ``parallelization`` batches at once, records of one item in order (``dispatch``);
- a partial batch response checkpoints at the lowest failed sequence number, and the batch is
  retried from there (so records after it are delivered again: nudges are idempotent);
- a response naming no known sequence number, or that is not a partial batch response, fails
  the whole batch; a function error fails it too and, with ``bisect_on_error``, splits it in
  halves that are retried separately (splitting does not use up retries);
- after ``max_retry_attempts`` retries the remaining records are dropped with an error line
  naming them and the ``dropped`` count goes up (the on-failure destination of the mapping).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from holdfast.lambdas.router.deps import FUNCTION_TIMEOUT_S
from holdfast.runner.context import LocalContext

__all__ = ["EsmConfig", "EsmStats", "Invoker"]

log = logging.getLogger(__name__)
Handler = Callable[[dict[str, Any], Any], Any]


@dataclass(frozen=True, slots=True)
class EsmConfig:
    function_name: str = "holdfast-router"
    batch_size: int = 100
    batching_window_ms: int = 0
    max_retry_attempts: int = 3
    # Lambda's ParallelizationFactor: concurrent batches (here per runner), order kept per item.
    parallelization: int = 1
    bisect_on_error: bool = True
    retry_backoff_ms: int = 100
    function_timeout_ms: int = FUNCTION_TIMEOUT_S * 1000  # the stack's


@dataclass
class EsmStats:
    invocations: int = 0
    records_delivered: int = 0
    retries: int = 0
    function_errors: int = 0
    dropped: int = 0
    durations_ms: list[float] = field(default_factory=list)


def _seq(record: dict[str, Any]) -> str:
    return str(record.get("dynamodb", {}).get("SequenceNumber", ""))


class Invoker:
    """Invokes ``handler`` for one shard's batch, with the mapping's retry semantics."""

    def __init__(self, handler: Handler, config: EsmConfig, *,
                 wait: Callable[[float], bool], stats: EsmStats | None = None) -> None:
        self.handler = handler
        self.config = config
        self.wait = wait  # sleeps, returning True if shutdown was requested meanwhile
        self.stats = stats or EsmStats()
        self._lock = threading.Lock()  # several invoker threads count into one EsmStats

    def deliver(self, shard_id: str, batch: list[dict[str, Any]], attempt: int = 0) -> None:
        """Deliver ``batch`` until it succeeds, is dropped, or shutdown interrupts retries."""
        pending = batch
        while pending:
            failed_from, function_error = self._invoke(shard_id, pending)
            if failed_from is None:
                return
            retry = pending[failed_from:]
            if function_error and self.config.bisect_on_error and len(retry) > 1:
                half = len(retry) // 2
                log.warning("bisecting a failed batch of %d records from shard %s",
                            len(retry), shard_id)
                self.deliver(shard_id, retry[:half], attempt)
                self.deliver(shard_id, retry[half:], attempt)
                return
            attempt += 1
            if attempt > self.config.max_retry_attempts:
                self._drop(shard_id, retry)
                return
            with self._lock:
                self.stats.retries += 1
            backoff = self.config.retry_backoff_ms * 2 ** (attempt - 1) / 1000
            if self.wait(backoff):
                log.warning("shutdown: %d records from shard %s left undelivered (a restarted "
                            "runner reads them again)", len(retry), shard_id)
                return
            pending = retry

    def _invoke(self, shard_id: str, batch: list[dict[str, Any]]) -> tuple[int | None, bool]:
        """Invoke once: (index to retry from or None on success, whether the function raised)."""
        context = LocalContext(self.config.function_name, self.config.function_timeout_ms)
        started = time.perf_counter()
        with self._lock:
            self.stats.invocations += 1
        try:
            response = self.handler({"Records": batch}, context)
        except Exception as exc:
            with self._lock:
                self.stats.function_errors += 1
            log.error("%s failed on %d records from shard %s: %s: %s", self.config.function_name,
                      len(batch), shard_id, type(exc).__name__, exc)
            return 0, True
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            self.stats.durations_ms.append(elapsed)
            del self.stats.durations_ms[:-1000]  # keep the recent ones only
        failed_from = self._failed_from(batch, response)
        delivered = len(batch) if failed_from is None else failed_from
        with self._lock:
            self.stats.records_delivered += delivered
        log.info("invoked %s: %d record%s from shard %s in %.0f ms%s",
                 self.config.function_name, len(batch), "" if len(batch) == 1 else "s", shard_id,
                 elapsed,
                 "" if failed_from is None else f", retrying from record {failed_from}")
        return failed_from, False

    def _failed_from(self, batch: list[dict[str, Any]], response: Any) -> int | None:
        if response is None or response == {}:
            return None
        failures = response.get("batchItemFailures") if isinstance(response, dict) else "bad"
        if failures is None or failures == []:
            return None
        positions = {_seq(r): i for i, r in enumerate(batch)}
        if not isinstance(failures, list):
            log.error("%s returned an invalid response; failing the batch: %.200r",
                      self.config.function_name, response)
            return 0
        indexes = []
        for failure in failures:
            ident = failure.get("itemIdentifier") if isinstance(failure, dict) else None
            if not isinstance(ident, str) or ident not in positions:
                log.error("%s reported unknown item %.100r; failing the batch",
                          self.config.function_name, ident)
                return 0
            indexes.append(positions[ident])
        return min(indexes)

    def _drop(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        with self._lock:
            self.stats.dropped += len(records)
        keys = [str(r.get("dynamodb", {}).get("Keys", {}).get("Pk", {}).get("S", "?"))
                for r in records[:20]]
        log.error("dropped %d records from shard %s after %d retries (sequence %s..%s; keys %s%s)",
                  len(records), shard_id, self.config.max_retry_attempts, _seq(records[0]),
                  _seq(records[-1]), ", ".join(keys), " ..." if len(records) > 20 else "")
