"""``HoldfastFleet``: everything one Holdfast fleet needs, as a construct for any Stack.

Tables, queues, router, sweeper, task-stopped handler, network, worker service, scaling,
alarms and dashboard, with their IAM and cdk-nag acknowledgements. Our own ``HoldfastStack``
is a thin Stack around one of these; a user puts one in their own stack
(``from holdfast.cdk import HoldfastFleet``).

Props: a :class:`Settings` (every setting, validated as the CDK context values are) plus
typed keyword props for the few a user sets in code. A keyword prop goes through the same
field parser and cross-field checks as its context key, so an error names the prop.
"""

from __future__ import annotations

import os
from typing import Any

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack, Tags, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

from holdfast.core import names
from holdfast.infra.exceptions import SettingsError
from holdfast.infra.failures import HandlerFailures
from holdfast.infra.flags import FEATURE_FLAGS
from holdfast.infra.function import FunctionDefaults
from holdfast.infra.image import container_image
from holdfast.infra.lambda_asset import lambda_code
from holdfast.infra.metrics import FleetParts
from holdfast.infra.monitoring import Monitoring
from holdfast.infra.nag import acknowledge_findings
from holdfast.infra.network import Network
from holdfast.infra.outputs import add_outputs
from holdfast.infra.queue import NudgeQueues
from holdfast.infra.router import Router, orders_queue_prefix
from holdfast.infra.scaling import WorkerScaling
from holdfast.infra.service import WorkerService
from holdfast.infra.sessions import SessionTable
from holdfast.infra.settings import Settings
from holdfast.infra.sweeper import Sweeper
from holdfast.infra.table import LeaseTable
from holdfast.infra.taskstopped import TaskStopped

__all__ = ["HoldfastFleet", "worker_environment"]

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


def _same_place(a: Stack, b: Stack) -> bool:
    """Two stacks that may deploy to one account and region (an environment-agnostic one may
    go anywhere): there, fleet names and order-queue prefixes must not meet."""
    def differ(x: str, y: str) -> bool:
        return not Token.is_unresolved(x) and not Token.is_unresolved(y) and x != y
    return not (differ(a.account, b.account) or differ(a.region, b.region))


def _fleets_apart(fleet: Construct, fleet_name: str, prefix: str) -> None:
    """Two fleets of one app that may share an account and region must have names of their
    own: the name keys their metrics' ``service`` (two stacks with the default name each
    scaled on both fleets' connections) and their alarms. Nor may one's order-queue prefix
    begin the other's (``Feeds-orders-`` and ``Feeds-orders-orders-``): each sweeper deletes
    the queues under its prefix that no session of its own reads."""
    stack = Stack.of(fleet)
    for other in fleet.node.root.node.find_all():
        # (Not one whose construction failed: it is in the tree, without settings.)
        if (other is fleet or not isinstance(other, HoldfastFleet)
                or not hasattr(other, "orders_queue_prefix")
                or not _same_place(stack, Stack.of(other))):
            continue
        if other.settings.fleet_name == fleet_name:
            raise SettingsError(
                f"HoldfastFleet {fleet.node.path!r}: {other.node.path!r} is named "
                f"{fleet_name!r} too and may deploy to the same account and region; give each "
                "fleet its own fleet_name (context key fleetName): it keys their metrics, "
                "alarms and order queues")
        theirs = other.orders_queue_prefix
        if theirs.startswith(prefix) or prefix.startswith(theirs):
            raise SettingsError(
                f"HoldfastFleet {fleet.node.path!r}: its order queues' prefix {prefix!r} and "
                f"{other.node.path!r}'s {theirs!r} begin alike, and each fleet's sweeper "
                "would delete the other's queues; rename a stack or a fleet")


def _given_once(settings: Settings | None, keywords: dict[str, Any]) -> None:
    """A keyword given beside a different value of the same field in ``settings`` is refused:
    which one was meant cannot be told (the keyword won, silently)."""
    if settings is None:
        return
    defaults = Settings()
    twice = [f"{name}={value!r} and settings.{name}={getattr(settings, name)!r}"
             for name, value in keywords.items()
             if value is not None and getattr(settings, name) not in (
                 value, getattr(defaults, name))]
    if twice:
        raise SettingsError("HoldfastFleet: given twice, differently: " + "; ".join(twice)
                            + " (give each once)")


