#!/usr/bin/env python3
"""The Holdfast CDK app: settings from context, one stack (one ``HoldfastFleet``), cdk-nag on
every synth."""

from __future__ import annotations

import os

# First: holdfast.cdk quiets jsii's Node 20 end-of-life banner, before aws_cdk starts jsii.
from holdfast.cdk import Settings  # isort: skip

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from holdfast.infra.stack import HoldfastStack, stack_environment

app = cdk.App()
settings = Settings.from_context(app.node.try_get_context)
HoldfastStack(app, settings.stack_name, settings=settings,
              env=stack_environment(settings, os.environ),
              description="Holdfast: self-healing fleet of WebSocket workers leased via DynamoDB")
# Findings fail the synth; accepted ones are acknowledged, with reasons, in infra/nag.py.
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
