"""Settings from CDK context: defaults, both value forms, and clear errors for bad values."""

from __future__ import annotations

import re
from typing import Any

import pytest

from holdfast.core import settings as worker_settings
from holdfast.core.exceptions import ConfigError
from holdfast.core.urls import parse_allow_list
from holdfast.infra.exceptions import SettingsError
from holdfast.infra.settings import Settings, context_key
from tests.infra.conftest import cdk_json


def from_context(**values: Any) -> Settings:
    return Settings.from_context(values.get)


def test_defaults_need_no_context() -> None:
    """With no context at all the settings are the documented defaults."""
    s = from_context()
    assert s == Settings()
    assert (s.lease_seconds, s.heartbeat_seconds, s.checkpoint_seconds) == (4, 1, 20)
    assert s.table_billing == "on-demand" and s.shutdown_seconds == 25
    assert s.deletion_protection and s.removal_policy == "retain"
    assert s.vpc_id is None and s.min_tasks >= 2


def test_cli_strings_and_json_values_parse_alike() -> None:
    """`-c key=value` gives strings, cdk.json gives typed JSON: both mean the same."""
    typed = from_context(leaseSeconds=30, heartbeatSeconds=6, checkpointSeconds=45,
                         deletionProtection=False, tableBilling="provisioned")
    strings = from_context(leaseSeconds="30", heartbeatSeconds=" 6 ", checkpointSeconds="45",
                           deletionProtection="false", tableBilling="PROVISIONED")
    assert typed == strings
    assert typed.lease_seconds == 30 and typed.deletion_protection is False
    assert typed.checkpoint_seconds == 45


def test_tracing_is_off_by_default_and_old_booleans_map() -> None:
    """off by default; the old true/false values mean xray/off; anything else is refused."""
    assert Settings().tracing == "off" and not Settings().xray
    for raw, mode in ((True, "xray"), ("true", "xray"), (False, "off"), ("false", "off"),
                      ("XRAY", "xray"), ("off", "off")):
        assert from_context(tracing=raw).tracing == mode
    with pytest.raises(SettingsError, match=r"tracing.*off or xray"):
        from_context(tracing="jaeger")


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
    ("checkpointSeconds", 0, "between 1 and 1200"),
    ("checkpointSeconds", 1201, "between 1 and 1200"),
    ("checkpointSeconds", "often", "expected an integer"),
    ("tableName", "x" * 247, "at most 246"),
    ("natGateways", 3, "between 1 and 2"),  # the new VPC spans two AZs
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
    # The default lease of 4 s fits two heartbeats of at most 1 s (4 - skew 0.25 - margin 0.4).
    assert from_context(heartbeatSeconds=1).heartbeat_seconds == 1
    with pytest.raises(ConfigError, match="heartbeat"):
        from_context(heartbeatSeconds=2)


@pytest.mark.parametrize(("values", "needle"), [
    ({"minTasks": 5, "maxTasks": 4}, "minTasks=5 is above maxTasks=4"),
    ({"removalPolicy": "destroy"}, "deletionProtection=false"),
    ({"tableReadMin": 50, "tableReadMax": 10}, "tableReadMin"),
    ({"stopTimeoutSeconds": 34}, "at least"),  # < the 25 s stop budget + 10
    # The worker would refuse to start: 2000 x 256 KiB x 5 of frame buffers in 1 GiB.
    ({"maxConnectionsPerTask": 2000}, "maxConnectionsPerTask/taskMemoryMib: .*does not fit"),
    # A stop budget ECS's longest stop timeout cannot hold: the lease is what to change.
    ({"leaseSeconds": 110, "heartbeatSeconds": 5}, "leaseSeconds=110/heartbeatSeconds=5: .*at "
                                                   "most 110 s together"),
])
def test_inconsistent_combinations_are_refused(values: dict[str, Any], needle: str) -> None:
    """Values fine alone but contradictory together fail at synth, not mid-deployment."""
    with pytest.raises(SettingsError, match=needle):
        from_context(**values)


def test_more_connections_with_more_memory_are_accepted() -> None:
    """2,000 connections per task synthesize once the task has the memory their frame
    buffers need (what the deploy guide shows)."""
    assert from_context(maxConnectionsPerTask=2000, taskCpu=1024,
                        taskMemoryMib=4096).max_connections_per_task == 2000


def test_checkpoint_range_edges_are_accepted() -> None:
    """checkpointSeconds accepts 1 and 1200; the shortest stop timeout is accepted too."""
    assert from_context(checkpointSeconds=1).checkpoint_seconds == 1
    assert from_context(checkpointSeconds="1200").checkpoint_seconds == 1200
    assert from_context(stopTimeoutSeconds=35).stop_timeout_seconds == 35


def test_session_table_is_named_after_the_lease_table() -> None:
    """tableName=x gives x-sessions; no tableName leaves both names to CloudFormation."""
    assert from_context(tableName="prod-leases").session_table_name == "prod-leases-sessions"
    assert from_context(tableName="x" * 246).session_table_name == "x" * 246 + "-sessions"
    assert from_context().session_table_name is None


