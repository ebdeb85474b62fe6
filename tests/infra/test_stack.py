"""Least privilege across the stack: no wildcard actions, each role exactly what it needs."""

from __future__ import annotations

from typing import Any

from holdfast.core import names, schema
from holdfast.infra.router import (
    ROUTER_HANDLER,
    ROUTER_SESSION_ATTRIBUTES,
    orders_queue_prefix,
)
from holdfast.infra.service import WORKER_LEASE_ATTRIBUTES, WORKER_SESSION_ATTRIBUTES
from holdfast.infra.sweeper import SWEEPER_HANDLER
from tests.infra.conftest import (
    STACK,
    lease_table_id,
    logical_id,
    one_resource,
    resources,
    session_table_id,
)
from tests.infra.iam import arn_name, as_list, role_statements

# Actions that support no resource-level permissions (the only statements allowed on "*").
RESOURCE_STAR_ALLOWED = {"xray:PutTraceSegments", "xray:PutTelemetryRecords",
                         "dynamodb:ListStreams", "ecr:GetAuthorizationToken", "sqs:ListQueues"}
# How grants() renders the stack's order queues (``infra.orders``): its prefix, then anything.
ORDER_QUEUES = ('arn:{"Ref": "AWS::Partition"}:sqs:{"Ref": "AWS::Region"}:'
                '{"Ref": "AWS::AccountId"}:Holdfast-orders-*')


