"""Fixtures for runner tests: a private table and queue, and a runner thread on them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from holdfast.localaws import LocalAws
from holdfast.runner.config import RunnerConfig
from holdfast.runner.runner import Runner
from tests.conftest import TIMEOUT_SCALE
from tests.lambdas.helpers import new_queue, new_table

RunnerFactory = Callable[..., Any]


@pytest.fixture
def runner_env(aws_env: dict[str, str], ddb_local: LocalAws,
               monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The local AWS environment, with a table and queue of this test's own."""
    env = {"HOLDFAST_TABLE": new_table(ddb_local), "HOLDFAST_QUEUE_URL": new_queue(ddb_local),
           "HOLDFAST_SKEW_MS": "100", "HOLDFAST_SWEEP_UNCLAIMED_GRACE_MS": "1000"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {**aws_env, **env}



@contextmanager
def running(config: RunnerConfig) -> Iterator[Runner]:
    """A runner in a thread, ready to see writes; stopped and joined on exit."""
    runner = Runner(config)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            runner.run()
        except BaseException as exc:  # surfaced to the test below
            result["error"] = exc
            runner.ready.set()

    thread = threading.Thread(target=target, name="runner", daemon=True)
    thread.start()
    assert runner.ready.wait(20 * TIMEOUT_SCALE), "runner did not start"
    if "error" in result:
        raise result["error"]
    try:
        yield runner
    finally:
        runner.stop.set()
        thread.join(20 * TIMEOUT_SCALE)
        assert not thread.is_alive(), "runner did not stop"
    if "error" in result:
        raise result["error"]
