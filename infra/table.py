"""The lease table: one item per connection, two KEYS_ONLY indexes, a stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from holdfast.core import schema

__all__ = ["LeaseTable", "auto_scale", "billing_mode", "index_arn"]

# Provisioned mode tracks this consumed/provisioned ratio; heartbeats are steady, so 70 % leaves
# room for a failover burst (every orphan claimed at once) while auto scaling catches up.
_TARGET_UTILIZATION_PERCENT: Final = 70


def billing_mode(provisioned: bool) -> dynamodb.BillingMode:
    """PROVISIONED or PAY_PER_REQUEST (on-demand)."""
    return dynamodb.BillingMode.PROVISIONED if provisioned else dynamodb.BillingMode.PAY_PER_REQUEST


def index_arn(table: dynamodb.ITable, index_name: str) -> str:
    """The ARN of one index of ``table`` (exact, no wildcard)."""
    return f"{table.table_arn}/index/{index_name}"


def auto_scale(table: dynamodb.Table, *, read: tuple[int, int], write: tuple[int, int],
               indexes: Sequence[str] = ()) -> None:
    """Target-tracking auto scaling of a provisioned table and each of ``indexes``.

    Each index scales on its own: it sees only the writes that touch its keys and only its own
    queries, so its load follows neither the table's nor the other index's.
    """
    pct = _TARGET_UTILIZATION_PERCENT
    table.auto_scale_read_capacity(min_capacity=read[0], max_capacity=read[1]) \
        .scale_on_utilization(target_utilization_percent=pct)
    table.auto_scale_write_capacity(min_capacity=write[0], max_capacity=write[1]) \
        .scale_on_utilization(target_utilization_percent=pct)
    for name in indexes:
        table.auto_scale_global_secondary_index_read_capacity(
            name, min_capacity=read[0], max_capacity=read[1],
        ).scale_on_utilization(target_utilization_percent=pct)
        table.auto_scale_global_secondary_index_write_capacity(
            name, min_capacity=write[0], max_capacity=write[1],
        ).scale_on_utilization(target_utilization_percent=pct)


class LeaseTable(Construct):
    """The DynamoDB lease table, on-demand or provisioned with auto scaling.

    Indexes (both KEYS_ONLY, as ``schema.table_definition()`` has them): the seed index the
    sweeper and the reconcile sweep read for expired leases, and the owner index that finds a
    dead session's streams without a scan.

    On-demand costs nothing when idle; provisioned is cheaper for a large steady fleet.
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
            billing_mode=billing_mode(provisioned),
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
        # Only acquisitions and releases change lease_owner, so heartbeats and checkpoints
        # never write to this index.
        self.table.add_global_secondary_index(
            index_name=schema.OWNER_INDEX_NAME,
            partition_key=dynamodb.Attribute(name=schema.ATTR.lease_owner, type=string),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
            read_capacity=reads, write_capacity=writes,
        )
        if provisioned:
            auto_scale(self.table, read=read_capacity, write=write_capacity,
                       indexes=(schema.GSI_NAME, schema.OWNER_INDEX_NAME))

    @property
    def index_arn(self) -> str:
        """The ARN of the seed index (expired leases by desired state)."""
        return index_arn(self.table, schema.GSI_NAME)

    @property
    def owner_index_arn(self) -> str:
        """The ARN of the owner index (a session's streams)."""
        return index_arn(self.table, schema.OWNER_INDEX_NAME)
