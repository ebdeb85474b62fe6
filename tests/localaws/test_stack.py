"""Tests of the embedded local AWS: it starts, serves, writes its env, and leaves nothing behind."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from holdfast.core.schema import GSI_NAME, OWNER_INDEX_NAME
from holdfast.localaws import LocalAws, LocalAwsError
from holdfast.localaws import stack as stack_module
from holdfast.localaws.__main__ import main as localaws_main


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone once reaped, which stop() does.
    return True


def test_table_and_queues_match_schema(ddb_local: LocalAws) -> None:
    """The table has both GSIs and a NEW_AND_OLD_IMAGES stream, the session table exists; the
    queue redrives to the DLQ."""
    env = ddb_local.env()
    ddb = boto3.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"],
                       region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    table = ddb.describe_table(TableName=env["HOLDFAST_TABLE"])["Table"]
    assert sorted(g["IndexName"] for g in table["GlobalSecondaryIndexes"]) == sorted(
        [GSI_NAME, OWNER_INDEX_NAME])
    sessions = ddb.describe_table(TableName=env["HOLDFAST_SESSION_TABLE"])["Table"]
    assert [k["AttributeName"] for k in sessions["KeySchema"]] == ["Pk"]
    assert table["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    sqs = boto3.client("sqs", endpoint_url=env["AWS_ENDPOINT_URL_SQS"], region_name="us-east-1",
                       aws_access_key_id="x", aws_secret_access_key="x")
    attrs = sqs.get_queue_attributes(QueueUrl=env["HOLDFAST_QUEUE_URL"],
                                     AttributeNames=["RedrivePolicy"])["Attributes"]
    assert "holdfast-nudges-dlq" in attrs["RedrivePolicy"]
    assert env["HOLDFAST_RENEW_MODE"] == "batch"


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    """Stopping the local AWS ends every child process it started."""
    aws = LocalAws(backend="moto", workdir=tmp_path).start()
    pids = [c.proc.pid for c in aws.children]
    assert pids and all(pid_alive(p) for p in pids)
    aws.stop()
    assert not any(pid_alive(p) for p in pids)


def test_env_file_is_sourceable(tmp_path: Path) -> None:
    """write_env writes KEY=value lines a shell (and python -m worker) can read."""
    with LocalAws(backend="moto", workdir=tmp_path) as aws:
        path = tmp_path / "env"
        aws.write_env(path)
        out = subprocess.run(["bash", "-c", f"set -a; . {path}; echo $HOLDFAST_QUEUE_URL"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == aws.queue_url
        assert aws.env()["HOLDFAST_RENEW_MODE"] == "single"


def test_falls_back_to_moto_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """Without Java, 'auto' serves DynamoDB from moto and says so."""
    monkeypatch.setattr(stack_module.shutil, "which", lambda _name: None)
    with caplog.at_level(logging.WARNING), LocalAws(workdir=tmp_path) as aws:
        assert aws.backend == "moto"
        assert aws.dynamodb_url == aws.sqs_url
    assert "falling back to moto" in caplog.text


def test_explicit_dynamodb_local_without_java_fails_clearly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking for DynamoDB Local without Java is an error naming what is missing."""
    monkeypatch.setattr(stack_module.shutil, "which", lambda _name: None)
    with pytest.raises(LocalAwsError, match="java"):
        LocalAws(backend="dynamodb-local", workdir=tmp_path).start()


def test_localaws_that_cannot_start_exits_3_as_holdfast_up_does(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`holdfast localaws` without Java, DynamoDB Local asked for: the error, exit 3 (AWS or
    configuration, as `holdfast up`'s), not 1 (an operation failed)."""
    monkeypatch.setattr(stack_module.shutil, "which", lambda _name: None)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # not the test process's handlers
    assert localaws_main(["--backend", "dynamodb-local", "--once"]) == 3
    assert "error:" in capsys.readouterr().err


def test_a_java_too_old_for_dynamodb_local_is_found_out_before_it_is_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A Java 11 on PATH (Debian 11's and Ubuntu 22.04's default): 'auto' falls back to moto
    saying why; an explicit DynamoDB Local is refused in one line naming the version (it was
    run, and failed with UnsupportedClassVersionError)."""
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.21" 2023-10-17\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setattr(stack_module.shutil, "which", lambda _name: str(java))
    with caplog.at_level(logging.WARNING), LocalAws(workdir=tmp_path / "auto") as aws:
        assert aws.backend == "moto"
    assert "is Java 11, DynamoDB Local needs 17 or later" in caplog.text
    with pytest.raises(LocalAwsError, match=r"needs Java 17 or later: .* is Java 11"):
        LocalAws(backend="dynamodb-local", workdir=tmp_path / "explicit").start()


def test_a_proxy_in_the_environment_is_not_used_for_the_local_endpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY set and loopback not in NO_PROXY (a user behind a corporate proxy): the
    local AWS starts, and the environment it gives the fleet's processes keeps loopback off
    the proxy too (the calls went to the proxy, and the fleet failed with a traceback)."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "corp.example")
    monkeypatch.delenv("no_proxy", raising=False)
    with LocalAws(backend="moto", workdir=tmp_path) as aws:
        assert aws.queue_url
        no_proxy = aws.env()["no_proxy"].split(",")
    assert no_proxy[0] == "corp.example" and "127.0.0.1" in no_proxy


def test_a_shell_that_ignores_configured_endpoints_still_reaches_the_local_aws(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true in the user's shell: a client built in the
    environment the fleet's processes get still goes to the local endpoints (it went to AWS
    with the dummy credentials)."""
    from holdfast.core.boto import new_session

    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    for key, value in LocalAws.placeholder_env().items():
        monkeypatch.setenv(key, value)
    client = new_session().client("dynamodb")
    assert client.meta.endpoint_url == "http://127.0.0.1:9"


def test_command_once_prints_environment(tmp_path: Path) -> None:
    """`python -m holdfast.localaws --once` prints exports and writes the env file."""
    env_file = tmp_path / "local.env"
    out = subprocess.run([sys.executable, "-m", "holdfast.localaws", "--backend", "moto",
                          "--once", "--env-file", str(env_file)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:" in out
    assert "HOLDFAST_TABLE=holdfast-leases" in env_file.read_text()


def test_command_removes_its_env_file_when_it_stops(tmp_path: Path) -> None:
    """`python -m holdfast.localaws --env-file F` until SIGTERM: an earlier run's F is replaced
    by this run's, and F is gone once it stops (a script waiting for it read dead ports)."""
    env_file = tmp_path / "local.env"
    env_file.write_text("HOLDFAST_TABLE=from-an-earlier-run\n")
    proc = subprocess.Popen([sys.executable, "-m", "holdfast.localaws", "--backend", "moto",
                             "--env-file", str(env_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("# environment written"):
                break
        assert "HOLDFAST_TABLE=holdfast-leases" in env_file.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "local AWS stopped" in out
    assert not env_file.exists()
