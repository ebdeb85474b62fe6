"""The Lambdas' settings: the lease timings come from the workers' own variables and reader."""

from __future__ import annotations

import pytest

from holdfast.core.exceptions import ConfigError
from holdfast.core.rules import LeaseTiming
from holdfast.lambdas.settings import Settings
from holdfast.worker.config import load_config

BASE = {"HOLDFAST_TABLE": "t", "HOLDFAST_QUEUE_URL": "http://127.0.0.1:1/q"}
WORKER = {**BASE, "HOLDFAST_WORKER_ID": "w1", "HOLDFAST_SESSION_TABLE": "s"}


def test_defaults_are_the_workers_defaults() -> None:
    """Without timing variables the router and sweeper use the worker's TTL and skew."""
    s = Settings.from_env(BASE)
    assert (s.lease_ms, s.skew_ms) == (LeaseTiming().lease_ms, LeaseTiming().skew_ms) == (
        4_000, 250)
    assert (Settings(table="t", queue_url="q").lease_ms, Settings(table="t", queue_url="q")
            .skew_ms) == (4_000, 250)


@pytest.mark.parametrize("timing", [
    {},
    {"HOLDFAST_LEASE_SECONDS": "3", "HOLDFAST_HEARTBEAT_SECONDS": "0.5",
     "HOLDFAST_SKEW_MS": "300"},
    {"HOLDFAST_LEASE_SECONDS": "20", "HOLDFAST_HEARTBEAT_SECONDS": "5"},
])
def test_one_environment_means_one_lease_for_worker_and_lambdas(timing: dict[str, str]) -> None:
    """The environment a worker is given gives the Lambdas the same TTL and skew."""
    worker = load_config({**WORKER, **timing})
    s = Settings.from_env({**BASE, **timing})
    assert (s.lease_ms, s.skew_ms) == (worker.lease_ms, worker.timing.skew_ms)


def test_the_old_millisecond_variable_is_not_read() -> None:
    """HOLDFAST_LEASE_MS (the old Lambda-only name) no longer sets the lease."""
    assert Settings.from_env({**BASE, "HOLDFAST_LEASE_MS": "20000"}).lease_ms == 4_000


@pytest.mark.parametrize(("env", "name"), [
    ({"HOLDFAST_LEASE_SECONDS": "soon"}, "HOLDFAST_LEASE_SECONDS"),
    ({"HOLDFAST_LEASE_SECONDS": "2"}, "HOLDFAST_HEARTBEAT_SECONDS"),  # 1 s heartbeat too long
    ({"HOLDFAST_SKEW_MS": "-5"}, "HOLDFAST_SKEW_MS"),
])
def test_bad_timings_name_the_variable(env: dict[str, str], name: str) -> None:
    """A timing the worker would refuse, the Lambdas refuse with the same variable named."""
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({**BASE, **env})


def test_the_dataclass_defaults_are_what_an_empty_environment_reads() -> None:
    """Settings built in code and Settings read from a bare environment agree on every default."""
    assert Settings.from_env(BASE) == Settings(table="t", queue_url="http://127.0.0.1:1/q")


@pytest.mark.parametrize(("env", "name"), [
    ({"HOLDFAST_QUEUE_URL": "holdfast-nudges"}, "HOLDFAST_QUEUE_URL"),  # as the worker refuses it
    ({"HOLDFAST_BALANCE": "sometimes"}, "HOLDFAST_BALANCE"),
    ({"HOLDFAST_BALANCE_BAND": "1.5"}, "HOLDFAST_BALANCE_BAND"),
    ({"HOLDFAST_SWEEP_INTERVAL_MS": "5"}, "HOLDFAST_SWEEP_INTERVAL_MS"),
    ({"HOLDFAST_ORDERS_QUEUE_PREFIX": "bad.prefix"}, "HOLDFAST_ORDERS_QUEUE_PREFIX"),
    ({"HOLDFAST_BALANCE_TARGET_TTL_MS": "4000"}, "HOLDFAST_BALANCE_TARGET_TTL_MS"),
])
def test_bad_lambda_settings_name_the_variable(env: dict[str, str], name: str) -> None:
    """A bad router or sweeper value is a ConfigError naming its variable."""
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({**BASE, **env})
