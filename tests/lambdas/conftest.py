"""Fixtures for the Lambda tests: a private queue, clients on the local AWS, a dead SQS."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.aws import client_config
from holdfast.core.boto import new_session
from holdfast.localaws import LocalAws
from holdfast.localaws.processes import free_port
from tests.lambdas.helpers import new_queue, new_table


@pytest.fixture
def queue_url(ddb_local: LocalAws) -> str:
    """A queue of this test's own on the local SQS."""
    return new_queue(ddb_local)


@pytest.fixture
def table(ddb_local: LocalAws) -> str:
    """A lease table of this test's own on DynamoDB Local (the sweeper reads the whole GSI)."""
    return new_table(ddb_local)



@pytest.fixture
def dead_sqs() -> Any:
    """An SQS client pointed at a loopback port nobody listens on (one attempt, no retries)."""
    return new_session().client(
        "sqs", endpoint_url=f"http://127.0.0.1:{free_port()}", region_name="us-east-1",
        aws_access_key_id="local", aws_secret_access_key="local",
        config=client_config(read_timeout=1.0, retries=1))
