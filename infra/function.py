"""One Holdfast Lambda function: runtime, layer, role, log group — shared by router and sweeper."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from holdfast.core import names
from holdfast.infra.logs import retention
from holdfast.infra.tracing import adot_layer_arn, tracing_environment

__all__ = ["POWERTOOLS_ACCOUNT", "RUNTIME", "FunctionDefaults", "HoldfastFunction",
           "lease_environment", "powertools_layer_arn"]

# The newest Python runtime the CDK offers; the layer name below must match it.
RUNTIME: Final = lambda_.Runtime.PYTHON_3_14
_LAYER_PYTHON: Final = "python314"
# The AWS account that publishes the Powertools for AWS Lambda (Python) layers.
POWERTOOLS_ACCOUNT: Final = "017000801446"


def powertools_layer_arn(region: str, version: int) -> str:
    """ARN of the AWS-managed Powertools v3 layer for arm64 and :data:`RUNTIME`."""
    return (f"arn:aws:lambda:{region}:{POWERTOOLS_ACCOUNT}:layer:"
            f"AWSLambdaPowertoolsPythonV3-{_LAYER_PYTHON}-arm64:{version}")


def lease_environment(*, table_name: str, session_table_name: str, queue_url: str,
                      timing: Mapping[str, str], service_name: str) -> dict[str, str]:
    """The environment every Lambda shares: where the leases and sessions are and how they
    are timed (``timing``: the workers' own timing variables, ``Settings.timing_environment``)."""
    return {
        names.ENV_TABLE: table_name,
        names.ENV_SESSION_TABLE: session_table_name,
        names.ENV_QUEUE_URL: queue_url,
        **timing,
        names.ENV_SERVICE_NAME: service_name,
        names.ENV_METRICS_NAMESPACE: names.NAMESPACE,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionDefaults:
    """What every Holdfast function shares: code asset, layer, tracing, log handling."""

    code: lambda_.Code
    powertools_layer_version: int
    tracing: bool  # X-Ray: active tracing, the ADOT layer and our OpenTelemetry spans
    log_retention_days: int
    removal_policy: RemovalPolicy
    adot_layer_arn: str | None = None  # None: infra.tracing's default for the region


class HoldfastFunction(Construct):
    """A Python function on arm64 with the Powertools layer and a role that can do nothing yet.

    The role is explicit (not the ``AWSLambdaBasicExecutionRole`` managed policy): it may write
    to its own log group only, and callers grant exactly what the function needs on top.
    """

    def __init__(self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults,
                 handler: str, description: str, environment: Mapping[str, str],
                 timeout: Duration, memory_mib: int,
                 reserved_concurrency: int | None = None) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs",
                                       retention=retention(defaults.log_retention_days),
                                       removal_policy=defaults.removal_policy)
        self.role = iam.Role(self, "Role",
                             assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description=f"{description} (least privilege)")
        # The log group exists before the function, so CreateLogGroup is never needed.
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[self.log_group.log_group_arn]))
        layer = lambda_.LayerVersion.from_layer_version_arn(
            self, "Powertools",
            powertools_layer_arn(Stack.of(self).region, defaults.powertools_layer_version))
        layers = [layer]
        environment = dict(environment)
        if defaults.tracing:
            layers.append(lambda_.LayerVersion.from_layer_version_arn(
                self, "Adot", defaults.adot_layer_arn or adot_layer_arn(Stack.of(self).region)))
            environment.update(tracing_environment())
        self.function = lambda_.Function(
            self, "Function",
            description=description,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            code=defaults.code,
            handler=handler,
            layers=layers,
            role=self.role,
            environment=environment,
            timeout=timeout,
            memory_size=memory_mib,
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE if defaults.tracing else lambda_.Tracing.DISABLED,
            reserved_concurrent_executions=reserved_concurrency,
        )
