"""The Holdfast stack: wires tables, queues, router, sweeper, workers, scaling and monitoring."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Duration, Environment, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from holdfast.core import names
from holdfast.infra.exceptions import SettingsError
from holdfast.infra.function import FunctionDefaults
from holdfast.infra.lambda_asset import lambda_code
from holdfast.infra.metrics import FleetParts
from holdfast.infra.monitoring import Monitoring
from holdfast.infra.nag import acknowledge_findings
from holdfast.infra.network import Network
from holdfast.infra.queue import NudgeQueues
from holdfast.infra.router import Router, orders_queue_prefix
from holdfast.infra.scaling import WorkerScaling
from holdfast.infra.service import WorkerService
from holdfast.infra.sessions import SessionTable
from holdfast.infra.settings import Settings, context_key
from holdfast.infra.sweeper import Sweeper
from holdfast.infra.table import LeaseTable
from holdfast.infra.taskstopped import TaskStopped

__all__ = ["HoldfastStack", "stack_environment", "worker_environment"]


def stack_environment(s: Settings, environ: Mapping[str, str]) -> Environment | None:
    """Account and region for the stack, or None for an environment-agnostic template.

    Agnostic by default, so ``cdk synth`` gives the same template on any machine, with or
    without credentials. Looking up an existing VPC needs a concrete account and region: the
    CLI provides them (``CDK_DEFAULT_*``) when it has credentials.
    """
    if s.vpc_id is None:
        return None
    account, region = environ.get("CDK_DEFAULT_ACCOUNT"), environ.get("CDK_DEFAULT_REGION")
    if not account or not region:
        raise SettingsError(
            f"{context_key('vpc_id')}={s.vpc_id}: looking up a VPC needs an account and region; "
            "run the CDK CLI with AWS credentials or set CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION")
    return Environment(account=account, region=region)


def worker_environment(s: Settings, *, table_name: str, session_table_name: str,
                       queue_url: str, service_name: str) -> dict[str, str]:
    """The worker task's environment (HOLDFAST_WORKER_ID is left to default to the task id)."""
    env = {
        names.ENV_TABLE: table_name,
        names.ENV_SESSION_TABLE: session_table_name,
        names.ENV_QUEUE_URL: queue_url,
        **s.timing_environment,
        names.ENV_CHECKPOINT_SECONDS: str(s.checkpoint_seconds),
        names.ENV_MAX_CONNECTIONS: str(s.max_connections_per_task),
        names.ENV_TASK_MEMORY_MIB: str(s.task_memory_mib),  # the worker checks its buffers fit
        names.ENV_RECONCILE_SECONDS: str(s.reconcile_seconds),
        names.ENV_CONNECT_RATE: str(s.connect_rate),
        names.ENV_CONNECT_BURST: str(max(1, s.connect_rate)),
        names.ENV_REBALANCE_COOLDOWN_SECONDS: str(s.rebalance_cooldown_seconds),
        names.ENV_SHUTDOWN_SECONDS: str(s.shutdown_seconds),
        names.ENV_RENEW_MODE: s.renew_mode,
        names.ENV_SERVICE_NAME: service_name,
        names.ENV_METRICS_NAMESPACE: names.NAMESPACE,
    }
    if s.handler:
        env[names.ENV_HANDLER] = s.handler
    if s.allowed_hosts:
        env[names.ENV_ALLOWED_HOSTS] = s.allowed_hosts
    return env


