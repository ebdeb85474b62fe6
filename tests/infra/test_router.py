"""The router function and its stream event source mapping."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from holdfast.core import names, schema
from holdfast.core.filters import filter_criteria
from holdfast.core.orders import order_queue_name
from holdfast.infra.function import RUNTIME
from holdfast.infra.router import ROUTER_HANDLER, orders_queue_prefix
from tests.infra.conftest import (
    ALT_CONTEXT,
    ALT_STACK,
    STACK,
    lease_table_id,
    resources,
    session_table_id,
)
from tests.infra.iam import arn_name, as_list, role_ids, role_statements


def router(template_json: dict[str, Any]) -> dict[str, Any]:
    (fn,) = [f["Properties"] for f in resources(template_json, "AWS::Lambda::Function").values()
             if f["Properties"].get("Handler") == ROUTER_HANDLER]
    return dict(fn)


def test_router_runs_on_arm64_with_the_powertools_layer(template_json: dict[str, Any]) -> None:
    """Current Python runtime, arm64, the AWS-managed Powertools layer for that runtime."""
    fn = router(template_json)
    assert fn["Runtime"] == RUNTIME.name == "python3.14"
    assert fn["Architectures"] == ["arm64"]
    (layer,) = fn["Layers"]  # tracing is off by default: no ADOT layer
    arn = json.dumps(layer)
    assert ":017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:38" in arn
    assert fn.get("TracingConfig", {"Mode": "PassThrough"}) == {"Mode": "PassThrough"}
    assert names.ENV_TRACING not in fn["Environment"]["Variables"]


def test_tracing_on_adds_the_adot_layer_and_otlp(alt_template_json: dict[str, Any]) -> None:
    """tracing=xray: active tracing, the ADOT Python layer, our spans to its collector."""
    fn = router(alt_template_json)
    assert fn["TracingConfig"] == {"Mode": "Active"}
    layers = sorted(json.dumps(layer) for layer in fn["Layers"])
    assert len(layers) == 2
    assert any("AWSLambdaPowertoolsPythonV3" in arn for arn in layers)
    assert any(":901920570463:layer:aws-otel-python-arm64-ver-" in arn for arn in layers)
    env = fn["Environment"]["Variables"]
    assert env[names.ENV_TRACING] == "otlp"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://localhost:4318"
    assert "AWS_LAMBDA_EXEC_WRAPPER" not in env  # one tracer provider: ours


def test_router_environment(template_json: dict[str, Any]) -> None:
    """The router gets both table names, the queue URL, the workers' timing variables, the
    order queues' prefix, and Powertools service and namespace."""
    env = router(template_json)["Environment"]["Variables"]
    assert set(env) == {names.ENV_TABLE, names.ENV_SESSION_TABLE, names.ENV_QUEUE_URL,
                        names.ENV_SERVICE_NAME, names.ENV_METRICS_NAMESPACE,
                        names.ENV_LEASE_SECONDS, names.ENV_HEARTBEAT_SECONDS, names.ENV_SKEW_MS,
                        names.ENV_ORDERS_QUEUE_PREFIX}
    assert env[names.ENV_ORDERS_QUEUE_PREFIX] == orders_queue_prefix(STACK) == "Holdfast-orders-"
    assert env[names.ENV_SESSION_TABLE] == {"Ref": session_table_id(template_json)}
    assert env[names.ENV_LEASE_SECONDS] == "4"
    assert env[names.ENV_SERVICE_NAME] == "holdfast-router"
    assert env[names.ENV_METRICS_NAMESPACE] == names.NAMESPACE


def test_event_source_mapping_is_bounded_and_filtered(template: Any) -> None:
    """Shared filters, partial batch failures, bisect, bounded retries, on-failure queue."""
    mapping = template.find_resources("AWS::Lambda::EventSourceMapping")
    (props,) = [m["Properties"] for m in mapping.values()]
    # Verbatim: the very strings filter_criteria() gives the local runner.
    assert props["FilterCriteria"] == filter_criteria()
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [Match.any_value(), "StreamArn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "BisectBatchOnFunctionError": True,
        "MaximumRetryAttempts": 10,
        "BatchSize": 100,
        "StartingPosition": "TRIM_HORIZON",
        "DestinationConfig": {"OnFailure": {"Destination": Match.any_value()}},
        "MaximumBatchingWindowInSeconds": Match.absent(),
    })