class HoldfastFleet(Construct):
    """One Holdfast fleet in the enclosing Stack.

    ``HoldfastFleet(self, "Fleet", handler="myapp.handler:handle", worker_image=uri)``.
    ``settings`` carries every other setting (``Settings(min_tasks=4, ...)``); a keyword prop
    and a different value of the same field in ``settings`` is refused (say it once).
    ``Settings.stack_name`` is the stack's name in our own app only: here the enclosing
    Stack's name is used. ``vpc``: a VPC of the app's own (made
    in the same app; ``vpc_id`` looks one up instead, which needs the stack's account and
    region), none: a new two-AZ VPC. What a user extends is public:
    ``table`` (the lease table), ``worker_task_role``, ``worker_container``, ``queue`` and
    ``dead_letter_queue``, ``alarm_topic``; the building blocks as ``leases``, ``sessions``,
    ``queues``, ``router``, ``sweeper``, ``network``, ``workers``, ``monitoring``.
    """

    def __init__(self, scope: Construct, construct_id: str, *,
                 settings: Settings | None = None,
                 handler: str | None = None,
                 worker_image: str | None = None,
                 worker_image_directory: str | os.PathLike[str] | None = None,
                 fleet_name: str | None = None,
                 min_tasks: int | None = None,
                 max_tasks: int | None = None,
                 max_connections_per_task: int | None = None,
                 alarm_email: str | None = None,
                 vpc: ec2.IVpc | None = None) -> None:
        super().__init__(scope, construct_id)
        # The flags this subtree relies on, whatever the user's app (or cdk.json) says: they
        # must be set before the first child exists (children read them on creation).
        for flag, value in FEATURE_FLAGS.items():
            self.node.set_context(flag, value)
        keywords = {"handler": handler, "worker_image": worker_image, "fleet_name": fleet_name,
                    "min_tasks": min_tasks, "max_tasks": max_tasks,
                    "max_connections_per_task": max_connections_per_task,
                    "alarm_email": alarm_email}
        _given_once(settings, keywords)
        s = (settings or Settings()).with_values(**keywords)
        if worker_image_directory is not None and s.worker_image:
            raise SettingsError("HoldfastFleet: give worker_image or worker_image_directory, "
                                "not both")
        if vpc is not None and s.vpc_id:
            raise SettingsError("HoldfastFleet: give vpc or vpc_id (context key vpcId), not both")
        _fleets_apart(self, s.fleet_name,
                            orders_queue_prefix(Stack.of(self).stack_name, s.fleet_name))
        self.settings = s
        # Every taggable resource (tasks too, via the service) carries its fleet: cost
        # allocation and IAM conditions can tell fleets apart.
        Tags.of(self).add("holdfast:fleet", s.fleet_name)
        image = container_image(self, s.worker_image, worker_image_directory,
                              s.worker_architecture == "arm64")
        self._build(s, image, vpc)

    def _build(self, s: Settings, image: ecs.ContainerImage, vpc: ec2.IVpc | None) -> None:
        removal = RemovalPolicy.DESTROY if s.removal_policy == "destroy" else RemovalPolicy.RETAIN
        service_names = names.service_names(s.fleet_name)
        defaults = FunctionDefaults(code=lambda_code(),
                                    powertools_layer_version=s.powertools_layer_version,
                                    tracing=s.xray, adot_layer_arn=s.adot_layer_arn,
                                    log_retention_days=s.log_retention_days,
                                    removal_policy=removal)
        provisioned = s.table_billing == "provisioned"
        reads = (s.table_read_min, s.table_read_max)
        self.leases = LeaseTable(
            self, "Leases", table_name=s.table_name, provisioned=provisioned,
            read_capacity=reads, write_capacity=(s.table_write_min, s.table_write_max),
            deletion_protection=s.deletion_protection, removal_policy=removal)
        self.sessions = SessionTable(
            self, "Sessions", table_name=s.session_table_name, provisioned=provisioned,
            read_capacity=reads, write_capacity=s.session_write_capacity,
            deletion_protection=s.deletion_protection, removal_policy=removal)
        self.queues = NudgeQueues(self, "Queues", removal_policy=removal)
        table, sessions, queue = self.leases.table, self.sessions.table, self.queues.queue
        self.table, self.queue, self.dead_letter_queue = table, queue, self.queues.dlq
        index_arns = [self.leases.index_arn, self.leases.owner_index_arn]
        # Each worker session's order queue is named <prefix><owner>; the router (and, given
        # this attribute, the workers and sweeper) all derive names from this one prefix.
        self.orders_queue_prefix = orders_queue_prefix(Stack.of(self).stack_name, s.fleet_name)
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
            upstream_ports=s.upstream_ports, vpc=vpc)
        # The on-failure queue exists only where the policy sends to it: no resource (and no
        # send permission) that nothing uses.
        self.handler_failures = (
            HandlerFailures(self, "HandlerFailures", removal_policy=removal)
            if s.handler_on_failure == names.HANDLER_ON_FAILURE_SKIP else None)
        environment = worker_environment(s, table_name=table.table_name,
                                         session_table_name=sessions.table_name,
                                         queue_url=queue.queue_url,
                                         service_name=service_names["worker"])
        if self.handler_failures is not None:
            environment.update(self.handler_failures.worker_environment())
        self.workers = WorkerService(
            self, "Workers", vpc=self.network.vpc, subnets=self.network.subnets,
            security_group=self.network.security_group,
            assign_public_ip=self.network.assign_public_ip,
            image=image, arm64=s.worker_architecture == "arm64", cpu=s.task_cpu,
            memory_mib=s.task_memory_mib,
            environment=environment,
            stop_timeout=Duration.seconds(s.stop_timeout_seconds), table=table,
            index_arns=index_arns, session_table=sessions, queue=queue,
            log_retention_days=s.log_retention_days, removal_policy=removal,
            orders_queue_prefix=self.orders_queue_prefix,
            collector_image=s.collector_image if s.xray else None)
        self.workers.service.node.add_dependency(self.network.egress_established)
        self.worker_task_role: iam.IRole = self.workers.task_definition.task_role
        self.worker_container: ecs.ContainerDefinition = self.workers.container
        if self.handler_failures is not None:
            self.handler_failures.grant_send(self.worker_task_role)
        WorkerScaling(
            self, "Scaling", service=self.workers.service, service_name=service_names["worker"],
            sweeper_service_name=service_names["sweeper"], min_tasks=s.min_tasks,
            max_tasks=s.max_tasks,
            target_connections_per_task=s.target_connections_per_task)
        # ECS reports a stopped task at once: its session is declared dead without the TTL.
        self.task_stopped = TaskStopped(
            self, "TaskStopped", defaults=defaults, cluster=self.workers.cluster,
            service=self.workers.service, table=table,
            owner_index_arn=self.leases.owner_index_arn, session_table=sessions, queue=queue,
            service_name=service_names["taskstopped"],
            timing=s.timing_environment, removal_policy=removal)
        self.queues.only_senders([self.worker_task_role, self.router.handler.role,
                                  self.sweeper.handler.role, self.task_stopped.handler.role])
        self.monitoring = Monitoring(
            self, "Monitoring", lease_ms=s.lease_ms, alarm_email=s.alarm_email,
            parts=FleetParts(queue=queue, dlq=self.queues.dlq,
                             router_failures=self.queues.router_failures,
                             router=self.router.function, sweeper=self.sweeper.function,
                             task_stopped=self.task_stopped.function,
                             task_stopped_failures=self.task_stopped.failures,
                             service=self.workers.service, service_names=service_names,
                             lease_table=table, session_table=sessions,
                             handler_failures=self.handler_failures.queue
                             if self.handler_failures else None,
                             handler_failures_dlq=self.handler_failures.dlq
                             if self.handler_failures else None))
        self.alarm_topic: sns.ITopic = self.monitoring.topic
        acknowledge_findings(router=self.router, sweeper=self.sweeper, workers=self.workers,
                             queues=self.queues, network=self.network, tracing=s.xray)

    def add_outputs(self, *, prefix: str = "") -> list[CfnOutput]:
        """The stack outputs an operator reads back (``TableName``, ``QueueUrl``, the log
        groups...: ``holdfast.infra.outputs``), each id after ``prefix`` (a second fleet in
        the stack needs one)."""
        return add_outputs(self, prefix=prefix)
