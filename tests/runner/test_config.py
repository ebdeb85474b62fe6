"""The local runner's settings: read through the one schema, same words as every component."""

from __future__ import annotations

import dataclasses

import pytest

from holdfast.core.exceptions import ConfigError
from holdfast.runner.config import RunnerConfig

BASE = {"HOLDFAST_TABLE": "t"}


def test_defaults_and_the_shared_flag_words() -> None:
    """Defaults match the dataclass's (4 parallel batches locally, see the module);
    HOLDFAST_RUNNER_SWEEPER takes on/off like every flag."""
    config = RunnerConfig.from_env(BASE)
    assert dataclasses.replace(config, esm=RunnerConfig(table="t").esm) == RunnerConfig(table="t")
    assert (config.esm.parallelization, config.esm.batch_size) == (4, 100)
    assert not RunnerConfig.from_env({**BASE, "HOLDFAST_RUNNER_SWEEPER": "off"}).sweeper
    assert RunnerConfig.from_env({**BASE, "HOLDFAST_RUNNER_START": "latest"}).start == "LATEST"


@pytest.mark.parametrize(("env", "message"), [
    ({"HOLDFAST_TABLE": ""}, "HOLDFAST_TABLE is not set: it must name the DynamoDB lease table "
                             "(source the env printed by `holdfast localaws`)"),
    ({"HOLDFAST_RUNNER_START": "middle"}, "HOLDFAST_RUNNER_START='MIDDLE' must be one of"),
    ({"HOLDFAST_RUNNER_PARALLELIZATION": "11"}, "allowed 1 to 10"),
    ({"HOLDFAST_RUNNER_SWEEPER": "maybe"}, "HOLDFAST_RUNNER_SWEEPER='maybe' must be on or off"),
])
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    """A bad runner setting is a ConfigError naming the variable and what is allowed."""
    with pytest.raises(ConfigError) as err:
        RunnerConfig.from_env({**BASE, **env})
    assert message in str(err.value)
