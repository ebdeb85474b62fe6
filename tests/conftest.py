"""Shared fixtures: one embedded local AWS per backend for the whole session.

Tests share the servers (starting DynamoDB Local costs ~3 s) but never share items: each test
names its connections with ``unique_id``. ``TIMEOUT_SCALE`` stretches every wait on a slow CI.
Under ``-n N --dist loadgroup`` (``make test``), ``tests/scheduling.py`` decides which tests
share a worker and which start first.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from holdfast.core import aws as core_aws
from holdfast.core.boto import new_session
from holdfast.core.schema import session_table_definition, table_definition
from holdfast.localaws import LocalAws
from tests.scheduling import (
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)

# The xdist hooks (tests/scheduling.py) are re-exported so that pytest finds them here.
__all__ = ["TIMEOUT_SCALE", "client_for", "own_tables", "pytest_collection_modifyitems",
           "pytest_configure", "pytest_unconfigure", "pytest_xdist_make_scheduler"]

TIMEOUT_SCALE = float(os.environ.get("HOLDFAST_TEST_TIMEOUT_SCALE", "1"))
# The suite starts a local runner dozens of times; each sandbox is a process importing boto3
# and Powertools (~1 s of CPU each on this 2-core box). One sandbox, the deployed mapping's
# own default, unless a test asks for more: the runner's tests of concurrent batches do.
os.environ.setdefault("HOLDFAST_RUNNER_PARALLELIZATION", "1")
# Every DynamoDB Local the suite starts (a dozen: per worker, per fleet, per soak) on the JVM's
# client compiler only: the optimising compiler's threads pay off after minutes of load, which
# a test's instance rarely lives, and the suite is CPU-bound (the throttle scenario: 19 s of
# CPU against 25 s; the whole suite 15.4 against 19.2 CPU-minutes in consecutive runs). The
# fleet ``holdfast up`` starts for a user or a bench keeps the JVM's defaults
# (``holdfast.localaws.stack``). The JVM reads this variable itself.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

# No per-example deadline: the first example pays for imports and warm-up on a loaded 2-core box.
# The suite's examples are the same every run (derandomize): CI runs it once on a clean clone,
# where a rare counterexample drawn by chance would fail a change that has nothing to do with
# it. HYPOTHESIS_PROFILE=explore draws new ones (and prints how to replay a failure).
settings.register_profile("holdfast", deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("explore", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "holdfast"))


@pytest.fixture(scope="session")
def ddb_local() -> Iterator[LocalAws]:
    """DynamoDB Local (Amazon's implementation) + moto SQS."""
    with LocalAws(backend="dynamodb-local") as aws:
        yield aws


@pytest.fixture(scope="session")
def moto_local() -> Iterator[LocalAws]:
    """moto for both DynamoDB and SQS."""
    with LocalAws(backend="moto") as aws:
        yield aws


@pytest.fixture(params=["dynamodb-local", "moto"])
def any_aws(request: pytest.FixtureRequest) -> LocalAws:
    """Each backend in turn: the protocol must not depend on one emulator's quirks."""
    aws: LocalAws = request.getfixturevalue(
        "ddb_local" if request.param == "dynamodb-local" else "moto_local")
    return aws


def client_for(aws: LocalAws, service: str) -> Any:
    """A boto3 client pointed at ``aws`` without touching the process environment."""
    env = aws.env()
    url = env["AWS_ENDPOINT_URL_SQS"] if service == "sqs" else env["AWS_ENDPOINT_URL_DYNAMODB"]
    return new_session().client(
        service, endpoint_url=url, region_name=env["AWS_REGION"],
        aws_access_key_id="local", aws_secret_access_key="local")


def own_tables(aws: LocalAws) -> tuple[str, str]:
    """A new lease table and session table (names), for a test that reads a whole table: the
    shared ones hold what earlier tests on the same worker left, in whatever order they ran."""
    ddb = client_for(aws, "dynamodb")
    name = f"own-{uuid.uuid4().hex[:10]}"
    ddb.create_table(**table_definition(name))
    ddb.create_table(**session_table_definition(f"{name}-sessions"))
    return name, f"{name}-sessions"


@pytest.fixture
def ddb(ddb_local: LocalAws) -> Any:
    """A DynamoDB client on DynamoDB Local."""
    return client_for(ddb_local, "dynamodb")


@pytest.fixture
def sqs(ddb_local: LocalAws) -> Any:
    """An SQS client on the local AWS's moto server."""
    return client_for(ddb_local, "sqs")


@pytest.fixture
def aws_env(ddb_local: LocalAws, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point this process's boto3 at DynamoDB Local for one test (standard AWS variables)."""
    env = ddb_local.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def unique_id() -> str:
    """A connection-id prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def no_throttle_left_over() -> Iterator[None]:
    """Each test starts with no throttled call on record: the mark is process-wide (the
    heartbeat's pace and the balancer's pause read it), and a test process runs many tests."""
    core_aws._THROTTLED_AT_S.clear()
    yield
