"""Deployment settings: CDK context values -> one validated, typed ``Settings``.

Every setting has a default, so ``cdk deploy`` with no context gives a working fleet. Values come
from ``cdk.json`` (typed JSON) or ``cdk deploy -c key=value`` (always strings), so each parser
accepts both forms. A bad value fails synth with a message naming the key and what is allowed,
rather than a CloudFormation error twenty minutes into a deployment.

No ``aws_cdk`` import here: settings are tested in milliseconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from holdfast.core import names
from holdfast.core import settings as worker_settings
from holdfast.core.rules import (
    DEFAULT_HEARTBEAT_MS,
    DEFAULT_LEASE_MS,
    DEFAULT_SKEW_MS,
    LeaseTiming,
    throttled_heartbeat_ms,
)
from holdfast.core.urls import policy_from_env
from holdfast.infra.crosschecks import check_cross_field
from holdfast.infra.exceptions import SettingsError
from holdfast.infra.limits import (
    MAX_STOP_TIMEOUT_S,
    VPC_AZS,
)
from holdfast.infra.parsers import (
    boolean,
    check_key_spelling,
    choice,
    context_keys,
    image_uri,
    int_in,
    layer_arn,
    matching,
    setting,
    tcp_ports,
    tracing_mode,
    worker_check,
)

__all__ = ["DEFAULT_FLEET_NAME", "Settings", "context_key"]

DEFAULT_FLEET_NAME: Final = "holdfast"
_STACK_RE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_FLEET_RE: Final = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
_VPC_RE: Final = re.compile(r"^vpc-[0-9a-f]{8,17}$")
_EMAIL_RE: Final = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# The session table is named "<tableName>-sessions": 246 + 9 is DynamoDB's limit of 255.
_SESSION_SUFFIX: Final = "-sessions"
_TABLE_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{3,246}$")
# ECS stops a task with SIGKILL this long after SIGTERM at most (the ECS maximum is 120 s).


def _worker_default(number: worker_settings.Number) -> int:
    """The worker's own default of ``number`` (``holdfast.core.settings``), whole: the stack
    sets what the worker would assume, and a changed worker default changes the stack's."""
    return round(number.read({}))


