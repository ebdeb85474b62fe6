"""The CDK app as a user runs it: `npx cdk synth` offline, cdk-nag clean, the promised outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.infra.conftest import cdk_json

# Every finding we accept on purpose (see infra/nag.py); a new one must be reviewed here.
EXPECTED_ACKNOWLEDGED = {
    "AwsSolutions-SQS3",
    "AwsSolutions-IAM5[Resource::*]",
    "AwsSolutions-ECS2",
}


def nag_report(assembly_dir: Path) -> dict[str, Any]:
    """The AwsSolutions plugin report of a cloud assembly."""
    report = json.loads((assembly_dir / "validation-report.json").read_text())
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    return dict(plugin)


def test_cdk_json_makes_no_calls_home() -> None:
    """cdk.json turns off notices and CLI telemetry and names the app command."""
    config = cdk_json()
    assert config["notices"] is False
    assert config["context"]["cli-telemetry"] is False
    assert "app.py" in config["app"]


def test_cli_synth_works_offline_without_credentials(cli_assembly: Path) -> None:
    """`npx cdk synth` with the project's cdk.json writes the stack, its assets and manifest."""
    manifest = json.loads((cli_assembly / "manifest.json").read_text())
    assert manifest["artifacts"]["Holdfast"]["type"] == "aws:cloudformation:stack"
    assets = json.loads((cli_assembly / "Holdfast.assets.json").read_text())
    assert assets["files"], "the Lambda code asset is missing"
    assert assets["dockerImages"], "the worker image asset is missing"
    # Environment-agnostic: the same template on any machine, no account lookups.
    assert manifest["artifacts"]["Holdfast"]["environment"] == "aws://unknown-account/unknown-region"


def test_nag_has_no_unacknowledged_findings(cli_assembly: Path) -> None:
    """AwsSolutionsChecks passes; every accepted finding carries a real reason."""
    plugin = nag_report(cli_assembly)
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    acknowledged = plugin["suppressedViolations"]
    assert {v["ruleName"] for v in acknowledged} == EXPECTED_ACKNOWLEDGED
    for v in acknowledged:
        assert len(v["reason"]) >= 80, f"{v['ruleName']}: reason too thin: {v['reason']!r}"


def test_nag_passes_with_every_optional_branch(alt_assembly: Any, tmp_path: Path) -> None:
    """Provisioned table, public subnets, no tracing, no flow logs: still no open findings."""
    plugin = nag_report(Path(alt_assembly.directory))
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    rules = {v["ruleName"] for v in plugin["suppressedViolations"]}
    # Flow logs off is an operator's choice, acknowledged as such; tracing off removes the
    # sweeper's only wildcard, so that acknowledgement must not be there.
    assert "AwsSolutions-VPC7" in rules
    paths = {c["constructPath"] for v in plugin["suppressedViolations"]
             for c in v["violatingConstructs"]}
    assert not any(p.startswith("HoldfastAlt/Sweeper/") for p in paths)


def test_outputs_name_everything_an_operator_needs(template: Any) -> None:
    """Table name, queue URL, service name and dashboard URL are stack outputs."""
    outputs = template.to_json()["Outputs"]
    assert {"TableName", "QueueUrl", "ServiceName", "DashboardUrl", "ClusterName",
            "WorkerLogGroup", "RouterLogGroup", "SweeperLogGroup"} <= set(outputs)
    url = json.dumps(outputs["DashboardUrl"]["Value"])
    assert "console.aws.amazon.com/cloudwatch" in url and "#dashboards:name=" in url
