"""The operator commands against DynamoDB Local, including their error paths and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from holdfast.cli.main import main
from holdfast.core.names import ENV_ORDERS_QUEUE_PREFIX
from holdfast.core.orders import prefix_for
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.localaws import LocalAws
from holdfast.localaws.processes import free_port
from tests.conftest import client_for, own_tables


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ls_json(capsys: pytest.CaptureFixture[str], prefix: str) -> dict[str, dict[str, Any]]:
    code, out, _ = run(capsys, "ls", "--json")
    assert code == 0
    return {s["id"]: s for s in json.loads(out)["streams"] if s["id"].startswith(prefix)}


def test_start_stop_rm_round_trip(aws_env: dict[str, str], unique_id: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """start inserts a STARTED unowned item, stop sets STOPPED, rm deletes it; each exits 0."""
    sid = f"{unique_id}-a"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/a")[0] == 0
    row = ls_json(capsys, unique_id)[sid]
    assert (row["desired_state"], row["owner"], row["last_seq"]) == ("STARTED", None, None)
    assert run(capsys, "stop", sid)[0] == 0
    assert ls_json(capsys, unique_id)[sid]["desired_state"] == "STOPPED"
    assert run(capsys, "rm", sid)[0] == 0
    assert sid not in ls_json(capsys, unique_id)


def test_rm_of_a_held_stream_stops_it_and_waits_for_its_release(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rm of a held stream sets it STOPPED and deletes it only once released (here no holder
    lets go: it fails after --wait, the item kept); --force deletes it at once."""
    sid = f"{unique_id}-h"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/h")[0] == 0
    ddb = client_for(ddb_local, "dynamodb")
    LeaseStore(ddb, ddb_local.table, lease_ms=60_000, skew_ms=1_000).acquire(sid, "w#a")
    code, _, err = run(capsys, "rm", sid, "--wait", "0.5")
    assert code == 1 and "still held by w#a" in err
    row = ls_json(capsys, unique_id)[sid]
    assert row["desired_state"] == "STOPPED" and row["owner"] == "w#a"
    assert run(capsys, "rm", sid, "--force")[0] == 0
    assert sid not in ls_json(capsys, unique_id)


