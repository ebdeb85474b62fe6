#!/usr/bin/env python3
"""The transcripts fleet on AWS: a ``HoldfastFleet`` in this app's own stack, plus the app's
segment table.

A project that depends on Holdfast like any other (``pip install -e .`` here installs
``holdfast[cdk]``); run from this directory::

    npx cdk deploy -c workerImage=<account>.dkr.ecr.<region>.amazonaws.com/transcripts:1

Every Holdfast setting works as context (``-c maxTasks=20``...); ``cdk.json`` sets the handler
and the stack name. The fleet sets the CDK feature flags it relies on itself, so this app's
``cdk.json`` carries none. What this file adds goes through the fleet's public attributes
only: ``PutItem`` on the app's table for the worker task role, and ``$TRANSCRIPTS_TABLE`` in
the worker container.
"""

from __future__ import annotations

import os

# First: it quiets jsii's Node 20 end-of-life banner before aws_cdk starts jsii.
from holdfast.cdk import HoldfastFleet, Settings  # isort: skip

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from cdk_nag import AwsSolutionsChecks

__all__: list[str] = []

app = cdk.App()
settings = Settings.from_context(app.node.try_get_context)
if not settings.worker_image:
    raise SystemExit("app.py: pass -c workerImage=<uri> (examples/transcripts/Dockerfile, "
                     "built and pushed), or give HoldfastFleet worker_image_directory=\".\" "
                     "here to let cdk deploy build it")
stack = cdk.Stack(app, settings.stack_name,
                  description="Holdfast transcripts example: segments from WebSocket feeds",
                  env=cdk.Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"),
                                      region=os.environ.get("CDK_DEFAULT_REGION"))
                  if settings.vpc_id else None)
fleet = HoldfastFleet(stack, "Fleet", settings=settings)

segments = dynamodb.Table(
    stack, "Segments", partition_key=dynamodb.Attribute(name="pk",
                                                        type=dynamodb.AttributeType.STRING),
    billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
    point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
        point_in_time_recovery_enabled=True),
    deletion_protection=settings.deletion_protection,
    removal_policy=cdk.RemovalPolicy.DESTROY if settings.removal_policy == "destroy"
    else cdk.RemovalPolicy.RETAIN)
# Least privilege: the handler only ever puts (conditionally) into its own table; its fenced
# write is a transaction of two Puts (segment + fence item), authorised as PutItem.
segments.grant(fleet.worker_task_role, "dynamodb:PutItem")
fleet.worker_container.add_environment("TRANSCRIPTS_TABLE", segments.table_name)
cdk.CfnOutput(stack, "SegmentTableName", value=segments.table_name,
              description="Transcript segments, one item per conn_id#seq")
cdk.CfnOutput(stack, "TableName", value=fleet.table.table_name,
              description="Lease table (insert items here)")
cdk.CfnOutput(stack, "AlarmTopicArn", value=fleet.alarm_topic.topic_arn,
              description="SNS topic of every alarm")

cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