class HoldfastStack(Stack):
    """Everything one Holdfast fleet needs, configured by :class:`Settings`."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings,
                 **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        s = settings
        # Every taggable resource (tasks too, via the service) carries its fleet: cost
        # allocation and IAM conditions can tell fleets apart.
        Tags.of(self).add("holdfast:fleet", s.fleet_name)
        removal = RemovalPolicy.DESTROY if s.removal_policy == "destroy" else RemovalPolicy.RETAIN
        service_names = names.service_names(s.fleet_name)
        defaults = FunctionDefaults(code=lambda_code(),
                                    powertools_layer_version=s.powertools_layer_version,
                                    tracing=s.xray, adot_layer_arn=s.adot_layer_arn,
                                    log_retention_days=s.log_retention_days,
                                    removal_policy=removal)

        provisioned = s.table_billing == "provisioned"
        reads = (s.table_read_min, s.table_read_max)
        self.table = LeaseTable(
            self, "Leases", table_name=s.table_name, provisioned=provisioned,
            read_capacity=reads, write_capacity=(s.table_write_min, s.table_write_max),
            deletion_protection=s.deletion_protection, removal_policy=removal)
        self.sessions = SessionTable(
            self, "Sessions", table_name=s.session_table_name, provisioned=provisioned,
            read_capacity=reads, write_capacity=s.session_write_capacity,
            deletion_protection=s.deletion_protection, removal_policy=removal)
        self.queues = NudgeQueues(self, "Queues", removal_policy=removal)
        table, sessions, queue = self.table.table, self.sessions.table, self.queues.queue
        index_arns = [self.table.index_arn, self.table.owner_index_arn]
        # Each worker session's order queue is named <prefix><owner>; the router (and, given
        # this attribute, the workers and sweeper) all derive names from this one prefix.
        self.orders_queue_prefix = orders_queue_prefix(self.stack_name)
        self.router = Router(
            self, "Router", table=table, session_table=sessions, queue=queue,
            orders_queue_prefix=self.orders_queue_prefix,
            failures=self.queues.router_failures,
            service_name=service_names["router"], timing=s.timing_environment,
            batch_size=s.router_batch_size,
            batching_window_seconds=s.router_batching_window_seconds,
            retry_attempts=s.router_retry_attempts,
            parallelization_factor=s.router_parallelization_factor, defaults=defaults)
        self.sweeper = Sweeper(
            self, "Sweeper", table=table, index_arns=index_arns, session_table=sessions,
            queue=queue,
            service_name=service_names["sweeper"], timing=s.timing_environment,
            reserve_concurrency=s.sweeper_reserve_concurrency,
            orders_queue_prefix=self.orders_queue_prefix, defaults=defaults)
        self.network = Network(
            self, "Network", vpc_id=s.vpc_id, public_subnets=s.worker_subnets == "public",
            nat_gateways=s.nat_gateways, flow_logs=s.vpc_flow_logs,
            log_retention_days=s.log_retention_days, removal_policy=removal,
            upstream_ports=s.upstream_ports)
        arm64 = s.worker_architecture == "arm64"
        self.workers = WorkerService(
            self, "Workers", vpc=self.network.vpc, subnets=self.network.subnets,
            security_group=self.network.security_group,
            assign_public_ip=self.network.assign_public_ip,
            image=_worker_image(self, s.worker_image, arm64), arm64=arm64, cpu=s.task_cpu,
            memory_mib=s.task_memory_mib,
            environment=worker_environment(s, table_name=table.table_name,
                                           session_table_name=sessions.table_name,
                                           queue_url=queue.queue_url,
                                           service_name=service_names["worker"]),
            stop_timeout=Duration.seconds(s.stop_timeout_seconds), table=table,
            index_arns=index_arns, session_table=sessions, queue=queue,
            log_retention_days=s.log_retention_days, removal_policy=removal,
            orders_queue_prefix=self.orders_queue_prefix,
            collector_image=s.collector_image if s.xray else None)
        WorkerScaling(
            self, "Scaling", service=self.workers.service, queue=queue,
            service_name=service_names["worker"], min_tasks=s.min_tasks, max_tasks=s.max_tasks,
            target_connections_per_task=s.target_connections_per_task)
        # ECS reports a stopped task at once: its session is declared dead without the TTL.
        self.task_stopped = TaskStopped(
            self, "TaskStopped", defaults=defaults, cluster=self.workers.cluster,
            service=self.workers.service, table=table,
            owner_index_arn=self.table.owner_index_arn, session_table=sessions, queue=queue,
            service_name=f"{s.fleet_name}-{names.TASKSTOPPED_SERVICE}",
            timing=s.timing_environment, removal_policy=removal)
        self.queues.only_senders([self.workers.task_definition.task_role,
                                  self.router.handler.role, self.sweeper.handler.role,
                                  self.task_stopped.handler.role])
        self.monitoring = Monitoring(
            self, "Monitoring", lease_ms=s.lease_ms, alarm_email=s.alarm_email,
            parts=FleetParts(queue=queue, dlq=self.queues.dlq,
                             router_failures=self.queues.router_failures,
                             router=self.router.function, sweeper=self.sweeper.function,
                             service=self.workers.service, service_names=service_names,
                             lease_table=table, session_table=sessions))
        self._outputs()
        acknowledge_findings(router=self.router, sweeper=self.sweeper, workers=self.workers,
                             queues=self.queues, network=self.network, tracing=s.xray)

    def _outputs(self) -> None:
        for output_id, value, description in (
            ("TableName", self.table.table.table_name, "Lease table (insert items here)"),
            ("SessionTableName", self.sessions.table.table_name,
             "Session table (one item per worker: liveness and stop orders)"),
            ("QueueUrl", self.queues.queue.queue_url, "Nudge queue"),
            ("DeadLetterQueueUrl", self.queues.dlq.queue_url, "Nudges parked for an operator"),
            ("ClusterName", self.workers.cluster.cluster_name, "ECS cluster of the workers"),
            ("ServiceName", self.workers.service.service_name, "ECS service of the workers"),
            ("DashboardUrl", self.monitoring.dashboard_url, "CloudWatch dashboard"),
            ("AlarmTopicArn", self.monitoring.topic.topic_arn, "SNS topic of every alarm"),
            ("WorkerLogGroup", self.workers.log_group.log_group_name, "Worker logs"),
            ("RouterLogGroup", self.router.handler.log_group.log_group_name, "Router logs"),
            ("SweeperLogGroup", self.sweeper.handler.log_group.log_group_name, "Sweeper logs"),
        ):
            CfnOutput(self, output_id, value=value, description=description)


# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:<tag>|@<digest>]
_ECR_URI = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
                      r"([a-z0-9][a-z0-9._/-]*)(?::([\w][\w.-]{0,127})|@(sha256:[0-9a-f]{64}))?$")


def _worker_image(scope: Construct, uri: str | None, arm64: bool) -> ecs.ContainerImage:
    """A prebuilt image, or ./Dockerfile built by ``cdk deploy`` (synth itself needs no Docker).

    A private ECR image goes through its repository, so the task's execution role is granted
    the pull (``from_registry`` grants nothing: the task would fail to start)."""
    if uri:
        ecr_uri = _ECR_URI.match(uri)
        if ecr_uri is None:
            return ecs.ContainerImage.from_registry(uri)
        account, region, name, tag, digest = ecr_uri.groups()
        repo = ecr.Repository.from_repository_attributes(
            scope, "WorkerImageRepository", repository_name=name,
            repository_arn=f"arn:{Stack.of(scope).partition}:ecr:{region}:{account}:"
                           f"repository/{name}")
        return ecs.ContainerImage.from_ecr_repository(repo, tag=digest or tag or "latest")
    platform = ecr_assets.Platform.LINUX_ARM64 if arm64 else ecr_assets.Platform.LINUX_AMD64
    # The repository's own Dockerfile (the checkout this module is imported from).
    repo_root = Path(__file__).resolve().parent.parent
    return ecs.ContainerImage.from_asset(str(repo_root), platform=platform)