def allow_statements(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Allow statement of every identity policy (managed-by-us and inline)."""
    out: list[dict[str, Any]] = []
    for policy in resources(template_json, "AWS::IAM::Policy").values():
        out += policy["Properties"]["PolicyDocument"]["Statement"]
    for role in resources(template_json, "AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            out += inline["PolicyDocument"]["Statement"]
    return [s for s in out if s["Effect"] == "Allow"]


def actions_of(statements: list[dict[str, Any]]) -> set[str]:
    return {a for s in statements for a in as_list(s["Action"])}


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
        if "*" in as_list(s["Resource"]):
            assert set(as_list(s["Action"])) <= RESOURCE_STAR_ALLOWED, s


def grants(statements: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Action -> every resource it is allowed on (however the statements were merged)."""
    out: dict[str, set[str]] = {}
    for s in statements:
        for action in as_list(s["Action"]):
            out.setdefault(action, set()).update(arn_name(r) for r in as_list(s["Resource"]))
    return out


def names_of(template_json: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """Logical ids of lease table, session table, nudge queue, and the two index ARNs."""
    leases = lease_table_id(template_json)
    return (leases, session_table_id(template_json),
            logical_id(template_json, "AWS::SQS::Queue", "QueuesNudges"),
            f"{leases}/index/{schema.GSI_NAME}", f"{leases}/index/{schema.OWNER_INDEX_NAME}")


def test_worker_role_has_exactly_the_lease_session_and_queue_calls(
        template_json: dict[str, Any]) -> None:
    """Task role: lease calls, both indexes, sessions, receive and send nudges, its own
    order queue (create, receive, delete messages, delete) and sends to the others' (a
    make-before-break handoff's messages)."""
    task = one_resource(template_json, "AWS::ECS::TaskDefinition")["Properties"]
    statements = role_statements(template_json, task["TaskRoleArn"]["Fn::GetAtt"][0])
    leases, sessions, queue, seed_index, owner_index = names_of(template_json)
    assert grants(statements) == {
        "dynamodb:GetItem": {leases, sessions},
        "dynamodb:BatchGetItem": {leases},
        "dynamodb:UpdateItem": {leases, sessions},
        "dynamodb:PartiQLUpdate": {leases},
        "dynamodb:PutItem": {sessions},
        "dynamodb:Scan": {sessions},
        "dynamodb:Query": {seed_index, owner_index},
        "sqs:ChangeMessageVisibility": {queue},
        **{action: {queue, ORDER_QUEUES} for action in ("sqs:ReceiveMessage",
                                                        "sqs:DeleteMessage", "sqs:SendMessage")},
        **{action: {ORDER_QUEUES} for action in ("sqs:CreateQueue", "sqs:DeleteQueue")},
    }
    # Only UpdateItem is conditioned: pinned attributes and keys, like the router's.
    updates = {arn_name(s["Resource"]): s["Condition"] for s in statements if "Condition" in s}
    assert all(s["Action"] == "dynamodb:UpdateItem" for s in statements if "Condition" in s)
    assert updates[leases]["ForAllValues:StringEquals"]["dynamodb:Attributes"] == list(
        WORKER_LEASE_ATTRIBUTES)
    assert schema.ATTR.ws_url not in WORKER_LEASE_ATTRIBUTES
    assert updates[sessions]["ForAllValues:StringEquals"]["dynamodb:Attributes"] == list(
        WORKER_SESSION_ATTRIBUTES)
    for table, prefix in ((leases, schema.PK_PREFIX), (sessions, schema.SESSION_PREFIX)):
        assert updates[table]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == [
            f"{prefix}*"]


def test_router_role_reads_the_stream_sends_normalises_and_orders_stops(
        template_json: dict[str, Any]) -> None:
    """Router: stream read, SendMessage to its queues and order queues, two tightly
    conditioned UpdateItems (normalise, stop order); no session read, no release."""
    statements = role_statements(template_json,
                                 function_role(template_json, ROUTER_HANDLER))
    leases, sessions, queue, _, _ = names_of(template_json)
    failures = logical_id(template_json, "AWS::SQS::Queue", "QueuesRouterFailures")
    log_group = logical_id(template_json, "AWS::Logs::LogGroup", "RouterHandlerLogs")
    order_queues = ('arn:{"Ref": "AWS::Partition"}:sqs:{"Ref": "AWS::Region"}:'
                    f'{{"Ref": "AWS::AccountId"}}:{orders_queue_prefix(STACK)}*')
    assert grants(statements) == {
        "logs:CreateLogStream": {log_group}, "logs:PutLogEvents": {log_group},
        "dynamodb:ListStreams": {"*"},
        **{a: {f"{leases}.StreamArn"} for a in ("dynamodb:DescribeStream",
                                                "dynamodb:GetRecords",
                                                "dynamodb:GetShardIterator")},
        "sqs:SendMessage": {queue, failures, order_queues},
        "dynamodb:UpdateItem": {leases, sessions},
    }
    updates = {(arn_name(s["Resource"]), tuple(
        s["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"])): s["Condition"]
        for s in statements if s["Action"] == "dynamodb:UpdateItem"}
    normalise = (schema.PARTITION_KEY, schema.ATTR.desired_state,
                 schema.ATTR.lease_expires_at_ms, schema.ATTR.status)
    assert set(updates) == {(leases, normalise), (sessions, ROUTER_SESSION_ATTRIBUTES)}
    assert schema.SESSION.orders in ROUTER_SESSION_ATTRIBUTES
    # Never the heartbeat, expiry or TTL: a router cannot keep a session alive or kill it.
    assert not {schema.SESSION.expires_at_ms, schema.SESSION.heartbeat_at_ms,
                schema.SESSION.ttl, schema.SESSION.reaped_at_ms} & set(ROUTER_SESSION_ATTRIBUTES)
    prefixes = {leases: schema.PK_PREFIX, sessions: schema.SESSION_PREFIX}
    for (table, _), condition in updates.items():
        assert condition["StringEqualsIfExists"]["dynamodb:ReturnValues"] == "NONE"
        assert condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == [
            f"{prefixes[table]}*"]


def test_sweeper_role_scans_sessions_queries_indexes_releases_and_sends(
        template_json: dict[str, Any]) -> None:
    """Sweeper: Scan/UpdateItem on sessions and leases (the unindexed pass, releases; batched:
    PartiQLUpdate on leases), GetItem on
    sessions and Scan on the owner index (the owner audit), Query on both indexes only, lease
    releases, rebalancing directives to order queues, and collecting order queues."""
    statements = role_statements(template_json, function_role(template_json, SWEEPER_HANDLER))
    leases, sessions, queue, seed_index, owner_index = names_of(template_json)
    found = grants(statements)
    assert {a: r for a, r in found.items() if not a.startswith(("logs:", "xray:"))} == {
        "dynamodb:Scan": {sessions, leases, owner_index},
        "dynamodb:GetItem": {sessions},
        "dynamodb:UpdateItem": {leases, sessions},
        "dynamodb:PartiQLUpdate": {leases},  # a dead session's streams released in batches
        "dynamodb:Query": {seed_index, owner_index},
        "sqs:SendMessage": {queue, ORDER_QUEUES},
        "sqs:DeleteQueue": {ORDER_QUEUES},
        "sqs:ListQueues": {"*"},
    }
    assert {a for a in found if a.startswith(("logs:", "xray:"))} == {
        "logs:CreateLogStream", "logs:PutLogEvents"}  # no xray: tracing is off by default


def test_tracing_on_grants_xray_writes_to_each_component(
        alt_template_json: dict[str, Any]) -> None:
    """tracing=xray: the router, sweeper and worker task roles may write X-Ray segments."""
    task = one_resource(alt_template_json, "AWS::ECS::TaskDefinition")["Properties"]
    for role in (function_role(alt_template_json, ROUTER_HANDLER),
                 function_role(alt_template_json, SWEEPER_HANDLER),
                 task["TaskRoleArn"]["Fn::GetAtt"][0]):
        found = grants(role_statements(alt_template_json, role))
        assert found["xray:PutTraceSegments"] == found["xray:PutTelemetryRecords"] == {"*"}


def test_lambda_roles_use_no_managed_policies(template_json: dict[str, Any]) -> None:
    """Our function roles carry only inline least-privilege policies."""
    for handler in (ROUTER_HANDLER, SWEEPER_HANDLER):
        role = template_json["Resources"][function_role(template_json, handler)]
        assert "ManagedPolicyArns" not in role["Properties"]


def test_nothing_deletes_items_and_only_the_sweeper_scans_leases(
        template_json: dict[str, Any]) -> None:
    """No role may delete an item; only the sweeper (its unindexed pass, its owner audit) scans
    the lease table or an index of it."""
    found = grants(allow_statements(template_json))
    assert not {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
                "dynamodb:PartiQLDelete"} & set(found)
    leases, sessions = lease_table_id(template_json), session_table_id(template_json)
    owner_index = names_of(template_json)[4]
    assert found["dynamodb:Scan"] == {sessions, leases, owner_index}
    sweeper = role_statements(template_json, function_role(template_json, SWEEPER_HANDLER))
    others = [s for s in allow_statements(template_json) if s not in sweeper]
    assert leases not in grants(others).get("dynamodb:Scan", set())


def test_worker_and_every_lambda_get_the_same_timing_variables(
        template_json: dict[str, Any]) -> None:
    """One name and unit per timing: the worker's variables, with the same values, reach the
    router, the sweeper and taskstopped; the old HOLDFAST_LEASE_MS reaches nobody."""
    timing = (names.ENV_LEASE_SECONDS, names.ENV_HEARTBEAT_SECONDS, names.ENV_SKEW_MS)
    task = one_resource(template_json, "AWS::ECS::TaskDefinition")["Properties"]
    (worker,) = [c for c in task["ContainerDefinitions"] if c["Name"] == "worker"]
    want = {e["Name"]: e["Value"] for e in worker["Environment"] if e["Name"] in timing}
    assert want == {names.ENV_LEASE_SECONDS: "4", names.ENV_HEARTBEAT_SECONDS: "1",
                    names.ENV_SKEW_MS: "250"}
    functions = resources(template_json, "AWS::Lambda::Function").values()
    envs = [f["Properties"]["Environment"]["Variables"] for f in functions
            if names.ENV_TABLE in f["Properties"].get("Environment", {}).get("Variables", {})]
    assert len(envs) == 3  # router, sweeper, taskstopped
    for env in envs:
        assert {k: env[k] for k in timing} == want and "HOLDFAST_LEASE_MS" not in env
