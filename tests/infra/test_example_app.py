"""The transcripts example's CDK app: a HoldfastFleet in its own stack, plus its table, IAM
and env, synthesized with its own cdk.json (no feature flags)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import REPO, SYNTH_TIMEOUT_S, cli_env, resources

EXAMPLE = REPO / "examples" / "transcripts"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/transcripts:1"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.fixture(scope="module")
def example_template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`cdk synth` run in examples/transcripts with its cdk.json and a workerImage."""
    out: Path = tmp_path_factory.mktemp("example.out")
    proc = subprocess.run([str(REPO / "node_modules" / ".bin" / "cdk"), "synth", "--quiet",
                           "--output", str(out), f"--context=workerImage={IMAGE}"],
                          cwd=EXAMPLE, env=cli_env(), capture_output=True, text=True,
                          timeout=SYNTH_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return dict(json.loads((out / "HoldfastTranscripts.template.json").read_text()))


def test_example_adds_its_table_iam_and_handler(example_template: dict[str, Any]) -> None:
    """Segments table (PITR), PutItem on it for the task role only, handler/image/env set."""
    tables = resources(example_template, "AWS::DynamoDB::Table")
    (seg_id,) = [k for k in tables if k.startswith("Segments")]
    assert tables[seg_id]["Properties"]["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True}
    # A user's stack may not set @aws-cdk/aws-iam:minimizePolicies, under which a statement
    # with one resource renders it bare rather than as a one-item list: both mean the same.
    seg_arn = {"Fn::GetAtt": [seg_id, "Arn"]}
    grants = [(p, st) for p in resources(example_template, "AWS::IAM::Policy").values()
              for st in p["Properties"]["PolicyDocument"]["Statement"]
              if seg_arn in _as_list(st.get("Resource"))]
    assert len(grants) == 1
    policy, stmt = grants[0]
    assert _as_list(stmt["Resource"]) == [seg_arn]
    assert _as_list(stmt["Action"]) == ["dynamodb:PutItem"]
    assert any("TaskRole" in r["Ref"] for r in policy["Properties"]["Roles"])
    (task,) = resources(example_template, "AWS::ECS::TaskDefinition").values()
    (container,) = task["Properties"]["ContainerDefinitions"]
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env["HOLDFAST_HANDLER"] == "transcripts.handler:handle"
    assert env["TRANSCRIPTS_TABLE"] == {"Ref": seg_id}
    assert "transcripts:1" in json.dumps(container["Image"])


def test_a_private_ecr_image_can_be_pulled(example_template: dict[str, Any]) -> None:
    """A workerImage in ECR gives the task execution role the pull of that repository."""
    (task,) = resources(example_template, "AWS::ECS::TaskDefinition").values()
    role = task["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]
    pulls = [st for p in resources(example_template, "AWS::IAM::Policy").values()
             if {"Ref": role} in p["Properties"]["Roles"]
             for st in p["Properties"]["PolicyDocument"]["Statement"]
             if "ecr:BatchGetImage" in st["Action"]]
    assert pulls, "the execution role cannot pull the worker image"
    assert any("repository/transcripts" in json.dumps(st["Resource"]) for st in pulls), pulls


def test_example_gets_the_fleets_security_settings(example_template: dict[str, Any]) -> None:
    """The example's cdk.json has no feature flags: the VPC's default security group is
    still restricted, and the fleet's resources are all there."""
    types = [r["Type"] for r in example_template["Resources"].values()]
    assert types.count("Custom::VpcRestrictDefaultSG") == 1
    assert "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup" not in json.loads(
        (EXAMPLE / "cdk.json").read_text())["context"]


def test_the_example_configures_its_own_async_tests() -> None:
    """Copied out of the checkout (as its README says), its async tests still run: its own
    pyproject.toml sets what the checkout's does (without it pytest skipped two as unsupported)."""
    import tomllib

    own = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["pytest"]
    checkout = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]
    for key in ("asyncio_mode", "asyncio_default_fixture_loop_scope"):
        assert own["ini_options"][key] == checkout["ini_options"][key]