def test_start_twice_fails_with_1(aws_env: dict[str, str], unique_id: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A second start of the same id exits 1 and leaves the first URL in place."""
    assert run(capsys, "start", unique_id, "ws://127.0.0.1:9/s/one")[0] == 0
    code, _, err = run(capsys, "start", unique_id, "ws://127.0.0.1:9/s/two")
    assert code == 1 and "already exists" in err


@pytest.mark.parametrize("url", [
    "ws://169.254.169.254/latest/meta-data", "http://127.0.0.1/s/x", "ws://[fe80::1]/x",
    "ws://user:secret@", "file:///etc/passwd"])
def test_hostile_url_is_refused_with_2(aws_env: dict[str, str], unique_id: str, url: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile or non-WebSocket URL exits 2, inserts nothing and never echoes secrets."""
    code, _, err = run(capsys, "start", unique_id, url)
    assert code == 2 and "refused URL" in err and "secret" not in err
    assert unique_id not in ls_json(capsys, unique_id)


@pytest.mark.parametrize("url", [
    "ws://127.0.0.1:8081/", "ws://10.0.0.2/", "ws://[::1]/", "ws://[::ffff:127.0.0.1]/",
    "ws://100.64.0.1/", "ws://0.0.0.0/", "ws://2852039166/", "ws://0xA9FEA9FE/",
    "ws://0251.0376.0251.0376/", "ws://localhost/"])
def test_private_url_in_any_spelling_is_refused_with_2(
        aws_env: dict[str, str], unique_id: str, url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without an allow-list, private and metadata addresses in any form exit 2, insert nothing."""
    monkeypatch.delenv("HOLDFAST_ALLOWED_HOSTS", raising=False)
    code, _, err = run(capsys, "start", unique_id, url)
    assert code == 2 and "refused URL" in err
    assert unique_id not in ls_json(capsys, unique_id)


def test_metadata_is_refused_whatever_the_allow_list(
        aws_env: dict[str, str], unique_id: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.0.0.0/0 (or 169.254.0.0/16) in the allow-list never opens the metadata services."""
    monkeypatch.setenv("HOLDFAST_ALLOWED_HOSTS", "0.0.0.0/0,::/0,169.254.0.0/16")
    for url in ("ws://169.254.169.254/", "ws://169.254.170.2/v2/credentials",
                "ws://[::ffff:a9fe:a9fe]/"):
        code, _, err = run(capsys, "start", unique_id, url)
        assert code == 2 and "metadata" in err
    monkeypatch.setenv("HOLDFAST_ALLOWED_HOSTS", "10.0.0.0/99")
    code, _, err = run(capsys, "start", unique_id, "wss://feeds.example.com/x")
    assert code == 2 and "HOLDFAST_ALLOWED_HOSTS" in err
    assert unique_id not in ls_json(capsys, unique_id)


SECRET_URL = "ws://127.0.0.1:9/s/path-secret;sid=matrix-secret?token=query-secret"


def stored_url(ddb_local: LocalAws, table: str, conn_id: str) -> str:
    item = client_for(ddb_local, "dynamodb").get_item(
        TableName=table, Key={"Pk": {"S": f"CONN#{conn_id}"}})["Item"]
    return str(item["ws_url"]["S"])


def test_start_reads_the_url_from_stdin_or_a_file(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`start ID -` and `--url-file F` keep the URL off the command line and out of the output."""
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET_URL + "\n"))
    code, out, _ = run(capsys, "start", f"{unique_id}-in", "-")
    assert code == 0 and "secret" not in out and "127.0.0.1:9" in out
    url_file = tmp_path / "url"
    url_file.write_text(SECRET_URL + "\n")
    code, out, _ = run(capsys, "start", f"{unique_id}-f", "--url-file", str(url_file))
    assert code == 0 and "secret" not in out
    for conn in (f"{unique_id}-in", f"{unique_id}-f"):
        assert stored_url(ddb_local, aws_env["HOLDFAST_TABLE"], conn) == SECRET_URL
    for argv in ([], ["-", "--url-file", str(url_file)],
                 ["--url-file", str(tmp_path / "missing")]):
        code, _, err = run(capsys, "start", f"{unique_id}-x", *argv)
        assert code == 2 and "URL" in err
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{SECRET_URL}\nws://other/\n"))
    assert run(capsys, "start", f"{unique_id}-x", "-")[0] == 2
    assert f"{unique_id}-x" not in ls_json(capsys, unique_id)


def test_output_never_shows_url_secrets(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """start's echo and ls (a last_error quoting the URL) show no path, token or matrix value."""
    code, out, _ = run(capsys, "start", unique_id, SECRET_URL)
    assert code == 0 and "secret" not in out
    client_for(ddb_local, "dynamodb").update_item(
        TableName=aws_env["HOLDFAST_TABLE"], Key={"Pk": {"S": f"CONN#{unique_id}"}},
        UpdateExpression="SET last_error = :e, #s = :b",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":e": {"S": f"InvalidURI: {SECRET_URL} isn't valid"},
                                   ":b": {"S": "BACKOFF"}})
    row = ls_json(capsys, unique_id)[unique_id]
    assert row["last_error"].startswith("InvalidURI: ws://127.0.0.1:9/<")
    assert "secret" not in json.dumps(row)
    code, out, _ = run(capsys, "ls")
    assert code == 0 and unique_id in out and "secret" not in out


def test_unknown_id_exits_1(aws_env: dict[str, str], unique_id: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """stop and rm of an id that does not exist exit 1 with 'unknown id'."""
    for cmd in ("stop", "rm"):
        code, _, err = run(capsys, cmd, unique_id)
        assert code == 1 and "unknown id" in err


def test_invalid_id_exits_2(aws_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """An id the schema refuses is a usage error."""
    code, _, err = run(capsys, "start", "bad id\n", "ws://127.0.0.1/s/x")
    assert code == 2 and "invalid id" in err


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


@pytest.fixture
def own_tables_env(aws_env: dict[str, str], ddb_local: LocalAws,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``aws_env`` on tables of this test's own: ``status`` lists the first ten stranded
    streams of the whole table, and the shared one holds other tests' strays."""
    table, session_table = own_tables(ddb_local)
    for key, value in (("HOLDFAST_TABLE", table), ("HOLDFAST_SESSION_TABLE", session_table),
                       (ENV_ORDERS_QUEUE_PREFIX, prefix_for(table))):
        aws_env[key] = value
        monkeypatch.setenv(key, value)


def _session_store(aws_env: dict[str, str], ddb_local: LocalAws, clock_ms: int,
                   ttl_ms: int = 30_000) -> SessionStore:
    return SessionStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_SESSION_TABLE"],
                        aws_env["HOLDFAST_TABLE"], ttl_ms=ttl_ms, skew_ms=0,
                        clock=lambda: clock_ms)


@pytest.mark.usefixtures("own_tables_env")
def test_status_counts_owners_and_unowned(aws_env: dict[str, str], ddb_local: LocalAws,
                                          unique_id: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """status groups streams by live session owner, lists unowned STARTED ids and reads queue
    depths; ls shows the session's time left, not the owned item's one-hour backstop."""
    held, free = f"{unique_id}-held", f"{unique_id}-free"
    for sid in (held, free):
        assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    owner = _session_store(aws_env, ddb_local, wall_clock_ms()).start(
        unique_id, 10, version="hf:9").owner
    LeaseStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"],
               lease_ms=3_600_000, skew_ms=0).acquire(held, owner)
    code, out, _ = run(capsys, "status", "--json")
    st = json.loads(out)
    assert code == 0 and st["workers"][owner] == 1
    assert st["versions"] == {"hf:9": {"workers": 1, "streams": 0}}  # held: as last reported
    assert free in st["unowned_started"] and held not in st["unowned_started"]
    assert isinstance(st["queue_depth"], int) and isinstance(st["dlq_depth"], int)
    row = ls_json(capsys, unique_id)[held]
    # The session's 30 s, not the backstop's hour (15 s of slack: a loaded CI took 5.4 s).
    assert row["owner"] == owner and row["held"] and 15_000 < row["lease_left_ms"] <= 30_000
    code, out, _ = run(capsys, "ls")
    assert code == 0 and owner in out and held in out
    code, out, _ = run(capsys, "status")
    assert code == 0 and "unowned STARTED streams" in out
    assert "version live: hf:9 (1 worker, 0 streams)" in out and f"{owner} (hf:9)" in out


@pytest.mark.usefixtures("own_tables_env")
def test_status_shows_streams_of_dead_and_unknown_owners_as_stranded(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A STARTED stream owned by a DEAD session or by an owner no session names, expiry an hour
    ahead, is not held: status counts it unowned and lists it stranded with owner and reason."""
    dead_id, ghost_id = f"{unique_id}-dead", f"{unique_id}-ghost"
    for sid in (dead_id, ghost_id):
        assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    began = wall_clock_ms() - 60_000
    session = _session_store(aws_env, ddb_local, began, ttl_ms=4_000).start(unique_id, 10)
    later = _session_store(aws_env, ddb_local, began + 10_000, ttl_ms=4_000)
    item = later.get(unique_id)
    assert item is not None and later.mark_dead(item)
    ghost = f"{unique_id}-gone#abc123"
    leases = LeaseStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"],
                        lease_ms=3_600_000, skew_ms=0)
    leases.acquire(dead_id, session.owner)  # an acquire that landed after its session died
    leases.acquire(ghost_id, ghost)
    code, out, _ = run(capsys, "status", "--json")
    st = json.loads(out)
    assert code == 0 and session.owner not in st["workers"] and ghost not in st["workers"]
    assert {dead_id, ghost_id} <= set(st["unowned_started"])
    stranded = {r["id"]: r for r in st["stranded"]}
    assert stranded[dead_id]["owner"] == session.owner
    assert stranded[dead_id]["reason"] == "gone: session DEAD"
    assert 45_000 <= stranded[dead_id]["age_ms"] <= 60_000  # since it was declared dead
    assert (stranded[ghost_id]["owner"], stranded[ghost_id]["reason"]) == (
        ghost, "unknown: no session item")
    assert st["oldest_unowned_ms"] >= stranded[dead_id]["age_ms"]
    rows = ls_json(capsys, unique_id)
    assert rows[dead_id]["stranded"] == "gone: session DEAD"
    assert rows[dead_id]["lease_left_ms"] is None and not rows[dead_id]["held"]
    code, out, _ = run(capsys, "status")
    assert code == 0 and f"stranded {dead_id}: owned by {session.owner}" in out


def test_stop_wait_sees_release(aws_env: dict[str, str], unique_id: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """stop --wait on a stream nobody holds returns at once with 'lease released'."""
    assert run(capsys, "start", unique_id, "ws://127.0.0.1:9/s/x")[0] == 0
    code, out, _ = run(capsys, "stop", unique_id, "--wait", "5")
    assert code == 0 and "lease released" in out


def test_stop_wait_times_out_while_held(aws_env: dict[str, str], ddb_local: LocalAws,
                                        unique_id: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """stop --wait exits 1 naming the holder when no worker releases the lease in time."""
    assert run(capsys, "start", unique_id, "ws://127.0.0.1:9/s/x")[0] == 0
    LeaseStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"],
               lease_ms=30_000, skew_ms=0).acquire(unique_id, "stuck-worker")
    code, _, err = run(capsys, "stop", unique_id, "--wait", "0.5")
    assert code == 1 and "stuck-worker" in err


def test_ls_without_sessions_says_the_expiry_is_a_backstop(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """ls shows the session's time left; without the session table it labels the item's
    hour-long expiry a backstop instead of passing it off as the lease time left."""
    held = f"{unique_id}-bk"
    assert run(capsys, "start", held, "ws://127.0.0.1:9/s/x")[0] == 0
    owner = _session_store(aws_env, ddb_local, wall_clock_ms(), ttl_ms=4_000).start(
        unique_id, 10).owner
    LeaseStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"],
               lease_ms=3_600_000, skew_ms=0).acquire(held, owner)
    row = ls_json(capsys, unique_id)[held]
    assert row["lease_left_ms"] <= 4_000 and not row["lease_left_is_backstop"]
    monkeypatch.delenv("HOLDFAST_SESSION_TABLE")
    row = ls_json(capsys, unique_id)[held]
    assert row["lease_left_ms"] > 3_000_000 and row["lease_left_is_backstop"]
    code, out, _ = run(capsys, "ls")
    line = next(x for x in out.splitlines() if held in x)
    assert code == 0 and "? (backstop 35" in line and "session left" in out


@pytest.mark.usefixtures("own_tables_env")  # status lists the first ten of each kind
def test_ls_and_status_show_markup_in_items_as_written(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An owner, an error and a malformed key holding rich markup (a "[/]" anyone can write)
    are printed as text: they failed the whole listing with a MarkupError."""
    sid = f"{unique_id}-mk"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    ddb, table = client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"]
    ddb.update_item(TableName=table, Key={"Pk": {"S": f"CONN#{sid}"}},
                    UpdateExpression="SET lease_owner = :o, last_error = :e, #s = :s",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":o": {"S": "w[/]#1"}, ":e": {"S": "x [/b]"},
                                               ":s": {"S": "BACKOFF"}})
    ddb.put_item(TableName=table, Item={"Pk": {"S": f"CONN#{unique_id}[/]"},
                                        "desired_state": {"S": "STARTED"}})  # no ws_url
    code, out, _ = run(capsys, "ls")
    assert code == 0 and "w[/]#1" in out and "x [/b]" in out and f"{unique_id}[/]" in out
    code, out, _ = run(capsys, "status")
    assert code == 0 and "w[/]#1" in out