def context_key(name: str) -> str:
    """The CDK context key of a settings field: ``lease_seconds`` -> ``leaseSeconds``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything a deployment may tune; defaults suit a small production fleet."""

    stack_name: str = setting("Holdfast", matching(_STACK_RE, "a CloudFormation stack name"),
                               "CloudFormation stack name")
    fleet_name: str = setting(DEFAULT_FLEET_NAME,
                               matching(_FLEET_RE, "lowercase a-z0-9- (<= 24)"),
                               "prefix of the metric service names and order queues (several "
                               "fleets per account)")
    # Liveness (the worker, router and sweeper get the same values): one session heartbeat per
    # worker; a worker silent for a lease loses its streams.
    lease_seconds: int = setting(DEFAULT_LEASE_MS // 1000, int_in(3, 300),
                                  "how long a silent worker keeps its streams")
    heartbeat_seconds: int = setting(DEFAULT_HEARTBEAT_MS // 1000, int_in(1, 100),
                                      "session heartbeat interval (per worker)")
    checkpoint_seconds: int = setting(
        _worker_default(worker_settings.CHECKPOINT_SECONDS),
        int_in(1, round(worker_settings.CHECKPOINT_SECONDS.hi)),
        "how often a stream's position is saved (replay window on a crash)")
    skew_ms: int = setting(DEFAULT_SKEW_MS, int_in(0, 10_000), "clock-skew allowance between hosts")
    reconcile_seconds: int = setting(_worker_default(worker_settings.RECONCILE_SECONDS),
                                     int_in(5, 3600), "worker full reconcile interval")
    renew_mode: str = setting(worker_settings.RENEW_MODE.default,
                              choice(*worker_settings.RENEW_MODE.choices),
                              "PartiQL batch or one by one")
    # What a worker does with a message whose handler calls all failed: park the stream on it
    # (nothing lost), or skip it to an on-failure SQS queue the fleet then creates.
    handler_on_failure: str = setting(names.HANDLER_ON_FAILURE_PARK,
                                       choice(*names.HANDLER_ON_FAILURE_POLICIES),
                                       "after the last handler attempt: park or skip (to a queue)")
    # Worker service.
    max_connections_per_task: int = setting(500, int_in(1, 50_000), "connections one task holds")
    # Rebalancing (README "Rebalancing"): the fleet-wide budget of upstream connects per
    # second (each task takes its share; 0: no limit), and how long a moved stream stays put.
    connect_rate: int = setting(_worker_default(worker_settings.CONNECT_RATE),
                                 int_in(0, round(worker_settings.CONNECT_RATE.hi)),
                                 "fleet-wide upstream connects per second (0: no limit)")
    rebalance_cooldown_seconds: int = setting(
        _worker_default(worker_settings.REBALANCE_COOLDOWN_SECONDS),
        int_in(0, round(worker_settings.REBALANCE_COOLDOWN_SECONDS.hi)),
        "a stream whose owner changed is not moved again for this long")
    target_utilization_percent: int = setting(
        70, int_in(10, 100), "scale to keep average connections per task at this % of the max")
    min_tasks: int = setting(2, int_in(1, 1000), "fewest worker tasks (>= 2 survives one loss)")
    max_tasks: int = setting(10, int_in(1, 1000), "most worker tasks")
    task_cpu: int = setting(512, int_in(256, 16384), "Fargate CPU units per task")
    task_memory_mib: int = setting(1024, int_in(512, 122_880), "Fargate memory per task")
    worker_architecture: str = setting("arm64", choice("arm64", "x86_64"), "task CPU type")
    stop_timeout_seconds: int = setting(
        120, int_in(10, MAX_STOP_TIMEOUT_S), "SIGTERM -> SIGKILL grace for releasing leases")
    worker_image: str | None = setting(
        None, image_uri, "prebuilt worker image URI (default: build ./Dockerfile)")
    # Checked as the worker reads them at start (it would exit, and ECS roll the deploy back).
    allowed_hosts: str | None = setting(
        None, worker_check(worker_settings.ALLOWED_HOSTS.name, policy_from_env,
                           worker_settings.ALLOWED_HOSTS.shape),
        "upstream host allow-list for ws_url")
    upstream_ports: tuple[int, ...] = setting(
        (443,), tcp_ports, "TCP ports workers may dial upstreams on (443 is open for AWS anyway)")
    handler: str | None = setting(
        None, worker_check(worker_settings.HANDLER.name, worker_settings.HANDLER.get,
                           worker_settings.HANDLER.shape),
        "module:callable handling upstream messages")
    # Lease table.
    table_name: str | None = setting(
        None, matching(_TABLE_RE, "a DynamoDB table name of at most 246 characters"),
        "physical lease table name (default: generated)")
    table_billing: str = setting("on-demand", choice("on-demand", "provisioned"),
                                  "table capacity mode")
    table_read_min: int = setting(5, int_in(1, 40_000), "provisioned: min read capacity")
    table_read_max: int = setting(100, int_in(1, 40_000), "provisioned: max read capacity")
    table_write_min: int = setting(5, int_in(1, 40_000), "provisioned: min write capacity")
    table_write_max: int = setting(200, int_in(1, 40_000), "provisioned: max write capacity")
    deletion_protection: bool = setting(True, boolean, "table deletion protection")
    removal_policy: str = setting("retain", choice("retain", "destroy"),
                                   "what `cdk destroy` does to the table, queues and logs")
    # Network.
    vpc_id: str | None = setting(None, matching(_VPC_RE, "a VPC id like vpc-0123abcd"),
                                  "existing VPC (needs CDK_DEFAULT_ACCOUNT/REGION)")
    worker_subnets: str = setting("private", choice("private", "public"),
                                   "private (egress via NAT) or public (public IP, no NAT)")
    nat_gateways: int = setting(VPC_AZS, int_in(1, VPC_AZS),
                                f"new VPC with private subnets: NAT gateways, one per AZ (its "
                                f"{VPC_AZS}) by default; 1 saves one's charge, and an outage "
                                "of its AZ cuts every worker off its upstreams")
    vpc_flow_logs: bool = setting(True, boolean, "new VPC: flow logs to CloudWatch")
    # Router and sweeper.
    powertools_layer_version: int = setting(38, int_in(1, 1000), "AWS Powertools layer version")
    router_batch_size: int = setting(100, int_in(1, 10_000), "stream records per invocation")
    router_batching_window_seconds: int = setting(0, int_in(0, 300), "wait to fill a batch")
    router_retry_attempts: int = setting(10, int_in(0, 10_000), "retries of a failing batch")
    router_parallelization_factor: int = setting(1, int_in(1, 10), "batches per shard at once")
    sweeper_reserve_concurrency: bool = setting(
        True, boolean, "reserve 1 concurrency so sweeps never overlap")
    # Tracing costs money (X-Ray traces, a sidecar per task): off unless asked for.
    tracing: str = setting(
        "off", tracing_mode, "off, or xray: OpenTelemetry traces of each acquisition to X-Ray "
        "(ADOT layer on the Lambdas, ADOT collector sidecar in each task)")
    adot_layer_arn: str | None = setting(
        None, layer_arn, "tracing=xray: the ADOT Python Lambda layer ARN (default: "
        "aws-otel-python-arm64 in the stack's region, see infra/function.py)")
    collector_image: str = setting(
        "public.ecr.aws/aws-observability/aws-otel-collector:v0.43.3", image_uri,
        "tracing=xray: the worker tasks' ADOT collector sidecar image")
    # Operations.
    log_retention_days: int = setting(30, int_in(1, 3653), "days CloudWatch keeps every log")
    alarm_email: str | None = setting(None, matching(_EMAIL_RE, "an e-mail address"),
                                       "subscribe this address to the alarm topic")

    def __post_init__(self) -> None:
        # Values given in code (``Settings(min_tasks=4)``, the construct's props) get the same
        # checks as context values; a parser may also normalise (``"XRAY"`` -> ``"xray"``).
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value != f.default:
                object.__setattr__(self, f.name, f.metadata["parse"](f.name, value))
        # The error names context keys (``-c minTasks``); a Python user is told the fields too.
        named: list[str] = []

        def key(name: str) -> str:
            named.append(name)
            return context_key(name)

        try:
            check_cross_field(self, key)
        except SettingsError as exc:
            raise SettingsError(f"{exc} (in Python: Settings/HoldfastFleet "
                                f"{', '.join(dict.fromkeys(named))})") from None

    def with_values(self, **values: Any) -> Settings:
        """A copy with ``values`` (None: keep this one's), validated like the rest."""
        given = {name: value for name, value in values.items() if value is not None}
        return replace(self, **given) if given else self

    @classmethod
    def from_context(cls, lookup: Callable[[str], Any],
                     keys: Iterable[str] | None = None) -> Settings:
        """Build from CDK context (``node.try_get_context``); None means "use the default".

        A context key (``keys``, default: every key of ``lookup``'s node or mapping) that is not
        a setting but close to one is refused as a misspelling (``parsers.check_key_spelling``).
        """
        check_key_spelling(context_keys(lookup) if keys is None else keys,
                           {context_key(f.name) for f in fields(cls)})
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = context_key(f.name)
            raw = lookup(key)
            if raw is not None:
                values[f.name] = f.metadata["parse"](key, raw)
        return cls(**values)

    @classmethod
    def describe(cls) -> list[tuple[str, Any, str]]:
        """(context key, default, meaning) of every setting, for docs and ``--help``-like use."""
        return [(context_key(f.name), f.default, f.metadata["doc"]) for f in fields(cls)]

    @property
    def xray(self) -> bool:
        """Tracing is on (the only backend so far is X-Ray)."""
        return self.tracing == "xray"

    @property
    def lease_ms(self) -> int:
        """Lease length in milliseconds."""
        return self.lease_seconds * 1000

    @property
    def timing_environment(self) -> dict[str, str]:
        """The timing variables the worker and every Lambda get (``LeaseTiming.from_env``)."""
        return {names.ENV_LEASE_SECONDS: str(self.lease_seconds),
                names.ENV_HEARTBEAT_SECONDS: str(self.heartbeat_seconds),
                names.ENV_SKEW_MS: str(self.skew_ms)}

    @property
    def shutdown_seconds(self) -> int:
        """The worker's graceful-stop budget: a lease plus a heartbeat, at least 25 s (the
        worker's own default).

        The session keeps heartbeating while the worker drains, so its streams stay held, and
        a stop ends as soon as every stream is handed over: the budget is a ceiling, not a
        wait. A stop hands its streams over warm while an offer can still end before 60 % of
        it (``worker.handoff``): at 10 s, three workers of 100 streams stopped at once handed
        180 of 300 over warm and released the rest in a burst (gap p99 10.0 s, stops 8.8-9.3
        s); at 25 s all 300 went warm (gap p99 1.4 s) and the stops took 5.7-6.2 s.
        """
        return max(_worker_default(worker_settings.SHUTDOWN_SECONDS),
                   self.lease_seconds + self.heartbeat_seconds)

    @property
    def session_table_name(self) -> str | None:
        """``<tableName>-sessions`` (as the local AWS names it), or None for a generated name."""
        return f"{self.table_name}{_SESSION_SUFFIX}" if self.table_name else None

    @property
    def session_write_capacity(self) -> tuple[int, int]:
        """Provisioned write range of the session table: never below one heartbeat per
        ``heartbeatSeconds`` from every task of the largest fleet during a deployment.

        A throttled session heartbeat is not a slow write: a worker silent for a lease loses
        every stream it holds, so the floor must not wait for auto scaling to catch up. A
        rolling deployment runs up to twice ``maxTasks`` (new tasks start before old ones stop),
        and a worker whose heartbeat was refused beats at ``rules.throttled_heartbeat_ms`` for a
        while: the floor covers that rate too, so refusals cannot feed themselves.
        """
        timing = LeaseTiming.from_env(self.timing_environment)
        floor = max(self.table_write_min, math.ceil(
            2 * self.max_tasks * 1000 / throttled_heartbeat_ms(timing)))
        return floor, max(floor, self.table_write_max)

    @property
    def target_connections_per_task(self) -> int:
        """The average ActiveConnections per task that target tracking aims for."""
        return max(1, self.max_connections_per_task * self.target_utilization_percent // 100)
