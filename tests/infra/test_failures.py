"""The handler's on-failure queue: encrypted, TLS only, its own DLQ, sendable by the worker."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core import names, schema
from tests.infra.conftest import resources


@pytest.fixture(scope="module")
def synth() -> tuple[Any, dict[str, Any], dict[str, str]]:
    """The construct alone in a stack, with a role granted SendMessage; (template, json, env)."""
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    from holdfast.infra.failures import HandlerFailures

    stack = cdk.Stack(cdk.App(), "Failures")
    role = iam.Role(stack, "TaskRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    failures = HandlerFailures(stack, "HandlerFailures", removal_policy=cdk.RemovalPolicy.RETAIN)
    failures.grant_send(role)
    env = stack.resolve(failures.worker_environment())
    template = Template.from_stack(stack)
    return template, template.to_json(), env


def test_queue_and_dlq_are_encrypted_tls_only_and_kept_14_days(
        synth: tuple[Any, dict[str, Any], dict[str, str]]) -> None:
    """Two queues, SQS-managed encryption, 14 days' retention, each denying plain HTTP."""
    _, template_json, _ = synth
    queues = resources(template_json, "AWS::SQS::Queue")
    assert len(queues) == 2
    for q in queues.values():
        assert q["Properties"]["SqsManagedSseEnabled"] is True
        assert q["Properties"]["MessageRetentionPeriod"] == 14 * 86_400
    covered = set()
    for policy in resources(template_json, "AWS::SQS::QueuePolicy").values():
        if any(s["Effect"] == "Deny" and
               s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
               for s in policy["Properties"]["PolicyDocument"]["Statement"]):
            covered |= {q["Ref"] for q in policy["Properties"]["Queues"]}
    assert covered == set(queues)


def test_queue_redrives_to_its_own_dlq(synth: tuple[Any, dict[str, Any], dict[str, str]]) -> None:
    """A body its reader keeps failing on moves to the DLQ after the shared receive count."""
    _, template_json, _ = synth
    queues = resources(template_json, "AWS::SQS::Queue")
    (main,) = [q for q in queues.values() if "RedrivePolicy" in q["Properties"]]
    (dlq_id,) = [k for k, q in queues.items() if "RedrivePolicy" not in q["Properties"]]
    redrive = main["Properties"]["RedrivePolicy"]
    assert redrive["maxReceiveCount"] == schema.DLQ_MAX_RECEIVE_COUNT
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}


def test_the_granted_role_may_send_and_nothing_more(
        synth: tuple[Any, dict[str, Any], dict[str, str]]) -> None:
    """grant_send gives SendMessage (and the calls it needs) on the failure queue only."""
    _, template_json, env = synth
    queues = resources(template_json, "AWS::SQS::Queue")
    (main_id,) = [k for k, q in queues.items() if "RedrivePolicy" in q["Properties"]]
    (policy,) = resources(template_json, "AWS::IAM::Policy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    actions = statement["Action"] if isinstance(statement["Action"], list) else [
        statement["Action"]]
    assert "sqs:SendMessage" in actions and not any("Receive" in a or "Delete" in a
                                                     for a in actions)
    assert statement["Resource"] == {"Fn::GetAtt": [main_id, "Arn"]}
    assert env[names.ENV_HANDLER_ON_FAILURE] == "skip"
    assert env[names.ENV_FAILURE_QUEUE_URL] == {"Ref": main_id}


@pytest.fixture(scope="module")
def fleets() -> dict[str, dict[str, Any]]:
    """A HoldfastFleet's template for each policy (a prebuilt image: no Docker context)."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from holdfast.cdk import HoldfastFleet, Settings

    out = {}
    for policy in names.HANDLER_ON_FAILURE_POLICIES:
        stack = cdk.Stack(cdk.App(), f"Fleet-{policy}")
        HoldfastFleet(stack, "Fleet", settings=Settings(handler_on_failure=policy),
                      worker_image="public.ecr.aws/example/worker:1")
        out[policy] = Template.from_stack(stack).to_json()
    return out


def _worker_env(template_json: dict[str, Any]) -> dict[str, Any]:
    (task,) = resources(template_json, "AWS::ECS::TaskDefinition").values()
    worker = next(c for c in task["Properties"]["ContainerDefinitions"]
                  if any(e["Name"] == names.ENV_TABLE for e in c.get("Environment", [])))
    return {e["Name"]: e["Value"] for e in worker["Environment"]}


def test_skip_policy_gets_its_queue_env_and_send_grant(fleets: dict[str, dict[str, Any]]) -> None:
    """handler_on_failure=skip: two more queues, the worker told to skip to one of them and
    allowed to send to it and nothing else; park (the default) creates none and sets
    nothing."""
    park, skip = fleets[names.HANDLER_ON_FAILURE_PARK], fleets[names.HANDLER_ON_FAILURE_SKIP]
    assert len(resources(skip, "AWS::SQS::Queue")) == len(resources(park, "AWS::SQS::Queue")) + 2
    env = _worker_env(skip)
    assert env[names.ENV_HANDLER_ON_FAILURE] == names.HANDLER_ON_FAILURE_SKIP
    queue_id = env[names.ENV_FAILURE_QUEUE_URL]["Ref"]
    assert queue_id in resources(skip, "AWS::SQS::Queue")
    assert queue_id not in resources(park, "AWS::SQS::Queue")
    on_queue = [s for p in resources(skip, "AWS::IAM::Policy").values()
                for s in p["Properties"]["PolicyDocument"]["Statement"]
                if queue_id in str(s["Resource"])]
    assert [s["Action"] for s in on_queue] == ["sqs:SendMessage"]  # and nothing else on it
    assert names.ENV_HANDLER_ON_FAILURE not in _worker_env(park)
    assert names.ENV_FAILURE_QUEUE_URL not in _worker_env(park)


def test_skip_policy_alarms_on_its_queue_and_dlq(fleets: dict[str, dict[str, Any]]) -> None:
    """handler_on_failure=skip: a message waiting in the on-failure queue or its DLQ alarms
    (max visible >= 1 per minute); park has no such alarm."""
    def visible_alarms(template: dict[str, Any]) -> set[str]:
        return {a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
                for a in resources(template, "AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"}

    skip = fleets[names.HANDLER_ON_FAILURE_SKIP]
    failure_queues = {k for k, q in resources(skip, "AWS::SQS::Queue").items()
                      if k.startswith("FleetHandlerFailures")}
    assert len(failure_queues) == 2
    assert visible_alarms(skip) - visible_alarms(fleets[names.HANDLER_ON_FAILURE_PARK]) \
        == failure_queues
