"""``ls`` and ``status`` against DynamoDB Local: owners checked against their sessions,
stranded streams, the backstop label, and item text printed as written."""

from __future__ import annotations

import json

import pytest

from holdfast.core.names import ENV_ORDERS_QUEUE_PREFIX
from holdfast.core.orders import prefix_for
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.localaws import LocalAws
from tests.cli.helpers import ls_json, run
from tests.conftest import client_for, own_tables


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
    ahead, is not held: status counts it unowned and lists it stranded with owner and reason;
    the DEAD session's count is said to be its last heartbeat's."""
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
    # Its count is the last heartbeat's, not a count of now (its streams may have moved on).
    assert f"{session.owner}: 0/10 streams at its last heartbeat, heartbeat" in out


@pytest.mark.usefixtures("own_tables_env")
def test_status_says_a_malformed_session_item_strands_its_streams_until_fixed(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A worker's session item broken (its expiry deleted by hand): its stream is stranded and
    nobody releases it (the sweeper cannot judge that session), and a note names the item and
    the fix; it said "unknown: no session item ... (the sweeper releases it)"."""
    sid = f"{unique_id}-s"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    sessions = _session_store(aws_env, ddb_local, wall_clock_ms())
    session = sessions.start(unique_id, 10)
    LeaseStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"],
               lease_ms=3_600_000, skew_ms=0).acquire(sid, session.owner)
    sessions.client.update_item(TableName=sessions.table, Key=sessions._key(unique_id),
                                UpdateExpression="REMOVE session_expires_at_ms")
    code, out, _ = run(capsys, "status")
    assert code == 0 and f"stranded {sid}: owned by {session.owner}" in out
    assert "nobody releases it until then" in out and "the sweeper releases it" not in out
    assert f"malformed session item 'WORKER#{unique_id}'" in out and "fix or delete it" in out


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


def _set(aws_env: dict[str, str], ddb_local: LocalAws, sid: str, **attrs: str) -> None:
    """Write string attributes of ``sid``'s item as another writer of the table would."""
    names = {f"#a{i}": k for i, k in enumerate(attrs)}
    client_for(ddb_local, "dynamodb").update_item(
        TableName=aws_env["HOLDFAST_TABLE"], Key={"Pk": {"S": f"CONN#{sid}"}},
        UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(attrs))),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues={f":v{i}": {"S": v} for i, v in enumerate(attrs.values())})


