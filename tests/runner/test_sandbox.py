"""The runner's sandboxes: child processes that serve the handler's invocations."""

from __future__ import annotations

import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from holdfast.runner.context import LocalContext
from holdfast.runner.sandbox import FunctionTimedOut, Sandboxes


def test_a_dead_sandbox_fails_its_invocation_and_the_next_one_gets_a_fresh_one() -> None:
    """The invocation whose sandbox died is a function error; the next batch is served (a
    broken pool refused every later invocation for the runner's life)."""
    boxes = Sandboxes("tests.runner.crashing_handler:handle", 1)
    try:
        context = LocalContext("router", 30_000)
        assert boxes({"Records": []}, context) == {"batchItemFailures": []}
        with pytest.raises(BrokenProcessPool):
            boxes({"crash": True}, context)
        assert boxes({"Records": []}, context) == {"batchItemFailures": []}
    finally:
        boxes.close()


def test_an_invocation_past_its_timeout_is_a_function_error_and_its_sandbox_is_replaced(
        ) -> None:
    """A handler still running when the function's time is up fails at the timeout (not when
    it returns), as Lambda's "Task timed out"; the next invocation is served."""
    boxes = Sandboxes("tests.runner.overrunning_handler:handle", 1)
    try:
        boxes.warm()
        started = time.monotonic()
        with pytest.raises(FunctionTimedOut):
            boxes({"sleep_s": 30}, LocalContext("router", 500))
        assert time.monotonic() - started < 10
        assert boxes({"Records": []}, LocalContext("router", 30_000)) == {
            "batchItemFailures": []}
    finally:
        boxes.close()
