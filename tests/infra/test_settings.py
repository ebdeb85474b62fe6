"""Settings from CDK context: defaults, both value forms, and clear errors for bad values."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.exceptions import ConfigError
from infra.exceptions import SettingsError
from infra.settings import Settings, context_key
from tests.infra.conftest import cdk_json


def from_context(**values: Any) -> Settings:
    return Settings.from_context(values.get)


def test_defaults_need_no_context() -> None:
    """With no context at all the settings are the documented defaults."""
    s = from_context()
    assert s == Settings()
    assert (s.lease_seconds, s.heartbeat_seconds, s.table_billing) == (20, 5, "on-demand")
    assert s.deletion_protection and s.removal_policy == "retain"
    assert s.vpc_id is None and s.min_tasks >= 2


def test_cli_strings_and_json_values_parse_alike() -> None:
    """`-c key=value` gives strings, cdk.json gives typed JSON: both mean the same."""
    typed = from_context(leaseSeconds=30, heartbeatSeconds=6, deletionProtection=False,
                         tableBilling="provisioned")
    strings = from_context(leaseSeconds="30", heartbeatSeconds=" 6 ",
                           deletionProtection="false", tableBilling="PROVISIONED")
    assert typed == strings
    assert typed.lease_seconds == 30 and typed.deletion_protection is False


def test_context_keys_are_camel_case() -> None:
    """Field names map to the camelCase keys the docs and cdk.json use."""
    assert context_key("max_connections_per_task") == "maxConnectionsPerTask"
    keys = {key for key, _, _ in Settings.describe()}
    assert {"leaseSeconds", "vpcId", "tableBilling", "logRetentionDays", "minTasks"} <= keys


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("leaseSeconds", "twenty", "leaseSeconds='twenty'"),
    ("leaseSeconds", True, "expected an integer"),
    ("leaseSeconds", 0, "between 3 and 300"),
    ("tableBilling", "serverless", "on-demand, provisioned"),
    ("deletionProtection", "maybe", "true or false"),
    ("vpcId", "my-vpc", "vpc-0123abcd"),
    ("logRetentionDays", 31, "CloudWatch allows"),
    ("alarmEmail", "not-an-address", "e-mail"),
    ("fleetName", "Has Spaces", "fleetName"),
    ("taskCpu", 300, "Fargate allows"),
    ("taskMemoryMib", 600, "with 512 CPU units"),
    ("stopTimeoutSeconds", 121, "between 10 and 120"),
])
def test_bad_values_name_the_key_and_what_is_allowed(key: str, value: Any, needle: str) -> None:
    """A bad context value fails with a message naming the key and the allowed values."""
    with pytest.raises(SettingsError) as err:
        from_context(**{key: value})
    assert needle in str(err.value)
    assert key in str(err.value)


def test_lease_timing_is_checked_with_the_core_rules() -> None:
    """A heartbeat too long for the lease is refused, using holdfast.core's own rule."""
    with pytest.raises(ConfigError, match="heartbeat"):
        from_context(leaseSeconds=10, heartbeatSeconds=5)
    assert from_context(leaseSeconds=12, heartbeatSeconds=5).lease_ms == 12_000


@pytest.mark.parametrize(("values", "needle"), [
    ({"minTasks": 5, "maxTasks": 4}, "minTasks=5 is above maxTasks=4"),
    ({"removalPolicy": "destroy"}, "deletionProtection=false"),
    ({"tableReadMin": 50, "tableReadMax": 10}, "tableReadMin"),
    ({"stopTimeoutSeconds": 34}, "at least"),  # < lease 20 + heartbeat 5 + 10
])
def test_inconsistent_combinations_are_refused(values: dict[str, Any], needle: str) -> None:
    """Values fine alone but contradictory together fail at synth, not mid-deployment."""
    with pytest.raises(SettingsError, match=needle):
        from_context(**values)


def test_empty_optional_value_means_unset() -> None:
    """`-c vpcId=` clears an optional setting instead of failing."""
    assert from_context(vpcId="", alarmEmail="").vpc_id is None


def test_target_connections_follow_utilization() -> None:
    """Target tracking aims at the given percentage of a task's maximum connections."""
    s = from_context(maxConnectionsPerTask=1000, targetUtilizationPercent=70)
    assert s.target_connections_per_task == 700


def test_cdk_json_context_is_valid_and_known() -> None:
    """Every Holdfast key in cdk.json is a known setting and its value parses."""
    context = cdk_json()["context"]
    known = {key for key, _, _ in Settings.describe()}
    ours = {k: v for k, v in context.items() if not k.startswith(("@", "aws:", "cli-"))}
    assert ours, "cdk.json should show the main settings"
    assert set(ours) <= known, f"unknown settings in cdk.json: {set(ours) - known}"
    Settings.from_context(context.get)
