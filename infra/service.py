"""The worker fleet: an ECS cluster and a Fargate service running ``python -m worker``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from aws_cdk import Duration, RemovalPolicy, Size
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from holdfast.core import names, schema
from holdfast.core import settings as S
from holdfast.infra.logs import retention
from holdfast.infra.orders import WORKER_ORDER_ACTIONS, order_queue_statement
from holdfast.infra.tracing import add_collector, grant_xray, tracing_environment

__all__ = ["CONTAINER_NAME", "WORKER_BATCH_ACTIONS", "WORKER_INDEX_ACTIONS",
           "WORKER_LEASE_ATTRIBUTES", "WORKER_QUEUE_ACTIONS", "WORKER_SESSION_ACTIONS",
           "WORKER_SESSION_ATTRIBUTES", "WORKER_TABLE_ACTIONS", "WorkerService",
           "conditioned_update"]

CONTAINER_NAME: Final = "worker"
# Everything the worker's lease calls do (holdfast/core/store.py, batch.py, batch_reads.py,
# table.py's find_orphans for the reconcile sweep, a new session reaping its predecessor's
# streams through the owner index) and nothing more: no Scan, no PutItem, no DeleteItem, no
# table management.
# UpdateItem is granted separately, pinned to WORKER_LEASE_ATTRIBUTES and lease keys.
WORKER_TABLE_ACTIONS: Final = (
    "dynamodb:GetItem",
    # A successor's looks for its transfers and a batch release's read-back of the statements
    # whose outcome it does not know (holdfast/core/batch_reads.py): GetItem does not cover it.
    "dynamodb:BatchGetItem",
)
# With renewMode=batch only: BatchExecuteStatement renewals and releases are authorised per
# statement. IAM documents no attribute condition for PartiQL, so this grant is not pinned
# like UpdateItem's: with it, code running as the task role could change any lease
# attribute, ``ws_url`` too. renewMode=single leaves it out.
WORKER_BATCH_ACTIONS: Final = ("dynamodb:PartiQLUpdate",)
# Every lease attribute a worker's UpdateItem names (acquire, renew, checkpoint, release,
# quarantine, releasing a dead session's streams): all but ``ws_url``, so a worker's
# UpdateItem can never point a stream at another upstream.
WORKER_LEASE_ATTRIBUTES: Final = (
    schema.PARTITION_KEY, schema.ATTR.desired_state, schema.ATTR.lease_owner,
    schema.ATTR.lease_expires_at_ms, schema.ATTR.last_seq, schema.ATTR.epoch,
    schema.ATTR.status, schema.ATTR.updated_at_ms, schema.ATTR.last_error,
    schema.ATTR.error_count,
    schema.ATTR.unowned_since_ms,
    schema.ATTR.unowned_epoch, schema.ATTR.unowned_desired_state,
    schema.ATTR.moved_at_ms,  # a rebalancing move's release
    schema.ATTR.successor)  # a handoff's release names it; the acquire removes it
WORKER_INDEX_ACTIONS: Final = ("dynamodb:Query",)
# Sessions: its own (start with Get and Put, heartbeat, end) and, in the reconcile sweep and
# at start, silent ones (Scan, mark dead, mark reaped). No Delete: TTL removes them.
# UpdateItem is granted separately, pinned to WORKER_SESSION_ATTRIBUTES and session keys.
WORKER_SESSION_ACTIONS: Final = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Scan",  # the reconcile sweep's session half (holdfast.core.sessions.sweep_sessions)
)
# Every session attribute a worker's UpdateItem names: not ``started_at_ms`` (Put only), nor
# the targets it only reads (the sweeper writes them). The drain flag it sets itself when a
# SIGTERM's stop needs successors its live target does not name (``worker.successors``).
WORKER_SESSION_ATTRIBUTES: Final = (
    schema.PARTITION_KEY, schema.SESSION.incarnation, schema.SESSION.state,
    schema.SESSION.expires_at_ms, schema.SESSION.heartbeat_at_ms, schema.SESSION.held,
    schema.SESSION.capacity, schema.SESSION.load, schema.SESSION.orders,
    schema.SESSION.ended_at_ms, schema.SESSION.end_reason, schema.SESSION.reaped_at_ms,
    schema.SESSION.ttl, schema.SESSION.draining)
WORKER_QUEUE_ACTIONS: Final = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:SendMessage",  # nudges for streams it releases or reaps (authorises the batch call)
)
# Each connection is a socket; Fargate's default soft limit would cap a task far below the
# connection counts a task is sized for.
_OPEN_FILES: Final = 65_536
# The awslogs driver buffers this much in non-blocking mode before dropping lines.
_LOG_BUFFER: Final = Size.mebibytes(25)


class WorkerService(Construct):
    """Cluster (Container Insights), task definition and Fargate service of the workers.

    - ``stop_timeout``: SIGTERM reaches the worker through the ECS init process; it stops
      claiming, checkpoints and releases every lease, then exits before the SIGKILL.
    - Rolling deployments keep 100 % of tasks healthy and add new ones first, so a deploy
      hands leases over instead of dropping them; a failing deployment rolls back.
    - No ``desiredCount``: a deploy never resets a fleet that auto scaling has grown.
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc,
                 subnets: ec2.SubnetSelection, security_group: ec2.ISecurityGroup,
                 assign_public_ip: bool, image: ecs.ContainerImage, arm64: bool, cpu: int,
                 memory_mib: int, environment: Mapping[str, str], stop_timeout: Duration,
                 table: dynamodb.ITable, index_arns: Sequence[str],
                 session_table: dynamodb.ITable, queue: sqs.IQueue,
                 log_retention_days: int, removal_policy: RemovalPolicy,
                 orders_queue_prefix: str, collector_image: str | None = None) -> None:
        super().__init__(scope, construct_id)
        self.cluster = ecs.Cluster(self, "Cluster", vpc=vpc,
                                   container_insights_v2=ecs.ContainerInsights.ENABLED)
        self.log_group = logs.LogGroup(self, "Logs", retention=retention(log_retention_days),
                                       removal_policy=removal_policy)
        self.task_definition = ecs.FargateTaskDefinition(
            self, "Task", cpu=cpu, memory_limit_mib=memory_mib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64 if arm64
                else ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX))
        # Tracing on: the worker sends its spans to an ADOT collector sidecar (infra.tracing).
        traced = collector_image is not None
        self.container = self._add_container(
            image, {**environment, names.ENV_ORDERS_QUEUE_PREFIX: orders_queue_prefix,
                    **(tracing_environment() if traced else {})}, stop_timeout)
        self.collector = (add_collector(self.task_definition, collector_image, self.log_group)
                          if collector_image is not None else None)
        self._grant(table, index_arns, session_table, queue,
                    batch=S.RENEW_MODE.read(environment) == "batch")
        # Its session's order queue: created at start, long-polled, deleted at a graceful stop.
        self.task_definition.task_role.add_to_principal_policy(order_queue_statement(
            self, orders_queue_prefix, WORKER_ORDER_ACTIONS))
        if traced:
            grant_xray(self.task_definition.task_role)
        self.service = ecs.FargateService(
            self, "Service", cluster=self.cluster, task_definition=self.task_definition,
            vpc_subnets=subnets, security_groups=[security_group],
            assign_public_ip=assign_public_ip,
            min_healthy_percent=100, max_healthy_percent=200,
            circuit_breaker=ecs.DeploymentCircuitBreaker(enable=True, rollback=True),
            # Said, not left to ECS's default: after an AZ's outage ECS starts tasks in the
            # recovered AZ and stops as many in the other, each stop a graceful one (its
            # streams handed over warm, as a scale-in's).
            availability_zone_rebalancing=ecs.AvailabilityZoneRebalancing.ENABLED,
            enable_ecs_managed_tags=True, propagate_tags=ecs.PropagatedTagSource.SERVICE,
            platform_version=ecs.FargatePlatformVersion.LATEST)

    def _add_container(self, image: ecs.ContainerImage, environment: Mapping[str, str],
                       stop_timeout: Duration) -> ecs.ContainerDefinition:
        container = self.task_definition.add_container(
            CONTAINER_NAME, image=image, environment=dict(environment),
            essential=True, stop_timeout=stop_timeout,
            readonly_root_filesystem=True,
            # An init as PID 1 forwards SIGTERM to the worker and reaps stray children.
            linux_parameters=ecs.LinuxParameters(self, "Linux", init_process_enabled=True),
            health_check=ecs.HealthCheck(
                command=["CMD", *names.WORKER_HEALTH_COMMAND],
                interval=Duration.seconds(30), timeout=Duration.seconds(5), retries=3,
                start_period=Duration.seconds(60)),
            # Non-blocking: a slow log pipeline must never stall the event loop that renews
            # leases; at worst a burst of log lines is dropped.
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=CONTAINER_NAME, log_group=self.log_group,
                mode=ecs.AwsLogDriverMode.NON_BLOCKING, max_buffer_size=_LOG_BUFFER),
        )
        container.add_ulimits(ecs.Ulimit(name=ecs.UlimitName.NOFILE, soft_limit=_OPEN_FILES,
                                         hard_limit=_OPEN_FILES))
        # The worker needs no Linux capability (outbound TCP, an unprivileged health port):
        # none kept, so code in the task (the handler's dependencies too) gets none either.
        container.linux_parameters.drop_capabilities(ecs.Capability.ALL)  # type: ignore[union-attr]
        # The root filesystem is read-only; /tmp is the one writable place (task storage).
        self.task_definition.add_volume(name="tmp")
        container.add_mount_points(ecs.MountPoint(container_path="/tmp", source_volume="tmp",
                                                  read_only=False))
        return container

    def _grant(self, table: dynamodb.ITable, index_arns: Sequence[str],
               session_table: dynamodb.ITable, queue: sqs.IQueue, *, batch: bool) -> None:
        role = self.task_definition.task_role
        actions = list(WORKER_TABLE_ACTIONS)
        if batch:
            actions += WORKER_BATCH_ACTIONS
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=actions, resources=[table.table_arn]))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(WORKER_INDEX_ACTIONS), resources=list(index_arns)))
        role.add_to_principal_policy(conditioned_update(
            table.table_arn, WORKER_LEASE_ATTRIBUTES, schema.PK_PREFIX))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(WORKER_SESSION_ACTIONS), resources=[session_table.table_arn]))
        role.add_to_principal_policy(conditioned_update(
            session_table.table_arn, WORKER_SESSION_ATTRIBUTES, schema.SESSION_PREFIX))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(WORKER_QUEUE_ACTIONS), resources=[queue.queue_arn]))


def conditioned_update(table_arn: str, attributes: Sequence[str],
                       key_prefix: str) -> iam.PolicyStatement:
    """UpdateItem on ``table_arn`` naming only ``attributes``, on keys starting ``key_prefix``.

    Like the router's statements (``infra.router``) but without the ReturnValues pin: the worker
    reads whole items anyway (GetItem), and its acquire and heartbeat return ALL_NEW.
    """
    return iam.PolicyStatement(
        actions=["dynamodb:UpdateItem"],
        resources=[table_arn],
        conditions={
            "ForAllValues:StringEquals": {"dynamodb:Attributes": list(attributes)},
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{key_prefix}*"]},
        },
    )
