"""The sweeper reads how to release a dead session's streams from the workers' variable."""

from __future__ import annotations

import pytest

from holdfast.core.exceptions import ConfigError
from holdfast.lambdas.settings import Settings
from holdfast.localaws import LocalAws

BASE = {"HOLDFAST_TABLE": "t", "HOLDFAST_QUEUE_URL": "http://127.0.0.1:1/q"}


def test_batch_by_default_single_when_set_and_a_bad_value_names_the_variable() -> None:
    """Unset (as on AWS): batch; HOLDFAST_RENEW_MODE=single: single; anything else refused."""
    assert Settings.from_env(BASE).renew_mode == "batch"
    assert Settings(table="t", queue_url="q").renew_mode == "batch"
    assert Settings.from_env({**BASE, "HOLDFAST_RENEW_MODE": "single"}).renew_mode == "single"
    with pytest.raises(ConfigError, match="HOLDFAST_RENEW_MODE"):
        Settings.from_env({**BASE, "HOLDFAST_RENEW_MODE": "turbo"})


@pytest.mark.parametrize(("backend", "mode"), [("ddb_local", "batch"), ("moto_local", "single")])
def test_the_local_stack_gives_the_sweeper_the_workers_mode(
        backend: str, mode: str, request: pytest.FixtureRequest) -> None:
    """DynamoDB Local: batch; moto (whose PartiQL ignores conditions): single."""
    aws: LocalAws = request.getfixturevalue(backend)
    assert Settings.from_env(aws.env()).renew_mode == mode
