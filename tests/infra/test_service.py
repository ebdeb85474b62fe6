"""The worker service: Fargate task, graceful stop, health check, deployments, logs."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match

from holdfast.core import names
from tests.infra.conftest import one_resource, session_table_id


def container(template_json: dict[str, Any]) -> dict[str, Any]:
    task = one_resource(template_json, "AWS::ECS::TaskDefinition")["Properties"]
    (c,) = [c for c in task["ContainerDefinitions"] if c["Name"] == "worker"]
    return dict(c)


def test_tracing_off_by_default_means_no_sidecar(template_json: dict[str, Any]) -> None:
    """Default: the task runs the worker alone, with no tracing variables."""
    task = one_resource(template_json, "AWS::ECS::TaskDefinition")["Properties"]
    assert [c["Name"] for c in task["ContainerDefinitions"]] == ["worker"]
    env = {e["Name"] for e in container(template_json)["Environment"]}
    assert names.ENV_TRACING not in env and "OTEL_EXPORTER_OTLP_ENDPOINT" not in env


def test_tracing_on_adds_a_collector_sidecar(alt_template_json: dict[str, Any]) -> None:
    """tracing=xray: a non-essential ADOT collector (OTLP http in, X-Ray out), worker -> it."""
    task = one_resource(alt_template_json, "AWS::ECS::TaskDefinition")["Properties"]
    (sidecar,) = [c for c in task["ContainerDefinitions"] if c["Name"] != "worker"]
    assert sidecar["Image"].startswith("public.ecr.aws/aws-observability/aws-otel-collector:")
    assert sidecar["Essential"] is False
    assert "LogConfiguration" in sidecar
    config = json.dumps({e["Name"]: e["Value"] for e in sidecar["Environment"]})
    assert "AOT_CONFIG_CONTENT" in config and "awsxray" in config and "4318" in config
    env = {e["Name"]: e["Value"] for e in container(alt_template_json)["Environment"]}
    assert env[names.ENV_TRACING] == "otlp"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://localhost:4318"


def test_cluster_has_container_insights(template: Any) -> None:
    """Container Insights is on (running task counts, CPU and memory per service)."""
    template.has_resource_properties("AWS::ECS::Cluster", {
        "ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}]})


def test_task_is_arm64_fargate_with_settings_sizes(template: Any) -> None:
    """Fargate, arm64 Linux, CPU and memory from the settings."""
    template.has_resource_properties("AWS::ECS::TaskDefinition", {
        "RequiresCompatibilities": ["FARGATE"], "Cpu": "512", "Memory": "1024",
        "RuntimePlatform": {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"},
    })


def test_container_stops_gracefully_and_reports_health(template_json: dict[str, Any]) -> None:
    """An init forwards SIGTERM, stopTimeout covers the release, the health check is wired."""
    c = container(template_json)
    assert c["LinuxParameters"]["InitProcessEnabled"] is True
    assert c["StopTimeout"] == 120
    assert c["HealthCheck"]["Command"] == ["CMD", *names.WORKER_HEALTH_COMMAND]
    assert c["ReadonlyRootFilesystem"] is True
    assert c["MountPoints"] == [{"ContainerPath": "/tmp", "ReadOnly": False,
                                 "SourceVolume": "tmp"}]
    assert {"Name": "nofile", "SoftLimit": 65536, "HardLimit": 65536} in c["Ulimits"]


def test_the_worker_keeps_no_linux_capability(template_json: dict[str, Any]) -> None:
    """Every capability dropped (the worker needs none; the handler's code gets none)."""
    assert container(template_json)["LinuxParameters"]["Capabilities"] == {"Drop": ["ALL"]}


def test_container_logs_never_block_the_event_loop(template_json: dict[str, Any]) -> None:
    """awslogs in non-blocking mode to a log group with retention."""
    c = container(template_json)
    options = c["LogConfiguration"]["Options"]
    assert c["LogConfiguration"]["LogDriver"] == "awslogs"
    assert options["mode"] == "non-blocking"
    group = options["awslogs-group"]["Ref"]
    assert template_json["Resources"][group]["Properties"]["RetentionInDays"] == 30


def test_task_environment_comes_from_the_settings(template_json: dict[str, Any]) -> None:
    """Liveness timings, limits, renew mode and the Powertools names reach the worker."""
    env = {e["Name"]: e["Value"] for e in container(template_json)["Environment"]}
    assert env[names.ENV_LEASE_SECONDS] == "4"
    assert env[names.ENV_HEARTBEAT_SECONDS] == "1"
    assert env[names.ENV_CHECKPOINT_SECONDS] == "20"
    assert env[names.ENV_MAX_CONNECTIONS] == "500"
    assert env[names.ENV_RECONCILE_SECONDS] == "60"
    # Graceful stop budget: a lease plus a heartbeat, at least 10 s (stopTimeout is 120 s).
    assert env[names.ENV_SHUTDOWN_SECONDS] == "25"
    assert env[names.ENV_RENEW_MODE] == "batch"
    assert env[names.ENV_SERVICE_NAME] == "holdfast-worker"
    assert env[names.ENV_METRICS_NAMESPACE] == names.NAMESPACE
    assert {names.ENV_TABLE, names.ENV_QUEUE_URL} <= set(env)
    assert env[names.ENV_SESSION_TABLE] == {"Ref": session_table_id(template_json)}
    assert "HOLDFAST_WORKER_ID" not in env  # defaults to the ECS task id
    assert names.ENV_HANDLER not in env and names.ENV_ALLOWED_HOSTS not in env


def test_optional_worker_settings_and_prebuilt_image(alt_template_json: dict[str, Any]) -> None:
    """Handler, allowed hosts, x86_64 and a prebuilt image URI are honoured."""
    c = container(alt_template_json)
    env = {e["Name"]: e["Value"] for e in c["Environment"]}
    assert env[names.ENV_HANDLER] == "myapp.handlers:on_message"
    assert env[names.ENV_ALLOWED_HOSTS] == "feeds.example.com"
    assert c["Image"] == "public.ecr.aws/example/holdfast-worker:1.0"
    task = one_resource(alt_template_json, "AWS::ECS::TaskDefinition")["Properties"]
    assert task["RuntimePlatform"]["CpuArchitecture"] == "X86_64"


def test_deployments_roll_forward_safely(template: Any) -> None:
    """New tasks start before old ones stop; a failing deployment rolls back."""
    template.has_resource_properties("AWS::ECS::Service", {
        "LaunchType": "FARGATE",
        "DeploymentConfiguration": {
            "DeploymentCircuitBreaker": {"Enable": True, "Rollback": True},
            "MaximumPercent": 200, "MinimumHealthyPercent": 100},
        # Left to auto scaling, so a deploy never shrinks a grown fleet.
        "DesiredCount": Match.absent(),
        "NetworkConfiguration": {"AwsvpcConfiguration": Match.object_like(
            {"AssignPublicIp": "DISABLED"})},
        # Said, not ECS's default: tasks move back into a recovered AZ, each stop graceful.
        "AvailabilityZoneRebalancing": "ENABLED",
    })


def test_tasks_wait_for_their_subnets_routes_out(template_json: dict[str, Any]) -> None:
    """On a new stack the worker service is created after its private subnets' default routes
    (through the NAT gateways): tasks started before them could not pull their image and
    tripped the circuit breaker into a rollback of the first deploy."""
    resources = template_json["Resources"]
    (service_id,) = [k for k, v in resources.items() if v["Type"] == "AWS::ECS::Service"]
    routes = {k for k, v in resources.items() if v["Type"] == "AWS::EC2::Route"
              and "NatGatewayId" in v["Properties"]}
    assert len(routes) == 2
    assert routes <= set(resources[service_id].get("DependsOn", []))