def test_batching_window_setting_reaches_the_mapping(alt_template: Any) -> None:
    """routerBatchingWindowSeconds becomes the mapping's batching window."""
    alt_template.has_resource_properties("AWS::Lambda::EventSourceMapping",
                                         {"MaximumBatchingWindowInSeconds": 2})


def test_router_logs_have_retention(template_json: dict[str, Any]) -> None:
    """The router logs to its own log group with the configured retention."""
    fn = router(template_json)
    group = fn["LoggingConfig"]["LogGroup"]["Ref"]
    assert template_json["Resources"][group]["Properties"]["RetentionInDays"] == 30


def _router_statements(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    return role_statements(template_json, role_ids(template_json)["router"])


def test_router_may_send_only_to_its_own_order_queues(template_json: dict[str, Any],
                                                      alt_template_json: dict[str, Any]) -> None:
    """SendMessage to <prefix>* in the stack's own account and region, nothing wider."""
    for template, prefix in ((template_json, orders_queue_prefix(STACK)),
                             (alt_template_json, orders_queue_prefix(
                                 ALT_STACK, ALT_CONTEXT["fleetName"]))):
        sends = [r for s in _router_statements(template) if "sqs:SendMessage" in as_list(
            s["Action"]) for r in as_list(s["Resource"])]
        (wildcard,) = [r for r in sends if "*" in arn_name(r)]
        assert wildcard == {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"}, ":sqs:", {"Ref": "AWS::Region"}, ":",
            {"Ref": "AWS::AccountId"}, f":{prefix}*"]]}
        # Everything else it sends to is named: the nudge queue and its failure destination.
        assert all("Fn::GetAtt" in r for r in sends if r is not wildcard)
        env = router(template)["Environment"]["Variables"]
        assert env[names.ENV_ORDERS_QUEUE_PREFIX] == prefix


def test_router_frees_no_owned_stream(template_json: dict[str, Any]) -> None:
    """No session read and no lease write but the normalisation (Pk, desired_state, expiry,
    and status for the take-back hold's condition; no values returned): the router can order
    a holder, never free its stream nor touch its owner, epoch or checkpoint."""
    statements = _router_statements(template_json)
    leases = lease_table_id(template_json)
    assert not [s for s in statements if s["Action"] == "dynamodb:GetItem"]
    updates = [s for s in statements if s["Action"] == "dynamodb:UpdateItem"
               and arn_name(s["Resource"]) == leases]
    assert [tuple(s["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"])
            for s in updates] == [(schema.PARTITION_KEY, schema.ATTR.desired_state,
                                   schema.ATTR.lease_expires_at_ms, schema.ATTR.status)]
    assert updates[0]["Condition"]["StringEqualsIfExists"] == {"dynamodb:ReturnValues": "NONE"}


@pytest.mark.parametrize(("stack_name", "prefix"), [
    ("Holdfast", "Holdfast-orders-"),
    # Shortened or changed: a hash of the whole name keeps look-alike stacks apart.
    ("a" * 60, "a" * 25 + "-" + hashlib.sha256(b"a" * 60).hexdigest()[:6] + "-orders-"),
    ("My.Stack Name", "My-Stack-Name-" + hashlib.sha256(b"My.Stack Name").hexdigest()[:6]
     + "-orders-"),
])
def test_orders_queue_prefix_is_short_and_safe(stack_name: str, prefix: str) -> None:
    """At most 40 characters of [A-Za-z0-9_-], the same every synth, room left for owners."""
    assert orders_queue_prefix(stack_name) == prefix
    assert orders_queue_prefix(stack_name) == orders_queue_prefix(stack_name)
    assert len(prefix) <= 40
    assert len(order_queue_name(prefix, "w-" + "x" * 60 + "#abcdef123456")) <= 80


def test_the_router_timeout_leaves_room_for_its_reserve(template_json: dict[str, Any]) -> None:
    """The function's timeout (the local runner's too) is at least twice the handler's
    reserve (one call at its worst and the partial response): work gets the other half."""
    from holdfast.lambdas.router.deps import FUNCTION_TIMEOUT_S, SEND_RESERVE_MS
    from holdfast.runner.esm import EsmConfig

    assert router(template_json)["Timeout"] == FUNCTION_TIMEOUT_S
    assert EsmConfig().function_timeout_ms == FUNCTION_TIMEOUT_S * 1000
    assert SEND_RESERVE_MS * 2 <= FUNCTION_TIMEOUT_S * 1000
