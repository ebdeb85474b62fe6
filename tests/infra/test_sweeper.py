"""The sweeper: a one-minute schedule, never two at once, leases timings from the settings."""

from __future__ import annotations

from typing import Any

from holdfast.core import names
from holdfast.infra.sweeper import BALANCE_ENVIRONMENT, SWEEPER_HANDLER
from holdfast.lambdas.settings import Settings
from tests.infra.conftest import resources, session_table_id


def sweeper(template_json: dict[str, Any]) -> dict[str, Any]:
    (fn,) = [f["Properties"] for f in resources(template_json, "AWS::Lambda::Function").values()
             if f["Properties"].get("Handler") == SWEEPER_HANDLER]
    return dict(fn)


def test_sweeper_runs_alone_for_about_a_minute(template_json: dict[str, Any]) -> None:
    """Timeout 70 s (a minute of sweeps plus slack), reserved concurrency 1, arm64."""
    fn = sweeper(template_json)
    assert fn["Timeout"] == 70
    assert fn["ReservedConcurrentExecutions"] == 1
    assert fn["Architectures"] == ["arm64"]
    env = fn["Environment"]["Variables"]
    assert env[names.ENV_LEASE_SECONDS] == "4" and env[names.ENV_SKEW_MS] == "250"
    assert env[names.ENV_SERVICE_NAME] == "holdfast-sweeper"
    assert {names.ENV_TABLE, names.ENV_QUEUE_URL} <= set(env)
    assert env[names.ENV_SESSION_TABLE] == {"Ref": session_table_id(template_json)}


def test_sweeper_rebalances_with_the_default_policy(template_json: dict[str, Any]) -> None:
    """The balance settings are spelt out in its environment, and they parse as the defaults."""
    env = sweeper(template_json)["Environment"]["Variables"]
    assert {k: env[k] for k in BALANCE_ENVIRONMENT} == {
        names.ENV_BALANCE: "on", names.ENV_BALANCE_INTERVAL_MS: "2000",
        names.ENV_BALANCE_BAND: "0.1", names.ENV_BALANCE_BAND_MIN: "1",
        names.ENV_BALANCE_MOTION: "0.1", names.ENV_BALANCE_TARGET_TTL_MS: "15000"}
    parsed = Settings.from_env({names.ENV_TABLE: "t", names.ENV_QUEUE_URL: "http://q",
                                **BALANCE_ENVIRONMENT})
    assert parsed == Settings(table="t", queue_url="http://q")


def test_sweeper_is_scheduled_every_minute_without_retries(template_json: dict[str, Any]) -> None:
    """An EventBridge rule starts it every minute; a missed minute is not retried."""
    (rule,) = [r["Properties"] for r in resources(template_json, "AWS::Events::Rule").values()
               if "ScheduleExpression" in r["Properties"]]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    (target,) = rule["Targets"]
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 0}
    (fn_id,) = [k for k, f in resources(template_json, "AWS::Lambda::Function").items()
                if f["Properties"].get("Handler") == SWEEPER_HANDLER]
    (config,) = [c["Properties"] for c in resources(
        template_json, "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": fn_id}]
    assert config["MaximumRetryAttempts"] == 0


def test_reserved_concurrency_can_be_turned_off(alt_template_json: dict[str, Any]) -> None:
    """Accounts still at the 10-concurrency quota can deploy with the reservation off."""
    fn = sweeper(alt_template_json)
    assert "ReservedConcurrentExecutions" not in fn
    assert fn["TracingConfig"] == {"Mode": "Active"}  # the alternate stack traces
    assert fn["Environment"]["Variables"][names.ENV_SERVICE_NAME] == "alt-sweeper"
