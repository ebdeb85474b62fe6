"""Least privilege across the stack: no wildcard actions, each role exactly what it needs."""

from __future__ import annotations

from typing import Any

from holdfast.core import schema
from infra.router import ROUTER_HANDLER
from infra.service import WORKER_INDEX_ACTIONS, WORKER_QUEUE_ACTIONS, WORKER_TABLE_ACTIONS
from infra.sweeper import SWEEPER_HANDLER
from tests.infra.conftest import one_resource, resources

# Actions that support no resource-level permissions (the only statements allowed on "*").
RESOURCE_STAR_ALLOWED = {"xray:PutTraceSegments", "xray:PutTelemetryRecords",
                         "dynamodb:ListStreams", "ecr:GetAuthorizationToken"}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def allow_statements(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Allow statement of every identity policy (managed-by-us and inline)."""
    out: list[dict[str, Any]] = []
    for policy in resources(template_json, "AWS::IAM::Policy").values():
        out += policy["Properties"]["PolicyDocument"]["Statement"]
    for role in resources(template_json, "AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            out += inline["PolicyDocument"]["Statement"]
    return [s for s in out if s["Effect"] == "Allow"]


def role_statements(template_json: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    """The Allow statements of the policies attached to one role."""
    out: list[dict[str, Any]] = []
    for policy in resources(template_json, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            out += policy["Properties"]["PolicyDocument"]["Statement"]
    return out


def actions_of(statements: list[dict[str, Any]]) -> set[str]:
    return {a for s in statements for a in _list(s["Action"])}


def function_role(template_json: dict[str, Any], handler: str) -> str:
    (fn,) = [f for f in resources(template_json, "AWS::Lambda::Function").values()
             if f["Properties"].get("Handler") == handler]
    return str(fn["Properties"]["Role"]["Fn::GetAtt"][0])


def test_no_wildcard_actions_anywhere(template_json: dict[str, Any]) -> None:
    """No Allow statement in any policy uses a wildcard action."""
    statements = allow_statements(template_json)
    assert statements
    wild = sorted(a for a in actions_of(statements) if "*" in a)
    assert wild == []


def test_resource_star_only_where_iam_offers_nothing_narrower(
        template_json: dict[str, Any]) -> None:
    """'*' resources appear only with actions that have no resource-level permissions."""
    for s in allow_statements(template_json):
        if "*" in _list(s["Resource"]):
            assert set(_list(s["Action"])) <= RESOURCE_STAR_ALLOWED, s


def test_worker_role_reads_and_writes_only_the_table_and_index(
        template_json: dict[str, Any]) -> None:
    """The task role: lease-store calls on the table and its index; receive/delete on the queue."""
    task = one_resource(template_json, "AWS::ECS::TaskDefinition")["Properties"]
    statements = role_statements(template_json, task["TaskRoleArn"]["Fn::GetAtt"][0])
    assert actions_of(statements) == (set(WORKER_TABLE_ACTIONS) | set(WORKER_INDEX_ACTIONS)
                                      | set(WORKER_QUEUE_ACTIONS))
    (query,) = [s for s in statements if s["Action"] == "dynamodb:Query"]
    assert query["Resource"]["Fn::Join"][1][1] == f"/index/{schema.GSI_NAME}"
    (items,) = [s for s in statements if "dynamodb:UpdateItem" in _list(s["Action"])]
    assert items["Resource"] == {"Fn::GetAtt": [items["Resource"]["Fn::GetAtt"][0], "Arn"]}
    assert not {"dynamodb:Scan", "dynamodb:DeleteItem", "dynamodb:PutItem"} & actions_of(
        statements)


def test_router_role_reads_the_stream_sends_and_normalises(
        template_json: dict[str, Any]) -> None:
    """Router: stream read, SendMessage to its queues, and one tightly conditioned UpdateItem."""
    statements = role_statements(template_json,
                                 function_role(template_json, ROUTER_HANDLER))
    assert actions_of(statements) == {
        "logs:CreateLogStream", "logs:PutLogEvents",
        "xray:PutTraceSegments", "xray:PutTelemetryRecords",
        "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
        "dynamodb:ListStreams", "sqs:SendMessage", "dynamodb:UpdateItem",
    }
    (update,) = [s for s in statements if s["Action"] == "dynamodb:UpdateItem"]
    conditions = update["Condition"]
    assert conditions["ForAllValues:StringEquals"]["dynamodb:Attributes"] == [
        schema.PARTITION_KEY, schema.ATTR.desired_state, schema.ATTR.lease_expires_at_ms]
    assert conditions["StringEqualsIfExists"]["dynamodb:ReturnValues"] == "NONE"
    assert conditions["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == [
        f"{schema.PK_PREFIX}*"]


def test_sweeper_role_queries_the_index_and_sends(template_json: dict[str, Any]) -> None:
    """Sweeper: Query on the index only (not the table) and SendMessage."""
    statements = role_statements(template_json, function_role(template_json, SWEEPER_HANDLER))
    assert actions_of(statements) == {
        "logs:CreateLogStream", "logs:PutLogEvents",
        "xray:PutTraceSegments", "xray:PutTelemetryRecords",
        "dynamodb:Query", "sqs:SendMessage",
    }
    (query,) = [s for s in statements if s["Action"] == "dynamodb:Query"]
    assert query["Resource"]["Fn::Join"][1][1] == f"/index/{schema.GSI_NAME}"


def test_lambda_roles_use_no_managed_policies(template_json: dict[str, Any]) -> None:
    """Our function roles carry only inline least-privilege policies."""
    for handler in (ROUTER_HANDLER, SWEEPER_HANDLER):
        role = template_json["Resources"][function_role(template_json, handler)]
        assert "ManagedPolicyArns" not in role["Properties"]
