"""Retry semantics of the local event source mapping (batching: ``test_dispatch``)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.lambdas.router.deps import FUNCTION_TIMEOUT_S
from holdfast.runner.esm import EsmConfig, Invoker


def rec(seq: int) -> dict[str, Any]:
    return {"eventName": "INSERT", "dynamodb": {"SequenceNumber": f"{seq:021d}",
                                                "Keys": {"Pk": {"S": f"CONN#c{seq}"}}}}


def seqs(batch: list[dict[str, Any]]) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in batch]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A handler that records each invocation and answers from a script."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[list[int]] = []
        self.contexts: list[Any] = []

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        self.calls.append(seqs(event["Records"]))
        self.contexts.append(context)
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(event)
        return answer


def fail(*numbers: int) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": f"{n:021d}"} for n in numbers]}


def invoker(handler: Recorder, **kw: Any) -> tuple[Invoker, list[float]]:
    waits: list[float] = []

    def wait(s: float) -> bool:
        waits.append(s)
        return False

    return Invoker(handler, EsmConfig(**kw), wait=wait), waits


def test_success_is_one_invocation_with_a_lambda_context() -> None:
    """A successful batch is invoked once with a context that looks like Lambda's."""
    h = Recorder({"batchItemFailures": []})
    inv, _ = invoker(h)
    inv.deliver("s1", [rec(1), rec(2)])
    assert h.calls == [[1, 2]]
    ctx = h.contexts[0]
    assert ctx.function_name == "holdfast-router"
    assert 0 < ctx.get_remaining_time_in_millis() <= FUNCTION_TIMEOUT_S * 1000
    assert ctx.invoked_function_arn.endswith(":function:holdfast-router")
    assert inv.stats.records_delivered == 2 and inv.stats.dropped == 0


def test_partial_failure_retries_from_the_lowest_failed_record() -> None:
    """Failures at 3 and 5: the retry starts at 3 (checkpoint), as Lambda does."""
    h = Recorder(fail(5, 3), {})
    inv, waits = invoker(h)
    inv.deliver("s1", [rec(i) for i in range(1, 7)])
    assert h.calls == [[1, 2, 3, 4, 5, 6], [3, 4, 5, 6]]
    assert waits == [0.1]
    assert inv.stats.records_delivered == 6


def test_unknown_identifier_fails_the_whole_batch() -> None:
    """A response naming a record not in the batch is treated as a complete failure."""
    h = Recorder({"batchItemFailures": [{"itemIdentifier": "nope"}]}, None)
    inv, _ = invoker(h)
    inv.deliver("s1", [rec(1), rec(2)])
    assert h.calls == [[1, 2], [1, 2]]


def test_function_error_bisects() -> None:
    """A raising handler's batch is split; only the half with the poison record keeps failing."""

    def poison(event: dict[str, Any]) -> Any:
        if 3 in seqs(event["Records"]):
            raise RuntimeError("poison")
        return None

    h = Recorder(*[poison] * 20)
    inv, _ = invoker(h, max_retry_attempts=1)
    inv.deliver("s1", [rec(i) for i in range(1, 5)])
    assert h.calls == [[1, 2, 3, 4], [1, 2], [3, 4], [3], [3], [4]]
    assert inv.stats.dropped == 1
    assert inv.stats.records_delivered == 3


def test_retries_are_bounded_then_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """After max retries the failing records are dropped with an error line naming them."""
    h = Recorder(*[fail(2)] * 10)
    inv, waits = invoker(h, max_retry_attempts=2, bisect_on_error=False)
    inv.deliver("s1", [rec(1), rec(2), rec(3)])
    assert h.calls == [[1, 2, 3], [2, 3], [2, 3]]
    assert waits == [0.1, 0.2]
    assert inv.stats.dropped == 2 and inv.stats.retries == 2
    assert "dropped 2 records" in caplog.text and "CONN#c2" in caplog.text


def test_shutdown_interrupts_retries() -> None:
    """If shutdown is requested while waiting to retry, the batch is left (not dropped)."""
    h = Recorder(RuntimeError("down"))
    inv = Invoker(h, EsmConfig(bisect_on_error=False), wait=lambda _s: True)
    inv.deliver("s1", [rec(1)])
    assert h.calls == [[1]]
    assert inv.stats.dropped == 0
