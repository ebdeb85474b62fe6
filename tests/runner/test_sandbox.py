"""The runner's sandboxes: child processes that serve the handler's invocations."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import pytest

from holdfast.runner.context import LocalContext
from holdfast.runner.sandbox import Sandboxes


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
