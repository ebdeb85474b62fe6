"""The session table: one item per worker, its liveness heartbeat and its stop orders."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from holdfast.core import schema
from holdfast.infra.table import auto_scale, billing_mode

__all__ = ["SessionTable"]


class SessionTable(Construct):
    """The DynamoDB session table, mirroring ``schema.session_table_definition()``.

    - No index and no stream: a heartbeat writes one item and nothing else, and the sweeper
      reads the whole (small) table with a Scan.
    - TTL on ``expire_at_s``: the sweeper sets it once a session is reaped, so finished
      sessions disappear on their own instead of growing every Scan.
    - Same billing mode, protection and removal policy as the lease table.
    """

    def __init__(self, scope: Construct, construct_id: str, *, table_name: str | None,
                 provisioned: bool, read_capacity: tuple[int, int],
                 write_capacity: tuple[int, int], deletion_protection: bool,
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self, "Table",
            table_name=table_name,
            partition_key=dynamodb.Attribute(name=schema.PARTITION_KEY,
                                             type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=schema.SESSION.ttl,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True),
            deletion_protection=deletion_protection,
            removal_policy=removal_policy,
            billing_mode=billing_mode(provisioned),
            read_capacity=read_capacity[0] if provisioned else None,
            write_capacity=write_capacity[0] if provisioned else None,
        )
        if provisioned:
            auto_scale(self.table, read=read_capacity, write=write_capacity)
