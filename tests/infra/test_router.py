"""The router function and its stream event source mapping."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match

from holdfast.core import names
from holdfast.core.filters import filter_criteria
from infra.function import RUNTIME
from infra.router import ROUTER_HANDLER
from tests.infra.conftest import resources, session_table_id


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
    """The router gets both table names, the queue URL, the lease length, and Powertools
    service and namespace."""
    env = router(template_json)["Environment"]["Variables"]
    assert set(env) == {names.ENV_TABLE, names.ENV_SESSION_TABLE, names.ENV_QUEUE_URL,
                        names.ENV_SERVICE_NAME, names.ENV_METRICS_NAMESPACE,
                        names.ENV_LEASE_MS, names.ENV_SKEW_MS}
    assert env[names.ENV_SESSION_TABLE] == {"Ref": session_table_id(template_json)}
    assert env[names.ENV_LEASE_MS] == "8000"
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
