"""The lease table: one item per connection, a KEYS_ONLY index for the sweeper, a stream."""

from __future__ import annotations

from typing import Final

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from holdfast.core import schema

__all__ = ["LeaseTable"]

# Provisioned mode tracks this consumed/provisioned ratio; heartbeats are steady, so 70 % leaves
# room for a failover burst (every orphan claimed at once) while auto scaling catches up.
_TARGET_UTILIZATION_PERCENT: Final = 70


class LeaseTable(Construct):
    """The DynamoDB lease table, on-demand or provisioned with auto scaling.

    On-demand costs nothing when idle; provisioned is cheaper for a large steady fleet, where
    every connection writes one heartbeat per interval around the clock.
    """

    def __init__(self, scope: Construct, construct_id: str, *, table_name: str | None,
                 provisioned: bool, read_capacity: tuple[int, int],
                 write_capacity: tuple[int, int], deletion_protection: bool,
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        string = dynamodb.AttributeType.STRING
        # Provisioned tables start at the minimum; auto scaling moves them from there.
        reads = read_capacity[0] if provisioned else None
        writes = write_capacity[0] if provisioned else None
        self.table = dynamodb.Table(
            self, "Table",
            table_name=table_name,
            partition_key=dynamodb.Attribute(name=schema.PARTITION_KEY, type=string),
            stream=dynamodb.StreamViewType[schema.STREAM_VIEW_TYPE],
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True),
            deletion_protection=deletion_protection,
            removal_policy=removal_policy,
            billing_mode=(dynamodb.BillingMode.PROVISIONED if provisioned
                          else dynamodb.BillingMode.PAY_PER_REQUEST),
            read_capacity=reads, write_capacity=writes,
        )
        self.table.add_global_secondary_index(
            index_name=schema.GSI_NAME,
            partition_key=dynamodb.Attribute(name=schema.GSI_PARTITION_KEY, type=string),
            sort_key=dynamodb.Attribute(name=schema.GSI_SORT_KEY,
                                        type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType[schema.GSI_PROJECTION],
            read_capacity=reads, write_capacity=writes,
        )
        if provisioned:
            self._auto_scale(read_capacity, write_capacity)

    @property
    def index_arn(self) -> str:
        """The ARN of the sweeper's index (exact, no wildcard)."""
        return f"{self.table.table_arn}/index/{schema.GSI_NAME}"

    def _auto_scale(self, read: tuple[int, int], write: tuple[int, int]) -> None:
        pct = _TARGET_UTILIZATION_PERCENT
        t = self.table
        t.auto_scale_read_capacity(min_capacity=read[0], max_capacity=read[1]) \
            .scale_on_utilization(target_utilization_percent=pct)
        t.auto_scale_write_capacity(min_capacity=write[0], max_capacity=write[1]) \
            .scale_on_utilization(target_utilization_percent=pct)
        # The index sees every write that touches its keys (claims, releases), and the sweeper
        # reads it every second: it scales on its own.
        t.auto_scale_global_secondary_index_read_capacity(
            schema.GSI_NAME, min_capacity=read[0], max_capacity=read[1],
        ).scale_on_utilization(target_utilization_percent=pct)
        t.auto_scale_global_secondary_index_write_capacity(
            schema.GSI_NAME, min_capacity=write[0], max_capacity=write[1],
        ).scale_on_utilization(target_utilization_percent=pct)