@pytest.mark.parametrize(("values", "expected"), [
    ({}, (40, 200)),  # 10 tasks x 2 (deploying) / 0.5 s (the throttled heartbeat)
    ({"tableWriteMin": 50}, (50, 200)),  # the configured minimum is higher
    ({"maxTasks": 100, "leaseSeconds": 12, "heartbeatSeconds": 3}, (67, 200)),  # rounded up;
    # a usable window that wide keeps the period when refused (``throttled_heartbeat_ms``)
    ({"maxTasks": 100}, (400, 400)),  # the floor lifts the maximum too
])
def test_session_write_floor_covers_every_heartbeat(values: dict[str, Any],
                                                    expected: tuple[int, int]) -> None:
    """Provisioned session writes never start below 2 x maxTasks / the throttled heartbeat."""
    assert from_context(**values).session_write_capacity == expected


def test_empty_optional_value_means_unset() -> None:
    """`-c vpcId=` clears an optional setting instead of failing."""
    assert from_context(vpcId="", alarmEmail="").vpc_id is None


def test_target_connections_follow_utilization() -> None:
    """Target tracking aims at the given percentage of a task's maximum connections."""
    s = from_context(maxConnectionsPerTask=1000, targetUtilizationPercent=70, taskMemoryMib=2048)
    assert s.target_connections_per_task == 700


def test_cdk_json_context_is_valid_and_known() -> None:
    """Every Holdfast key in cdk.json is a known setting and its value parses."""
    context = cdk_json()["context"]
    known = {key for key, _, _ in Settings.describe()}
    ours = {k: v for k, v in context.items() if not k.startswith(("@", "aws:", "cli-"))}
    assert ours, "cdk.json should show the main settings"
    assert set(ours) <= known, f"unknown settings in cdk.json: {set(ours) - known}"
    Settings.from_context(context.get)


def test_cdk_json_shows_the_code_defaults() -> None:
    """cdk.json's Holdfast values are the defaults, so it never silently overrides them."""
    context = cdk_json()["context"]
    defaults = {key: default for key, default, _ in Settings.describe()}
    shown = {k: v for k, v in context.items() if k in defaults}
    assert {"leaseSeconds", "heartbeatSeconds", "checkpointSeconds"} <= set(shown)
    assert {k: v for k, v in shown.items() if v != defaults[k]} == {}


@pytest.mark.parametrize("handler", ["myapp", "myapp.handlers:", "my app:handle", "a:b:c",
                                     "myapp.handlers:on_message", "transcripts.handler:handle"])
def test_handler_is_checked_by_the_workers_own_rule(handler: str) -> None:
    """handler passes synth exactly when the worker's HOLDFAST_HANDLER check accepts it; a
    refusal names the key (or the prop) and the 'package.module:function' shape."""
    try:
        worker_settings.HANDLER.get({worker_settings.HANDLER.name: handler})
    except ConfigError:
        with pytest.raises(SettingsError, match=r"^handler=.*'package\.module:function'"):
            from_context(handler=handler)
        with pytest.raises(SettingsError, match=r"^handler=.*the worker would refuse it"):
            Settings().with_values(handler=handler)  # HoldfastFleet's handler= prop
    else:
        assert from_context(handler=handler).handler == handler
        assert Settings(handler=handler).handler == handler


@pytest.mark.parametrize("hosts", ["10.0.0.0/33", "::::", "feeds example.com", "169.254.169.254",
                                   "feeds.example.com", ".example.org,*.example.net,10.0.0.0/8",
                                   "2001:db8::/32, feeds.example.com"])
def test_allowed_hosts_are_parsed_as_the_worker_parses_them(hosts: str) -> None:
    """allowedHosts passes synth exactly when the worker's parse_allow_list accepts it; a
    refusal names the key and the entry the worker would refuse at start."""
    try:
        parse_allow_list(hosts)
    except ValueError as exc:
        with pytest.raises(SettingsError) as err:
            from_context(allowedHosts=hosts)
        assert str(err.value).startswith(f"allowedHosts={hosts!r}: expected host names")
        assert str(exc) in str(err.value)
        with pytest.raises(SettingsError, match=r"^allowed_hosts="):
            Settings(allowed_hosts=hosts)
    else:
        assert from_context(allowedHosts=hosts).allowed_hosts == hosts


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("workerImage", "my worker:1", "expected an image URI"),
    ("workerImage", "Acme/Worker:1", "expected an image URI"),
    ("collectorImage", "otel collector", "expected an image URI"),
    ("adotLayerArn", "arn:aws:lambda:eu-west-1:901920570463:layer:otel",
     "expected a Lambda layer version ARN"),
    ("adotLayerArn", "aws-otel-python-arm64", "expected a Lambda layer version ARN"),
])
def test_images_and_layer_arns_of_impossible_shape_fail_synth(key: str, value: str,
                                                               needle: str) -> None:
    """A worker/collector image or ADOT layer ARN no registry or Lambda would take is refused,
    as context (naming the key) or as a prop (naming the field)."""
    with pytest.raises(SettingsError, match=re.escape(f"{key}={value!r}: {needle}")):
        from_context(**{key: value})
    field = {"workerImage": "worker_image", "collectorImage": "collector_image",
             "adotLayerArn": "adot_layer_arn"}[key]
    with pytest.raises(SettingsError, match=f"^{field}="):
        Settings().with_values(**{field: value})


