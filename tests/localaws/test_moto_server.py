"""Tests of the local fleet's moto server: the dispatch it remembers, the retention it keeps."""

from __future__ import annotations

import time
from typing import Any

import pytest

from holdfast.localaws import LocalAws
from holdfast.localaws.moto_server import dispatch_key, install

SIGNED_SQS = ("AWS4-HMAC-SHA256 Credential=x/20261205/us-east-1/sqs/aws4_request, "
              "SignedHeaders=host, Signature=abc")


def environ(auth: str = SIGNED_SQS, target: str = "AmazonSQS.ReceiveMessage",
            path: str = "/") -> dict[str, Any]:
    return {"HTTP_AUTHORIZATION": auth, "HTTP_X_AMZ_TARGET": target, "PATH_INFO": path}


def test_a_signed_request_to_a_served_service_has_a_dispatch_key() -> None:
    """SQS and DynamoDB requests are keyed by service, region and target prefix (DynamoDB and
    its Streams apart); unsigned, moto-api and other services' requests are left to moto."""
    assert dispatch_key(environ()) == ("sqs", "us-east-1", "AmazonSQS")
    ddb = SIGNED_SQS.replace("/sqs/", "/dynamodb/")
    assert dispatch_key(environ(ddb, "DynamoDB_20120810.PutItem")) != dispatch_key(
        environ(ddb, "DynamoDBStreams_20120810.GetRecords"))
    assert dispatch_key(environ(auth="")) is None
    assert dispatch_key(environ(path="/moto-api/reset")) is None
    assert dispatch_key(environ(SIGNED_SQS.replace("/sqs/", "/s3/"))) is None


def test_the_dispatcher_asks_moto_once_per_signed_service(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's dispatch (a directory listing and every service's URL patterns, under one lock)
    runs once per service, not once per request."""
    assert "dispatch" in install()
    import moto.server
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    asked: list[str] = []
    original = DomainDispatcherApplication.get_application

    def counting(self: Any, env: dict[str, Any]) -> Any:
        asked.append(env["HTTP_X_AMZ_TARGET"])
        return original(self, env)

    monkeypatch.setattr(DomainDispatcherApplication, "get_application", counting)
    app = moto.server.DomainDispatcherApplication(moto.server.create_backend_app)
    first = app.get_application(environ())
    assert app.get_application(environ(target="AmazonSQS.SendMessage")) is first
    app.get_application(environ(auth=""))
    app.get_application(environ(auth=""))
    # The signed pair once; each unsigned request (not keyed) is dispatched by moto itself.
    assert asked == ["AmazonSQS.ReceiveMessage", "AmazonSQS.ReceiveMessage",
                     "AmazonSQS.ReceiveMessage"]


def test_the_retention_check_still_drops_expired_messages() -> None:
    """A message older than its queue's retention period is not delivered; a fresh one is."""
    assert "retention" in install()
    from moto.sqs.models import Message, SQSBackend

    backend = SQSBackend("us-east-1", "123456789012")
    backend.create_queue("q", tags=None, MessageRetentionPeriod="60")
    fresh = Message("m1", "body", {})
    old = Message("m2", "body", {})
    fresh.sent_timestamp = int(time.time() * 1000)
    old.sent_timestamp = int((time.time() - 61) * 1000)
    assert backend.is_message_valid_based_on_retention_period("q", fresh)
    assert not backend.is_message_valid_based_on_retention_period("q", old)


def test_the_local_stack_runs_moto_patched(ddb_local: LocalAws, sqs: Any) -> None:
    """The stack's moto is this module's, with every patch applied, and answers SQS."""
    url = sqs.create_queue(QueueName=f"patched-{time.time_ns()}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in got] == ["hello"]
    log = (ddb_local.workdir / "moto.log").read_text()
    assert "holdfast moto_server: patched dispatch, retention, clock\n" in log
