"""The example's fleet: two workers running ``transcripts.handler:handle`` on the local AWS,
with the example's own segment table created there before any worker starts."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import boto3
import pytest

from holdfast.testing import FAST_TIMING, FleetOptions

EXAMPLE = Path(__file__).resolve().parents[1]
# In-process imports of the example's package (the workers get it through ``pythonpath``).
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))

from transcripts.store import TABLE_ENV, table_definition  # noqa: E402

HANDLER = "transcripts.handler:handle"


def ddb_client(env: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """A DynamoDB client on the fleet's local AWS (its endpoint and dummy credentials)."""
    # Its own session (not this process's environment, which may point elsewhere).
    return boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"]).client(
        "dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"])


def create_segment_table(env: Mapping[str, str]) -> dict[str, str]:
    """The setup hook: create the segment table; the workers find it in $TRANSCRIPTS_TABLE."""
    name = f"transcripts-{uuid.uuid4().hex[:6]}"
    client = ddb_client(env)
    client.create_table(**table_definition(name))
    client.get_waiter("table_exists").wait(TableName=name)
    return {TABLE_ENV: name}


@pytest.fixture(scope="session")
def holdfast_options() -> FleetOptions:
    """What ``holdfast_fleet`` runs for these tests: the example's handler and table."""
    # Checkpoints every 2 s (at 20 messages/s): a SIGKILL then replays up to ~40 messages,
    # so the failover test sees duplicates delivered and refused.
    return FleetOptions(handler=HANDLER, workers=2, pythonpath=(EXAMPLE,),
                        setup=create_segment_table,
                        timing=replace(FAST_TIMING, checkpoint_s=2.0))