def test_usual_images_layer_arns_and_tokens_pass() -> None:
    """Registry/repo:tag and @sha256 images, a layer version ARN, and prop values holding CDK
    tokens (resolved at deploy) are accepted as given."""
    ecr = "${Token[AWS.AccountId.7]}.dkr.ecr.${Token[AWS.Region.10]}.amazonaws.com/w:1"
    s = from_context(workerImage="123456789012.dkr.ecr.eu-west-1.amazonaws.com/transcripts:1",
                     collectorImage="ghcr.io/acme/collector@sha256:" + "ab" * 32,
                     adotLayerArn="arn:aws:lambda:eu-west-1:901920570463:layer:otel-py:3")
    assert s.worker_image == "123456789012.dkr.ecr.eu-west-1.amazonaws.com/transcripts:1"
    assert s.adot_layer_arn == "arn:aws:lambda:eu-west-1:901920570463:layer:otel-py:3"
    tokens = Settings(worker_image=ecr, handler="${Token[TOKEN.3]}",
                      allowed_hosts="${Token[TOKEN.4]}")
    assert (tokens.worker_image, tokens.handler) == (ecr, "${Token[TOKEN.3]}")


@pytest.mark.parametrize(("key", "meant"), [
    ("minTask", "minTasks"), ("MinTasks", "minTasks"), ("min_tasks", "minTasks"),
    ("workerimage", "workerImage"), ("leaseSecond", "leaseSeconds"), ("handlers", "handler"),
])
def test_misspelt_context_keys_are_refused(key: str, meant: str) -> None:
    """A context key close to a setting's (case aside) fails synth naming the setting meant,
    instead of leaving that setting at its default."""
    with pytest.raises(SettingsError,
                       match=rf"^unknown context key {key!r}: did you mean {meant!r}\?$"):
        from_context(**{key: 3})


def test_other_context_keys_are_left_to_the_app() -> None:
    """Keys far from every setting, and keys with ':' or '@' (CDK flags, lookups), pass."""
    s = from_context(**{"minTasks": 3, "myTeam": "feeds", "cli-telemetry": False,
                        "acknowledged-issue-numbers": [1], "aws:cdk:minTask": 1,
                        "@aws-cdk/core:minTask": True, "availability-zones:account=1:region=x": []})
    assert s.min_tasks == 3


def test_keys_of_any_lookup_can_be_checked() -> None:
    """keys= checks the keys behind a lookup that is neither a mapping's nor a node's."""
    with pytest.raises(SettingsError, match="did you mean 'maxTasks'"):
        Settings.from_context(lambda key: None, keys=["maxTask"])
    assert Settings.from_context(lambda key: None) == Settings()


def test_a_cdk_apps_context_keys_are_checked() -> None:
    """Settings.from_context(app.node.try_get_context), as app.py calls it, sees every key of
    the app's context (cdk.json and -c alike) and refuses a misspelt one."""
    import aws_cdk as cdk

    with pytest.raises(SettingsError, match="'minTask': did you mean 'minTasks'"):
        Settings.from_context(cdk.App(context={"minTask": 3}).node.try_get_context)
    app = cdk.App(context={"minTasks": "3", "myTeam": "feeds"})
    assert Settings.from_context(app.node.try_get_context).min_tasks == 3


def test_the_stack_sets_the_workers_own_defaults() -> None:
    """By default the stack gives the worker exactly what the worker would assume alone
    (``holdfast.core.settings``), so a changed worker default is the stack's too; only the
    connections per task differ, sized to the task."""
    from holdfast.infra.fleet import worker_environment

    env = worker_environment(Settings(), table_name="t", session_table_name="s",
                             queue_url="q", service_name="w")
    for setting in (worker_settings.LEASE_SECONDS, worker_settings.HEARTBEAT_SECONDS,
                    worker_settings.SKEW_MS, worker_settings.CHECKPOINT_SECONDS,
                    worker_settings.RECONCILE_SECONDS, worker_settings.CONNECT_RATE,
                    worker_settings.REBALANCE_COOLDOWN_SECONDS,
                    worker_settings.SHUTDOWN_SECONDS, worker_settings.RENEW_MODE):
        assert setting.read(env) == setting.read({}), setting.name
    assert worker_settings.CONNECT_BURST.name not in env  # the worker's own rule decides