@pytest.mark.usefixtures("own_tables_env")  # status lists the first ten stranded streams
def test_ls_and_status_never_print_control_characters_from_items(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An owner and an error holding terminal escapes (retitle, clear the screen) are shown as
    \\xNN text, a bidirectional override (which reorders what follows) as \\uNNNN, the rest of
    them kept; --json keeps them as written."""
    sid, error = f"{unique_id}-esc", "\x1b]0;pwned\x07\x1b[2Jboom \u00e9\u2713 \u202egnp.exe"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    _set(aws_env, ddb_local, sid, lease_owner="w\x1b[2J#1", last_error=error,
         status="BACKOFF")
    for command in ("ls", "status"):
        code, out, _ = run(capsys, command)
        assert code == 0 and "w\\x1b[2J#1" in out
        assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0 for c in out)
    code, out, _ = run(capsys, "ls")
    assert "\\x1b]0;pwned\\x07\\x1b[2Jboom \u00e9\u2713" in out
    assert "\\u202egnp.exe" in out and "\u202e" not in out
    assert ls_json(capsys, unique_id)[sid]["last_error"] == error


@pytest.mark.usefixtures("own_tables_env")
def test_ls_shows_last_error_only_when_not_running(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A RUNNING stream's last_error (left from an earlier failure) is not shown, --json keeps
    it; another status shows it, past its 60th character."""
    sid = f"{unique_id}-run"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    error = "stale " * 12 + "TAILMARK"  # 80 characters
    _set(aws_env, ddb_local, sid, last_error=error, status="RUNNING")
    code, out, _ = run(capsys, "ls")
    assert code == 0 and "stale" not in out and "RUNNING" in out
    assert ls_json(capsys, unique_id)[sid]["last_error"] == error
    _set(aws_env, ddb_local, sid, status="BACKOFF")
    code, out, _ = run(capsys, "ls")
    assert code == 0 and "stale" in out and "TAILMARK" in out


@pytest.mark.usefixtures("own_tables_env")
def test_status_piped_is_as_wide_as_ls_and_counts_in_words(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Piped, status uses 120 columns as ls does (not rich's 80), and says "1 worker",
    "1 stream", "1 lease"."""
    monkeypatch.delenv("COLUMNS", raising=False)
    sid = f"{unique_id}-one"
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/x")[0] == 0
    owner = _session_store(aws_env, ddb_local, wall_clock_ms()).start(unique_id, 10).owner
    LeaseStore(client_for(ddb_local, "dynamodb"), aws_env["HOLDFAST_TABLE"],
               lease_ms=3_600_000, skew_ms=0).acquire(sid, owner)
    monkeypatch.delenv("HOLDFAST_SESSION_TABLE")  # its note is one long line
    code, out, _ = run(capsys, "status")
    assert code == 0 and max(len(line) for line in out.splitlines()) > 80
    assert "1 worker holding leases, 1 stream (1 started, 0 stopped)" in out
    assert f"{owner}: 1 lease\n" in out
    code, out, _ = run(capsys, "ls")
    assert code == 0 and "\n1 stream\n" in out


@pytest.mark.usefixtures("own_tables_env")
def test_status_says_how_many_more_streams_than_it_names(
        unique_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    """status names the first ten unowned streams and says how many more there are (it
    printed "12:" beside ten names, the other two nowhere)."""
    for i in range(12):
        assert run(capsys, "start", f"{unique_id}-{i:02}", "ws://127.0.0.1:9/s/x")[0] == 0
    code, out, _ = run(capsys, "status")
    assert code == 0 and "unowned STARTED streams: 12" in out
    assert "and 2 more (holdfast ls)" in out


@pytest.mark.usefixtures("own_tables_env")
def test_ls_of_some_streams_shows_their_last_errors_in_full(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The whole listing cuts a long last error (its fix hint at the end was only in --json)
    and says where it is whole; `ls ID` lists that stream alone, its error in full, and names
    an id it does not know."""
    conn = f"{unique_id}-long"
    assert run(capsys, "start", conn, "ws://127.0.0.1:9/s/x")[0] == 0
    error = "x" * 150 + " skip it: holdfast resume ID --now --after-seq 41"
    client_for(ddb_local, "dynamodb").update_item(
        TableName=aws_env["HOLDFAST_TABLE"], Key={"Pk": {"S": f"CONN#{conn}"}},
        UpdateExpression="SET #s = :s, #e = :e",
        ExpressionAttributeNames={"#s": "status", "#e": "last_error"},
        ExpressionAttributeValues={":s": {"S": "BACKOFF"}, ":e": {"S": error}})
    assert run(capsys, "start", f"{unique_id}-other", "ws://127.0.0.1:9/s/x")[0] == 0
    code, out, _ = run(capsys, "ls")
    flat = " ".join(out.split())
    assert code == 0 and "--after-seq 41" not in flat and "holdfast ls ID: in full" in flat
    code, out, _ = run(capsys, "ls", conn, f"{unique_id}-nope")
    flat = "".join(out.split())
    assert code == 0 and "--after-seq41" in flat and f"{unique_id}-other" not in flat
    assert f"nostream'{unique_id}-nope'" in flat
    bad = f"{unique_id}-bad"  # a malformed item asked for by name: shown with its reason
    client_for(ddb_local, "dynamodb").put_item(TableName=aws_env["HOLDFAST_TABLE"], Item={
        "Pk": {"S": f"CONN#{bad}"}, "desired_state": {"S": "PAUSED"}})
    code, out, _ = run(capsys, "ls", bad)
    flat = "".join(out.split())
    assert code == 0 and f"malformedCONN#{bad}" in flat and "nostream" not in flat
