"""``holdfast task-stopped`` against DynamoDB Local: what it did, and its error exits."""

from __future__ import annotations

import pytest

from holdfast.core.schema import BACKSTOP_MS, SessionState
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.cli.helpers import run
from tests.conftest import client_for


def test_reports_a_worker_dead_and_releases_its_streams(
        ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 0, says it declared the session dead and how many streams it released."""
    ddb = client_for(ddb_local, "dynamodb")
    store = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=60_000,
                         skew_ms=1_000)
    session = store.start(unique_id, capacity=2)
    leases = LeaseStore(ddb, ddb_local.table, lease_ms=BACKSTOP_MS, skew_ms=1_000)
    for conn in (f"{unique_id}-a", f"{unique_id}-b"):
        assert create_stream(ddb, ddb_local.table, conn, "ws://127.0.0.1:9/x")
        leases.acquire(conn, session.owner)
    code, out, err = run(capsys, "task-stopped", unique_id, "--reason", "kernel OOM",
                         "--force")
    assert (code, err) == (0, "")
    assert out.strip() == f"{unique_id}: session declared dead, 2 streams released"
    item = store.get(unique_id)
    assert item is not None and item.state is SessionState.DEAD
    assert leases.get(f"{unique_id}-a").lease_owner is None  # type: ignore[union-attr]
    code, out, _ = run(capsys, "task-stopped", unique_id)
    assert code == 0 and "no longer alive, 0 streams released" in out


def test_a_worker_that_heartbeated_within_its_ttl_is_refused_without_force(
        ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A live session is not declared dead by an operator's report unless --force, and the
    refusal says what force risks; its streams stay with it (finding 4)."""
    ddb = client_for(ddb_local, "dynamodb")
    store = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=60_000,
                         skew_ms=1_000)
    session = store.start(unique_id, capacity=2)
    leases = LeaseStore(ddb, ddb_local.table, lease_ms=BACKSTOP_MS, skew_ms=1_000)
    assert create_stream(ddb, ddb_local.table, f"{unique_id}-a", "ws://127.0.0.1:9/x")
    leases.acquire(f"{unique_id}-a", session.owner)
    code, out, err = run(capsys, "task-stopped", unique_id)
    assert code == 2 and out == "" and "heartbeated" in err and "second deliverer" in err
    item = store.get(unique_id)
    assert item is not None and item.state is SessionState.ALIVE
    assert leases.get(f"{unique_id}-a").lease_owner == session.owner  # type: ignore[union-attr]


def test_an_unknown_worker_exits_1(aws_env: dict[str, str], unique_id: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No session of that id: exit 1 (an unknown id, as drain says it), nothing done, and why."""
    code, out, err = run(capsys, "task-stopped", unique_id)
    assert code == 1 and out == "" and "unknown worker" in err and "no session item" in err


def test_one_stream_released_is_said_in_the_singular(
        ddb_local: LocalAws, aws_env: dict[str, str], unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A worker holding one stream: "1 stream released"."""
    ddb = client_for(ddb_local, "dynamodb")
    session = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=60_000,
                           skew_ms=1_000).start(unique_id, capacity=2)
    assert create_stream(ddb, ddb_local.table, f"{unique_id}-a", "ws://127.0.0.1:9/x")
    LeaseStore(ddb, ddb_local.table, lease_ms=BACKSTOP_MS, skew_ms=1_000).acquire(
        f"{unique_id}-a", session.owner)
    code, out, _ = run(capsys, "task-stopped", unique_id, "--force")
    assert code == 0 and out.strip() == f"{unique_id}: session declared dead, 1 stream released"


def test_the_owner_form_is_refused_saying_what_to_type(
        aws_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`w1#<incarnation>` (the owner ls and status show) exits 2 naming the id to type."""
    code, _, err = run(capsys, "task-stopped", "w1#031ad8a24a3c")
    assert code == 2 and "without its '#<incarnation>' suffix: w1" in err


@pytest.mark.parametrize("bad", ["a/b", "has space", ""])
def test_a_bad_id_exits_2(aws_env: dict[str, str], bad: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    """An id that cannot be a task id is refused before anything is read."""
    code, _, err = run(capsys, "task-stopped", bad)
    assert code == 2 and "invalid worker id" in err


def test_missing_tables_in_the_environment_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Without HOLDFAST_SESSION_TABLE it says which variable to set."""
    monkeypatch.setenv("HOLDFAST_TABLE", "t")
    monkeypatch.delenv("HOLDFAST_SESSION_TABLE", raising=False)
    code, _, err = run(capsys, "task-stopped", "w1")
    assert code == 2 and "HOLDFAST_SESSION_TABLE is not set" in err
