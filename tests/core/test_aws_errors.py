"""holdfast.core.aws.call: a throttled answer is noted for the process (the heartbeat's cue)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from holdfast.chaos.proxy import FaultProxy
from holdfast.core import aws
from holdfast.core.boto import new_session
from holdfast.core.exceptions import StoreUnavailable


def _refuse(code: str) -> object:
    raise ClientError({"Error": {"Code": code, "Message": code}}, "UpdateItem")


def test_a_throttled_call_is_noted_and_other_errors_are_not() -> None:
    """ThrottlingException marks the process as throttled now; an internal error does not."""
    aws._THROTTLED_AT_S.clear()
    with pytest.raises(StoreUnavailable):
        aws.call("op", _refuse, code="InternalServerError")
    assert aws.throttled_at_s() is None
    with pytest.raises(StoreUnavailable):
        aws.call("op", _refuse, code="ThrottlingException")
    assert aws.throttled_at_s() is not None
    aws._THROTTLED_AT_S.clear()


def test_a_throttle_botocore_retries_itself_is_noted_too() -> None:
    """The clients' retry hook notes every throttled answer, also one a retry then hides."""
    aws._THROTTLED_AT_S.clear()
    aws._note_throttled_answer(response=(None, {"Error": {"Code": "InternalServerError"}}))
    aws._note_throttled_answer(response=None, attempts=2)  # a connection error: no answer
    assert aws.throttled_at_s() is None
    aws._note_throttled_answer(response=(None, {"Error": {"Code": "ThrottlingException"}}))
    assert aws.throttled_at_s() is not None
    aws._THROTTLED_AT_S.clear()


class _Throttling(BaseHTTPRequestHandler):
    """Answers every DynamoDB call as throttled."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                           "message": "slow down"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_client_notes_the_throttles_its_retries_hide(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real client's retry hook notes a throttled HTTP answer before any error is raised."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Throttling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    aws._THROTTLED_AT_S.clear()
    client = aws.dynamodb_client(Config(retries={"mode": "standard", "max_attempts": 1}))
    try:
        with pytest.raises(ClientError):
            client.get_item(TableName="t", Key={"Pk": {"S": "x"}})
        assert aws.throttled_at_s() is not None
    finally:
        server.shutdown()
        aws._THROTTLED_AT_S.clear()


@pytest.mark.parametrize("retries", [0, 2])
def test_client_config_retries_are_the_attempts_after_the_first(retries: int) -> None:
    """``client_config(retries=N)`` sends a call refused as throttled N + 1 times, so 0 is one
    attempt (the session heartbeat's client: botocore's own ``max_attempts`` counts retries,
    and the heartbeat's one attempt was two, up to a second apart)."""
    with FaultProxy("http://127.0.0.1:9") as proxy:  # nothing behind it: refusals only
        proxy.inject("throttle", 30)
        client = new_session().client(
            "dynamodb", endpoint_url=proxy.url, region_name="us-east-1",
            aws_access_key_id="x", aws_secret_access_key="x",
            config=aws.client_config(read_timeout=1.0, retries=retries))
        with pytest.raises(ClientError):
            client.update_item(TableName="abc", Key={"Pk": {"S": "x"}},
                               UpdateExpression="SET a = :a",
                               ExpressionAttributeValues={":a": {"S": "1"}})
        assert proxy.counts["UpdateItem"] == retries + 1


def test_a_calls_worst_case_counts_every_attempt_and_the_back_off() -> None:
    """Attempts x (connect + read timeout) plus botocore's capped back-off between them: what
    a caller with a deadline keeps in hand."""
    assert aws.worst_call_ms(aws.client_config(read_timeout=3.0, retries=0)) == 5_000
    assert aws.worst_call_ms(aws.client_config(read_timeout=3.0, retries=1)) == 2 * 5_000 + 2_000
    assert aws.worst_call_ms(aws.client_config(read_timeout=3.0, retries=2)) == 3 * 5_000 + 6_000
