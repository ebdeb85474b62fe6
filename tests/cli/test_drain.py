"""``holdfast drain`` against DynamoDB Local and moto SQS: the flag, the message, the exits."""

from __future__ import annotations

from pathlib import Path

import pytest

from holdfast.core import names
from holdfast.core.directives import drain_body, parse_inbox_body
from holdfast.core.orders import order_queue_name, prefix_for
from holdfast.core.sessions import Session, SessionStore
from holdfast.localaws import LocalAws
from tests.cli.helpers import run
from tests.conftest import client_for


def store_of(aws: LocalAws) -> SessionStore:
    return SessionStore(client_for(aws, "dynamodb"), aws.session_table, aws.table,
                        ttl_ms=60_000, skew_ms=1_000)


def live(store: SessionStore, worker_id: str, held: int) -> Session:
    session = store.start(worker_id, 10)
    return store.heartbeat_full(session, held=held, capacity=10).session


def order_queue(aws: LocalAws, owner: str) -> str:
    url: str = client_for(aws, "sqs").create_queue(
        QueueName=order_queue_name(prefix_for(aws.table), owner))["QueueUrl"]
    return url


def bodies(aws: LocalAws, url: str) -> list[str]:
    got = client_for(aws, "sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                 WaitTimeSeconds=1)
    return [m["Body"] for m in got.get("Messages", [])]


def test_drain_sets_the_flag_and_tells_the_order_queue(
        ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 0: the session is draining, its queue has the drain message, the output says so."""
    store = store_of(ddb_local)
    session = live(store, unique_id, held=3)
    url = order_queue(ddb_local, session.owner)
    code, out, err = run(capsys, "drain", unique_id)
    assert (code, err) == (0, "")
    assert out.strip() == (f"{session.owner}: draining: it sheds its streams and claims none "
                           "(holds 3 streams now; sent to its order queue)")
    item = store.get(unique_id)
    assert item is not None and item.draining
    assert bodies(ddb_local, url) == [drain_body(session.owner, True)]
    assert parse_inbox_body(drain_body(session.owner, True), session.owner) is True


def test_cancel_clears_the_flag(ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """--cancel: the flag is gone and the queue is told to claim again."""
    store = store_of(ddb_local)
    session = live(store, unique_id, held=0)
    assert store.set_draining(session.owner, True)
    url = order_queue(ddb_local, session.owner)
    code, out, _ = run(capsys, "drain", unique_id, "--cancel")
    assert code == 0 and "drain cancelled" in out
    item = store.get(unique_id)
    assert item is not None and not item.draining
    assert bodies(ddb_local, url) == [drain_body(session.owner, False)]


def test_without_an_order_queue_the_flag_is_still_set(
        ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No queue for the session (or no prefix named): exit 0, the heartbeat carries the flag;
    its one stream is said in the singular."""
    store = store_of(ddb_local)
    live(store, unique_id, held=1)
    code, out, err = run(capsys, "drain", unique_id)
    assert (code, err) == (0, "") and "next heartbeat" in out and "(holds 1 stream now;" in out
    item = store.get(unique_id)
    assert item is not None and item.draining


def test_a_worker_without_a_live_session_exits_1(
        ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown or ended: a clear error, exit 1, nothing written."""
    code, _, err = run(capsys, "drain", unique_id)
    assert code == 1 and "has no live session (no session item)" in err
    store = store_of(ddb_local)
    assert store.end(live(store, unique_id, held=2))
    code, _, err = run(capsys, "drain", unique_id)
    assert code == 1 and "has no live session (its session is ENDED)" in err
    item = store.get(unique_id)
    assert item is not None and not item.draining


@pytest.mark.parametrize("bad", ["has space", "", "x" * 300])
def test_a_bad_id_exits_2(aws_env: dict[str, str], bad: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    """An id that cannot be a worker id is refused before anything is read."""
    code, _, err = run(capsys, "drain", bad)
    assert code == 2 and "invalid worker id" in err


def test_the_owner_form_is_refused_saying_what_to_type(
        aws_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`w1#<incarnation>` (the owner ls and status show) exits 2 naming the id to type."""
    code, _, err = run(capsys, "drain", "w1#031ad8a24a3c")
    assert code == 2 and "give the worker id without its '#<incarnation>' suffix: w1" in err


def test_no_session_table_in_the_environment_exits_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without HOLDFAST_SESSION_TABLE it says which variable to set."""
    monkeypatch.delenv(names.ENV_SESSION_TABLE, raising=False)
    code, _, err = run(capsys, "drain", "w1")
    assert code == 2 and "HOLDFAST_SESSION_TABLE is not set" in err


def test_unreachable_dynamodb_exits_3(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """DynamoDB not answering is an AWS problem (exit 3), not a missing session."""
    from holdfast.localaws.processes import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{free_port()}")
    code, _, err = run(capsys, "drain", "w1")
    assert code == 3 and "cannot reach DynamoDB" in err


def test_no_region_exits_3(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No AWS region anywhere: exit 3 naming the region variable, not a traceback."""
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    code, _, err = run(capsys, "drain", "w1")
    assert code == 3 and "AWS_REGION" in err
