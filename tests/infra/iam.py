"""IAM of the synthesized template as data: each component's Allow statements, recorded AWS
calls mapped to the IAM actions they need, and the few condition operators the stack uses.

``allows`` is a small evaluator, not IAM: it knows the condition operators our policies use
and fails on any other, so a new condition cannot be silently treated as satisfied.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from typing import Any

from holdfast.infra.router import ROUTER_HANDLER
from holdfast.infra.sweeper import SWEEPER_HANDLER
from holdfast.infra.taskstopped import TASKSTOPPED_HANDLER
from tests.infra.conftest import one_resource, resources

__all__ = ["AWS_SIDE_ACTIONS", "Need", "allows", "arn_name", "as_list", "needs_of", "role_ids",
           "role_statements"]

# Granted to a component's role but used by AWS on its behalf, never by our code, as
# (action, logical-id prefix of the resource) -> why: the router's event source mapping reads
# the lease table's stream with the router's role and reports failed batches to its queue, and
# Lambda writes each function's logs and X-Ray segments with it.
_LAMBDA_SIDE = {
    ("logs:CreateLogStream", "{fn}HandlerLogs"): "Lambda writes the function's log group",
    ("logs:PutLogEvents", "{fn}HandlerLogs"): "Lambda writes the function's log group",
    ("xray:PutTraceSegments", "*"): "Lambda's X-Ray integration (tracing on)",
    ("xray:PutTelemetryRecords", "*"): "Lambda's X-Ray integration (tracing on)",
}
AWS_SIDE_ACTIONS: dict[str, dict[tuple[str, str], str]] = {
    "router": {
        ("dynamodb:DescribeStream", "LeasesTable"): "the mapping reads the stream's shards",
        ("dynamodb:GetShardIterator", "LeasesTable"): "the mapping starts reading each shard",
        ("dynamodb:GetRecords", "LeasesTable"): "the mapping reads the records it invokes with",
        ("dynamodb:ListStreams", "*"): "the mapping finds the table's stream",
        ("sqs:SendMessage", "QueuesRouterFailures"): "the mapping's on-failure destination",
        **{(a, r.format(fn="Router")): why for (a, r), why in _LAMBDA_SIDE.items()},
    },
    "sweeper": {(a, r.format(fn="Sweeper")): why for (a, r), why in _LAMBDA_SIDE.items()},
    "taskstopped": {
        ("sqs:SendMessage", "TaskStoppedFailures"): "Lambda's on-failure destination",
        **{(a, r.format(fn="TaskStopped")): why for (a, r), why in _LAMBDA_SIDE.items()},
    },
    # tracing=xray only (the IAM test's default stack has tracing off, so no grant at all).
    "worker": {("xray:PutTraceSegments", "*"): "the ADOT collector sidecar exports spans",
               ("xray:PutTelemetryRecords", "*"): "the ADOT collector sidecar's telemetry"},
}


_BATCH = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
          "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}
_PARTIQL = {"SELECT": "PartiQLSelect", "EXISTS": "PartiQLSelect", "UPDATE": "PartiQLUpdate",
            "INSERT": "PartiQLInsert", "DELETE": "PartiQLDelete"}
_CONTEXT_KEYS = {"dynamodb:Attributes": "attributes", "dynamodb:LeadingKeys": "leading_keys",
                 "dynamodb:ReturnValues": "return_values"}


@dataclass(frozen=True)
class Need:
    """One IAM action on one resource (a real name from the test), with its request context."""

    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


def needs_of(call: dict[str, Any]) -> list[Need]:
    """The IAM authorisations one recorded call needs (a batch of statements: one each)."""
    service, op = call["service"], call["operation"]
    if op in ("BatchExecuteStatement", "ExecuteStatement"):
        return [Need(f"dynamodb:{_PARTIQL[s['verb']]}", s["table"])
                for s in call["statements"]]
    context = {k: call[k] for k in ("attributes", "leading_keys", "return_values") if k in call}
    return [Need(f"{service}:{_BATCH.get(op, op)}", call.get("resource", "*"), context)]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def arn_name(resource: Any) -> str:
    """A statement resource as text: ``<logical id>``, ``<logical id>/index/<name>``, ``*``."""
    if isinstance(resource, str):
        return resource
    if "Fn::GetAtt" in resource:
        logical, attribute = resource["Fn::GetAtt"]
        return str(logical) if attribute == "Arn" else f"{logical}.{attribute}"
    if "Fn::Join" in resource:
        return "".join(arn_name(part) for part in resource["Fn::Join"][1])
    return json.dumps(resource, sort_keys=True)


def role_ids(template: dict[str, Any]) -> dict[str, str]:
    """Component -> logical id of its role (worker task role, the functions' roles)."""
    task = one_resource(template, "AWS::ECS::TaskDefinition")["Properties"]
    out = {"worker": str(task["TaskRoleArn"]["Fn::GetAtt"][0])}
    for component, handler in (("router", ROUTER_HANDLER), ("sweeper", SWEEPER_HANDLER),
                               ("taskstopped", TASKSTOPPED_HANDLER)):
        (fn,) = [f for f in resources(template, "AWS::Lambda::Function").values()
                 if f["Properties"].get("Handler") == handler]
        out[component] = str(fn["Properties"]["Role"]["Fn::GetAtt"][0])
    return out


def role_statements(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    """The statements of every policy attached to one role."""
    out: list[dict[str, Any]] = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            out += policy["Properties"]["PolicyDocument"]["Statement"]
    return out


def _condition_holds(operator: str, key: str, allowed: Any, context: dict[str, Any]) -> bool:
    if key not in _CONTEXT_KEYS:
        raise AssertionError(f"condition key {key} is not modelled by this test")
    present = key in context or _CONTEXT_KEYS[key] in context
    values = as_list(context.get(_CONTEXT_KEYS[key], []))
    allowed = as_list(allowed)
    if operator == "ForAllValues:StringEquals":
        return all(v in allowed for v in values)
    if operator == "ForAllValues:StringLike":
        return all(any(fnmatch.fnmatchcase(v, p) for p in allowed) for v in values)
    if operator == "StringEqualsIfExists":
        return not present or all(v in allowed for v in values)
    raise AssertionError(f"condition operator {operator} is not modelled by this test")


def allows(statements: list[dict[str, Any]], action: str, resource: str,
           context: dict[str, Any]) -> bool:
    """True if an Allow statement grants ``action`` on ``resource`` (a logical name) with every
    condition holding for ``context``; no identity policy of ours has a Deny."""
    assert all(s["Effect"] == "Allow" for s in statements)
    for s in statements:
        if action not in as_list(s["Action"]):
            continue
        granted = {arn_name(r) for r in as_list(s["Resource"])}
        if resource not in granted and "*" not in granted:
            continue
        conditions = s.get("Condition", {})
        if all(_condition_holds(op, key, allowed, context)
               for op, keys in conditions.items() for key, allowed in keys.items()):
            return True
    return False
