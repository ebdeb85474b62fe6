"""Holdfast's CDK constructs: one per logical unit, wired by ``infra.fleet.HoldfastFleet`` (the
public construct, ``holdfast.cdk``); ``infra.stack`` is our own app's thin stack around it.

``infra.settings`` turns CDK context into validated settings; ``holdfast.core.names`` holds the
metric and environment-variable names shared with the worker and the Lambdas.
"""

from __future__ import annotations

__all__: list[str] = []
