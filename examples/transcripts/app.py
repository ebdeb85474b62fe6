#!/usr/bin/env python3
"""The transcripts fleet on AWS: Holdfast's stack unchanged, plus this app's segment table.

Run from this directory with a Holdfast checkout two levels up (the stack builds its Lambda
code from there)::

    npx cdk deploy -c workerImage=<account>.dkr.ecr.<region>.amazonaws.com/transcripts:1

Every Holdfast setting works here too (``-c maxTasks=20``...); ``cdk.json`` sets the handler
and the stack name, Holdfast's own ``cdk.json`` the rest of the defaults. What this file adds
goes through the stack's public attributes only: the table, ``PutItem`` on it for the worker
task role, and ``$TRANSCRIPTS_TABLE`` in the worker container.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from cdk_nag import AwsSolutionsChecks

HOLDFAST = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HOLDFAST))  # infra/ and the Lambda code live in the checkout

from holdfast.infra.settings import Settings  # noqa: E402
from holdfast.infra.stack import HoldfastStack, stack_environment  # noqa: E402

__all__: list[str] = []

# Holdfast's defaults (feature flags included) under this directory's cdk.json and -c values.
defaults = json.loads((HOLDFAST / "cdk.json").read_text())["context"]
app = cdk.App(context=defaults)
settings = Settings.from_context(app.node.try_get_context)
if not settings.worker_image:
    raise SystemExit("app.py: pass -c workerImage=<uri> (examples/transcripts/Dockerfile, "
                     "built and pushed): the default image has no transcripts handler")
stack = HoldfastStack(app, settings.stack_name, settings=settings,
                      env=stack_environment(settings, os.environ),
                      description="Holdfast transcripts example: segments from WebSocket feeds")

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
segments.grant(stack.workers.task_definition.task_role, "dynamodb:PutItem")
stack.workers.container.add_environment("TRANSCRIPTS_TABLE", segments.table_name)
cdk.CfnOutput(stack, "SegmentTableName", value=segments.table_name,
              description="Transcript segments, one item per conn_id#seq")

cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
