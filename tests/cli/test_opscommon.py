"""What every operator command shares, against DynamoDB Local: its exit codes for a missing,
unnamed or unreachable table and for absent credentials (run here through ``ls`` and
``status``)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.localaws.processes import free_port
from tests.cli.helpers import run


def test_missing_table_exits_3(aws_env: dict[str, str], unique_id: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """A table that does not exist is a configuration error with a hint."""
    code, _, err = run(capsys, "ls", "--table", f"no-such-{unique_id}")
    assert code == 3 and "not found" in err and "--table" in err


def test_no_table_named_exits_2(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """Without --table or HOLDFAST_TABLE the command says how to name one."""
    monkeypatch.delenv("HOLDFAST_TABLE")
    code, _, err = run(capsys, "ls")
    assert code == 2 and "HOLDFAST_TABLE" in err


def test_unreachable_endpoint_exits_3(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening at the endpoint: exit 3 naming the endpoint."""
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
    code, _, err = run(capsys, "status")
    assert code == 3 and url in err


def test_an_endpoints_credentials_are_not_printed(
        aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An endpoint with user info (a proxy's credentials) that cannot be reached: exit 3
    naming its host and port, never its password."""
    port = free_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://admin:hunter2secret@127.0.0.1:{port}")
    code, _, err = run(capsys, "ls")
    assert code == 3 and f"127.0.0.1:{port}" in err and "hunter2secret" not in err, err


def test_no_credentials_exits_3(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """No credentials anywhere: exit 3 with botocore's message, not a traceback."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, _, err = run(capsys, "ls")
    assert code == 3 and "credentials" in err.lower()


@pytest.mark.parametrize("command", ["ls", "status"])
def test_no_region_exits_3_and_no_table_still_2(
        aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """No AWS region anywhere: exit 3 naming the region variable, not botocore's traceback;
    with no table named either, the usage error (exit 2) comes first."""
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    code, _, err = run(capsys, command)
    assert code == 3 and "AWS_REGION" in err and "Traceback" not in err
    monkeypatch.delenv("HOLDFAST_TABLE")
    code, _, err = run(capsys, command)
    assert code == 2 and "HOLDFAST_TABLE" in err
    # How to get one locally: `holdfast up` writes no env file unless told to.
    assert "holdfast up --env-file" in err


@pytest.mark.parametrize("name", ["bad name!", "ab", "x" * 256])
def test_a_table_name_dynamodb_would_refuse_is_a_usage_error(
        aws_env: dict[str, str], capsys: pytest.CaptureFixture[str], name: str) -> None:
    """--table that cannot be a DynamoDB table's name: exit 2 (a usage error) saying the
    rule, before any call (it was DynamoDB's validation error, exit 1)."""
    code, _, err = run(capsys, "ls", "--table", name)
    assert code == 2 and "not a DynamoDB table name" in err, err
