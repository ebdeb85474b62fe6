"""Tracing in AWS (``tracing=xray``): where the OpenTelemetry spans of each acquisition go.

Off by default (X-Ray traces and a sidecar per task cost money), and then the stack has none of
this. On:

- Lambdas: the ADOT Python layer brings the OpenTelemetry SDK and a collector extension that
  listens on localhost:4318 and exports to X-Ray; our own setup (``holdfast.core.tracing``,
  ``HOLDFAST_TRACING=otlp``) sends there. No ``AWS_LAMBDA_EXEC_WRAPPER``: the layer's
  auto-instrumentation would install a second tracer provider. Lambda's active tracing
  records the invocations themselves.
- Workers: an ADOT collector sidecar in each task (``localhost:4318`` -> X-Ray), not
  essential: a dead collector costs traces, never streams.

ADOT layers are published per region and version: ``adotLayerArn`` overrides the default
(https://aws-otel.github.io/docs/getting-started/lambda/lambda-python lists the current ARNs).
"""

from __future__ import annotations

from typing import Final

from aws_cdk import Stack
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs

from holdfast.core import names

__all__ = ["ADOT_ACCOUNT", "COLLECTOR_CONTAINER", "OTLP_ENDPOINT", "XRAY_ACTIONS",
           "add_collector", "adot_layer_arn", "grant_xray", "tracing_environment"]

ADOT_ACCOUNT: Final = "901920570463"  # publishes the ADOT Lambda layers (commercial regions)
_ADOT_LAYER: Final = "aws-otel-python-arm64-ver-1-32-0:2"  # arm64, as the functions
OTLP_ENDPOINT: Final = "http://localhost:4318"  # the layer's extension or the task's sidecar
COLLECTOR_CONTAINER: Final = "otel-collector"
XRAY_ACTIONS: Final = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
# OTLP over HTTP in, X-Ray out; nothing else (no metrics pipeline: the worker emits EMF).
_COLLECTOR_CONFIG: Final = """receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch: {}
exporters:
  awsxray:
    region: %s
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [awsxray]
"""


def adot_layer_arn(region: str) -> str:
    """The default ADOT Python layer (arm64) in ``region``."""
    return f"arn:aws:lambda:{region}:{ADOT_ACCOUNT}:layer:{_ADOT_LAYER}"


def tracing_environment() -> dict[str, str]:
    """What a traced Lambda or worker container needs: our setup, sending to localhost."""
    return {names.ENV_TRACING: "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": OTLP_ENDPOINT,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}


def add_collector(task_definition: ecs.FargateTaskDefinition, image: str,
                  log_group: logs.ILogGroup) -> ecs.ContainerDefinition:
    """The ADOT collector sidecar of a worker task, logging to the worker log group."""
    region = Stack.of(task_definition).region
    return task_definition.add_container(
        COLLECTOR_CONTAINER, image=ecs.ContainerImage.from_registry(image), essential=False,
        environment={"AOT_CONFIG_CONTENT": _COLLECTOR_CONFIG % region},
        memory_reservation_mib=64,
        logging=ecs.LogDrivers.aws_logs(stream_prefix=COLLECTOR_CONTAINER, log_group=log_group,
                                        mode=ecs.AwsLogDriverMode.NON_BLOCKING))


def grant_xray(role: iam.IRole) -> None:
    """X-Ray writes for ``role`` (they support no resource-level permissions)."""
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(XRAY_ACTIONS),
                                                     resources=["*"]))
