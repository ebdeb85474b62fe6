"""The taskstopped function: the rule on the fleet's stopped tasks, retries, DLQ, pinned IAM."""

from __future__ import annotations

from typing import Any

from holdfast.core import names, schema
from holdfast.infra.taskstopped import (
    TASKSTOPPED_HANDLER,
    TASKSTOPPED_LEASE_ATTRIBUTES,
    TASKSTOPPED_SESSION_READS,
    TASKSTOPPED_SESSION_WRITES,
)
from tests.infra.conftest import lease_table_id, logical_id, resources, session_table_id
from tests.infra.iam import arn_name, as_list, role_statements


def _function(template_json: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, f) for k, f in resources(template_json, "AWS::Lambda::Function").items()
                if f["Properties"].get("Handler") == TASKSTOPPED_HANDLER]
    return found


def _rule(template_json: dict[str, Any]) -> dict[str, Any]:
    (rule,) = [r["Properties"] for r in resources(template_json, "AWS::Events::Rule").values()
               if "EventPattern" in r["Properties"]]
    return dict(rule)


def test_the_rule_matches_only_stopped_tasks_of_the_fleet_service(
        template_json: dict[str, Any]) -> None:
    """source aws.ecs, ECS Task State Change, lastStatus STOPPED, this cluster and service."""
    pattern = _rule(template_json)["EventPattern"]
    cluster = logical_id(template_json, "AWS::ECS::Cluster", "WorkersCluster")
    service = logical_id(template_json, "AWS::ECS::Service", "WorkersService")
    assert pattern == {
        "source": ["aws.ecs"], "detail-type": ["ECS Task State Change"],
        "detail": {"lastStatus": ["STOPPED"],
                   "clusterArn": [{"Fn::GetAtt": [cluster, "Arn"]}],
                   "group": [{"Fn::Join": ["", ["service:", {"Fn::GetAtt": [service, "Name"]}]]}]}}


def test_delivery_and_invocation_are_retried_then_parked(template_json: dict[str, Any]) -> None:
    """The target retries and has a DLQ; a failed invocation is retried, then sent there too."""
    fn_id, _ = _function(template_json)
    failures = logical_id(template_json, "AWS::SQS::Queue", "TaskStoppedFailures")
    (target,) = _rule(template_json)["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [fn_id, "Arn"]}
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [failures, "Arn"]}}
    (config,) = [c["Properties"] for c in resources(
        template_json, "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": fn_id}]
    assert config["MaximumRetryAttempts"] == 2
    assert config["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [failures, "Arn"]}}}


def test_its_environment_names_both_tables_and_its_own_service(
        template_json: dict[str, Any]) -> None:
    """Both tables, the nudge queue, the lease timings, service holdfast-taskstopped."""
    env = _function(template_json)[1]["Properties"]["Environment"]["Variables"]
    assert env[names.ENV_TABLE] == {"Ref": lease_table_id(template_json)}
    assert env[names.ENV_SESSION_TABLE] == {"Ref": session_table_id(template_json)}
    assert env[names.ENV_SERVICE_NAME] == f"holdfast-{names.TASKSTOPPED_SERVICE}"
    assert env[names.ENV_QUEUE_URL] == {
        "Ref": logical_id(template_json, "AWS::SQS::Queue", "QueuesNudges")}
    assert (env[names.ENV_LEASE_SECONDS], env[names.ENV_HEARTBEAT_SECONDS],
            env[names.ENV_SKEW_MS]) == ("4", "1", "250")


def test_its_timeout_holds_two_calls_at_their_worst(template_json: dict[str, Any]) -> None:
    """The function's timeout leaves room for two DynamoDB calls at their worst through its
    client (one call's worst, as it was, a slow table could pass)."""
    from holdfast.core.aws import worst_call_ms
    from holdfast.lambdas.taskstopped.limits import DDB_CONFIG

    timeout_s = _function(template_json)[1]["Properties"]["Timeout"]
    assert timeout_s * 1000 >= 2 * worst_call_ms(DDB_CONFIG)


def test_its_role_may_only_read_and_kill_sessions_and_release_leases(
        template_json: dict[str, Any]) -> None:
    """Projected session GetItem, pinned UpdateItems, the owner index, nudges: nothing else."""
    fn = _function(template_json)[1]
    statements = role_statements(template_json, fn["Properties"]["Role"]["Fn::GetAtt"][0])
    leases, sessions = lease_table_id(template_json), session_table_id(template_json)
    failures = logical_id(template_json, "AWS::SQS::Queue", "TaskStoppedFailures")
    log_group = logical_id(template_json, "AWS::Logs::LogGroup", "TaskStoppedHandlerLogs")
    granted = {(a, arn_name(r), str(s.get("Condition", {}).get("ForAllValues:StringEquals", {})
                                     .get("dynamodb:Attributes")))
               for s in statements for a in as_list(s["Action"]) for r in as_list(s["Resource"])}
    assert granted == {
        ("logs:CreateLogStream", log_group, "None"), ("logs:PutLogEvents", log_group, "None"),
        ("dynamodb:GetItem", sessions, str(list(TASKSTOPPED_SESSION_READS))),
        ("dynamodb:UpdateItem", sessions, str(list(TASKSTOPPED_SESSION_WRITES))),
        ("dynamodb:Query", f"{leases}/index/{schema.OWNER_INDEX_NAME}", "None"),
        ("dynamodb:UpdateItem", leases, str(list(TASKSTOPPED_LEASE_ATTRIBUTES))),
        ("sqs:SendMessage", failures, "None"),
        ("sqs:SendMessage", logical_id(template_json, "AWS::SQS::Queue", "QueuesNudges"),
         "None"),
    }
    for s in statements:
        if s["Action"] in ("dynamodb:GetItem", "dynamodb:UpdateItem"):
            prefix = (schema.SESSION_PREFIX if arn_name(s["Resource"]) == sessions
                      else schema.PK_PREFIX)
            assert s["Condition"]["ForAllValues:StringLike"] == {
                "dynamodb:LeadingKeys": [f"{prefix}*"]}
    # It can neither redirect nor rewind a stream, nor renew or order a session.
    assert not {schema.ATTR.ws_url, schema.ATTR.last_seq} & set(TASKSTOPPED_LEASE_ATTRIBUTES)
    assert not {schema.SESSION.expires_at_ms, schema.SESSION.orders} & set(
        TASKSTOPPED_SESSION_WRITES)

