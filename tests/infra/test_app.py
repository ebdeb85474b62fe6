"""The CDK app as a user runs it: `npx cdk synth` offline, cdk-nag clean, the promised outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from holdfast.infra.settings import Settings
from tests.infra.conftest import REPO, cdk_json, session_table_id

# Every finding we accept on purpose (see infra/nag.py); a new one must be reviewed here.
EXPECTED_ACKNOWLEDGED = {
    "AwsSolutions-SQS3",
    "AwsSolutions-IAM5[Resource::*]",
    "AwsSolutions-ECS2",
    # The per-session order queues (router sends, workers own theirs, the sweeper collects).
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:"
    "Holdfast-orders-*]",
}


def nag_report(assembly_dir: Path) -> dict[str, Any]:
    """The AwsSolutions plugin report of a cloud assembly."""
    report = json.loads((assembly_dir / "validation-report.json").read_text())
    (plugin,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    return dict(plugin)


def test_cdk_json_makes_no_calls_home() -> None:
    """cdk.json turns off notices, version reporting (no AWS::CDK::Metadata resource) and CLI
    telemetry, and names the app command."""
    config = cdk_json()
    assert config["notices"] is False
    # A CLI setting: as a context key ("aws:cdk:version-reporting") the CLI ignores it, and warns.
    assert config["versionReporting"] is False
    assert "aws:cdk:version-reporting" not in config["context"]
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


def test_nag_passes_with_every_optional_branch(alt_assembly: Path, cli_assembly: Path) -> None:
    """Provisioned table, public subnets, tracing, no flow logs: still no open findings."""
    plugin = nag_report(alt_assembly)
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    rules = {v["ruleName"] for v in plugin["suppressedViolations"]}
    # Flow logs off is an operator's choice, acknowledged as such; tracing on adds X-Ray's
    # wildcard to the sweeper and the worker task roles, acknowledged there.
    assert "AwsSolutions-VPC7" in rules
    paths = {c["constructPath"] for v in plugin["suppressedViolations"]
             for c in v["violatingConstructs"]}
    # The fleet is the stack's "Default" construct (left out of logical ids, not of paths).
    assert any(p.startswith("HoldfastAlt/Default/Sweeper/") for p in paths)
    assert any(p.startswith("HoldfastAlt/Default/Workers/Task/TaskRole/") for p in paths)
    default = nag_report(cli_assembly)  # tracing off (the default): no X-Ray wildcards
    star = [v for v in default["suppressedViolations"]
            if v["ruleName"] == "AwsSolutions-IAM5[Resource::*]"]
    star_paths = {c["constructPath"] for v in star for c in v["violatingConstructs"]}
    assert not any(p.startswith("Holdfast/Default/Workers/Task/TaskRole/") for p in star_paths)
    assert not any("xray" in v["reason"].lower() for v in star)


def test_resources_are_tagged_with_their_fleet(template_json: dict[str, Any],
                                             alt_template_json: dict[str, Any]) -> None:
    """The table, queues and service carry the holdfast:fleet tag of their fleet."""
    for tmpl, fleet in ((template_json, "holdfast"), (alt_template_json, "alt")):
        for rtype in ("AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::ECS::Service"):
            for res in tmpl["Resources"].values():
                if res["Type"] == rtype:
                    assert {"Key": "holdfast:fleet", "Value": fleet} in res["Properties"]["Tags"]


def test_outputs_name_everything_an_operator_needs(template: Any) -> None:
    """Both table names, queue URL, service name and dashboard URL are stack outputs."""
    outputs = template.to_json()["Outputs"]
    assert outputs["SessionTableName"]["Value"] == {"Ref": session_table_id(template.to_json())}
    assert {"TableName", "SessionTableName", "QueueUrl", "ServiceName", "DashboardUrl",
            "ClusterName", "WorkerLogGroup", "RouterLogGroup", "SweeperLogGroup",
            "TaskStoppedLogGroup", "RouterFailuresQueueUrl"} <= set(outputs)
    url = json.dumps(outputs["DashboardUrl"]["Value"])
    assert "console.aws.amazon.com/cloudwatch" in url and "#dashboards:name=" in url


def deploy_doc() -> str:
    """The docs' "Deploy to AWS" page (it was the README's section of that name)."""
    page = (REPO / "docs" / "operations" / "deploy.md").read_text()
    assert page.startswith("# Deploy to AWS")
    return page


def test_deploy_doc_matches_the_stack(template_json: dict[str, Any]) -> None:
    """The deploy docs name every setting and every stack output, and only real ones."""
    doc = deploy_doc()
    keys = {key for key, _, _ in Settings.describe()}
    assert [k for k in sorted(keys) if f"`{k}`" not in doc] == []
    documented = set(re.findall(r"^\| `(\w+)`", doc, re.MULTILINE))
    documented |= set(re.findall(r"^\| `\w+` / `(\w+)`", doc, re.MULTILINE))
    assert documented <= keys, f"documented but unknown: {documented - keys}"
    assert [o for o in template_json["Outputs"] if f"`{o}`" not in doc] == []


def test_deploy_doc_defaults_are_the_code_defaults() -> None:
    """Each default in the docs' settings table is the default the code uses."""
    defaults = {key: default for key, default, _ in Settings.describe()}
    rows = re.findall(r"^\| (`\w+`(?: / `\w+`)?) \| ([^|]+) \|", deploy_doc(), re.MULTILINE)
    assert rows
    for key_cell, default_cell in rows:
        keys = re.findall(r"`(\w+)`", key_cell)
        values = re.findall(r"`([^`]+)`", default_cell) or [default_cell.strip()]
        for key, shown in zip(keys, values, strict=True):
            code = defaults[key]
            expected = ("(none)" if code is None else str(code).lower()
                        if isinstance(code, bool) else ",".join(map(str, code))
                        if isinstance(code, tuple) else str(code))
            assert shown == expected, f"{key}: docs say {shown}, code says {expected}"
