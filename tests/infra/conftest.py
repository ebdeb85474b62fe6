"""Shared fixtures for the CDK tests: synthesize once, assert many times.

``cli_assembly`` runs the real CLI (``npx cdk synth``) with the project's ``cdk.json``, no AWS
credentials and no network calls home; every template test reads its output. ``alt_assembly``
is a second CLI synth, started at the same time, with every non-default branch of the
settings turned on through ``-c key=value`` (so the string form of every value is exercised).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STACK = "Holdfast"
ALT_STACK = "HoldfastAlt"
# A cold CLI synth takes ~15-25 s on a 2-core box; the limit only catches a hang.
SYNTH_TIMEOUT_S = 300


def cdk_json() -> dict[str, Any]:
    """The project's cdk.json."""
    return dict(json.loads((REPO / "cdk.json").read_text()))


def cli_env() -> dict[str, str]:
    """The environment of a machine with no AWS credentials and no telemetry."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "CDK_")) and k != "JSII_RUNTIME"}
    env.update({
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        # The venv's python first, as `make test` has it.
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    return env


def resources(template: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource, for every resource of ``rtype``."""
    return {k: v for k, v in template["Resources"].items() if v["Type"] == rtype}


def one_resource(template: dict[str, Any], rtype: str) -> dict[str, Any]:
    """The only resource of ``rtype`` (fails if there are zero or several)."""
    found = list(resources(template, rtype).values())
    assert len(found) == 1, f"expected one {rtype}, found {len(found)}"
    return found[0]


def logical_id(template: dict[str, Any], rtype: str, prefix: str) -> str:
    """The logical id of the only ``rtype`` resource whose id starts with ``prefix`` (the
    construct path, e.g. ``LeasesTable`` for ``Leases/Table``)."""
    found = [k for k in resources(template, rtype) if k.startswith(prefix)]
    assert len(found) == 1, f"expected one {rtype} named {prefix}*, found {found}"
    return found[0]


def lease_table_id(template: dict[str, Any]) -> str:
    """Logical id of the lease table."""
    return logical_id(template, "AWS::DynamoDB::Table", "LeasesTable")


def session_table_id(template: dict[str, Any]) -> str:
    """Logical id of the session table."""
    return logical_id(template, "AWS::DynamoDB::Table", "SessionsTable")


def scalable_targets(template_json: dict[str, Any], table_id: str) -> dict[tuple[str, str], Any]:
    """(index name or "", scalable dimension) -> properties, for one table's DynamoDB targets."""
    out: dict[tuple[str, str], Any] = {}
    for target in resources(template_json,
                            "AWS::ApplicationAutoScaling::ScalableTarget").values():
        props = target["Properties"]
        if props["ServiceNamespace"] != "dynamodb":
            continue
        _, parts = props["ResourceId"]["Fn::Join"]
        if parts[1] != {"Ref": table_id}:
            continue
        index = parts[2].removeprefix("/index/") if len(parts) > 2 else ""
        out[(index, props["ScalableDimension"])] = props
    return out


class SynthJob:
    """One `npx cdk synth` running in the background, into its own output directory."""

    def __init__(self, out: Path, context: dict[str, Any]) -> None:
        self.out = out
        args = [f"--context={k}={v}" for k, v in context.items()]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            ["npx", "--no", "cdk", "synth", "--quiet", "--output", str(out), *args],
            cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)

    def wait(self) -> Path:
        """The cloud assembly directory once the synth succeeded (test failure otherwise)."""
        try:
            stdout, stderr = self.proc.communicate(timeout=SYNTH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            pytest.fail(f"cdk synth into {self.out} hung for {SYNTH_TIMEOUT_S}s")
        elapsed = time.monotonic() - self.started
        if self.proc.returncode != 0:
            pytest.fail(f"cdk synth failed ({self.proc.returncode}) after {elapsed:.1f}s:\n"
                        f"{stdout[-4000:]}\n{stderr[-8000:]}")
        return self.out


@pytest.fixture(scope="session")
def synth_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SynthJob]]:
    """Both synths (defaults and ``ALT_CONTEXT``) started at once: two cores, half the wait."""
    if shutil.which("npx") is None or not (REPO / "node_modules" / ".bin" / "cdk").exists():
        pytest.fail("the CDK CLI is missing: run `npm install` (make deps) first")
    jobs = {"main": SynthJob(tmp_path_factory.mktemp("cdk.out"), {}),
            "alt": SynthJob(tmp_path_factory.mktemp("alt.out"), ALT_CONTEXT)}
    yield jobs
    for job in jobs.values():
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.communicate()


@pytest.fixture(scope="session")
def cli_assembly(synth_jobs: dict[str, SynthJob]) -> Path:
    """`npx cdk synth` with the project's cdk.json: the cloud assembly directory."""
    return synth_jobs["main"].wait()


@pytest.fixture(scope="session")
def alt_assembly(synth_jobs: dict[str, SynthJob]) -> Path:
    """`npx cdk synth -c ...` with every non-default branch on: the assembly directory."""
    return synth_jobs["alt"].wait()


@pytest.fixture(scope="session")
def template_json(cli_assembly: Path) -> dict[str, Any]:
    """The synthesized CloudFormation template as a dict."""
    return dict(json.loads((cli_assembly / f"{STACK}.template.json").read_text()))


@pytest.fixture(scope="session")
def template(template_json: dict[str, Any]) -> Any:
    """The same template for ``aws_cdk.assertions``."""
    from aws_cdk.assertions import Template

    return Template.from_json(template_json)


# Every non-default branch at once, so one extra synth covers them all.
ALT_CONTEXT: dict[str, Any] = {
    "stackName": ALT_STACK,
    "fleetName": "alt",
    "tableBilling": "provisioned",
    "tableReadMin": "2",
    "tableReadMax": "20",
    "tableWriteMin": "3",
    "tableWriteMax": "30",
    "tableName": "alt-leases",
    "deletionProtection": "false",
    "removalPolicy": "destroy",
    "workerSubnets": "public",
    "vpcFlowLogs": "false",
    "tracing": "xray",  # off by default: on is the branch to cover
    "sweeperReserveConcurrency": "false",
    "alarmEmail": "ops@example.com",
    "workerImage": "public.ecr.aws/example/holdfast-worker:1.0",
    "workerArchitecture": "x86_64",
    "handler": "myapp.handlers:on_message",
    "allowedHosts": "feeds.example.com",
    "upstreamPorts": "8443,9000",
    "routerBatchingWindowSeconds": "2",
    "logRetentionDays": "7",
}


@pytest.fixture(scope="session")
def alt_template_json(alt_assembly: Path) -> dict[str, Any]:
    """The alternate template as a dict."""
    return dict(json.loads((alt_assembly / f"{ALT_STACK}.template.json").read_text()))


@pytest.fixture(scope="session")
def alt_template(alt_template_json: dict[str, Any]) -> Any:
    """The alternate template for ``aws_cdk.assertions``."""
    from aws_cdk.assertions import Template

    return Template.from_json(alt_template_json)
