"""The operator commands that change streams (``start``, ``stop``, ``resume``, ``rm``) against
DynamoDB Local, including their error paths and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from holdfast.core.store import LeaseStore
from holdfast.lambdas.router.decide import Outcome, decide
from holdfast.localaws import LocalAws
from tests.cli.helpers import ls_json, run
from tests.conftest import client_for


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
    # Longer than is read: said so, not checked cut short (it said "8192 characters long").
    monkeypatch.setattr("sys.stdin", io.StringIO("ws://127.0.0.1:9/" + "a" * 9000))
    code, _, err = run(capsys, "start", f"{unique_id}-x", "-")
    assert code == 2 and "longer than 8192 characters" in err, err
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


def _images(ddb: Any, table: str, sid: str) -> dict[str, Any]:
    return dict(ddb.get_item(TableName=table, Key={"Pk": {"S": f"CONN#{sid}"}},
                             ConsistentRead=True)["Item"])


def _started(capsys: pytest.CaptureFixture[str], ddb_local: LocalAws,
             sid: str) -> tuple[Any, LeaseStore]:
    """``holdfast start sid``; the table's client and a lease store on it."""
    assert run(capsys, "start", sid, f"ws://127.0.0.1:9/s/{sid[-1]}")[0] == 0
    ddb = client_for(ddb_local, "dynamodb")
    return ddb, LeaseStore(ddb, ddb_local.table, lease_ms=60_000, skew_ms=1_000)


def _given_up(capsys: pytest.CaptureFixture[str], ddb_local: LocalAws,
              sid: str) -> tuple[Any, LeaseStore]:
    """``sid`` started, checkpointed at 41 and given up after upstream errors: BACKOFF for a
    minute, its last error recorded."""
    ddb, store = _started(capsys, ddb_local, sid)
    lease = store.acquire(sid, "w#a")
    assert store.release(lease, 41, error="6 connection failures, last: refused",
                         retry_at_ms=store.clock() + 60_000) is None
    return ddb, store


def test_resume_starts_a_stopped_stream_again_from_its_checkpoint(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """stop then resume: STARTED again with last_seq kept, and the router nudges it at once."""
    sid = f"{unique_id}-r"
    ddb, store = _started(capsys, ddb_local, sid)
    assert store.release(store.acquire(sid, "w#a"), 17) is None
    assert run(capsys, "stop", sid)[0] == 0
    old = _images(ddb, ddb_local.table, sid)
    code, out, _ = run(capsys, "resume", sid)
    assert code == 0 and f"resumed {sid} from after last_seq 17" in out
    new = _images(ddb, ddb_local.table, sid)
    assert new["desired_state"] == {"S": "STARTED"} and new["last_seq"] == {"N": "17"}
    decision = decide("MODIFY", old, new, store.clock())
    assert (decision.outcome, decision.delay_s) == (Outcome.NUDGE, 0)
    code, _, err = run(capsys, "start", sid, "ws://127.0.0.1:9/s/r")
    assert code == 1 and "holdfast resume" in err


def test_resume_shows_a_back_offs_error_without_url_secrets(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """resume quotes a back-off's last_error scrubbed of the URL's secrets, as ls does (one
    written by an older worker or by hand quotes the URL whole)."""
    assert run(capsys, "start", unique_id, SECRET_URL)[0] == 0
    ddb = client_for(ddb_local, "dynamodb")
    store = LeaseStore(ddb, ddb_local.table, lease_ms=60_000, skew_ms=1_000)
    assert store.release(store.acquire(unique_id, "w#a"), 3, error="refused",
                         retry_at_ms=store.clock() + 60_000) is None
    assert run(capsys, "stop", unique_id)[0] == 0
    ddb.update_item(TableName=aws_env["HOLDFAST_TABLE"], Key={"Pk": {"S": f"CONN#{unique_id}"}},
                    UpdateExpression="SET last_error = :e",
                    ExpressionAttributeValues={":e": {"S": f"refused: {SECRET_URL}"}})
    code, out, _ = run(capsys, "resume", unique_id)
    assert code == 0 and "in back-off for" in out and "refused: ws://127.0.0.1:9/<" in out
    assert "secret" not in out


def test_resume_of_a_given_up_stream_says_its_back_off_and_now_ends_it(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A stream in back-off after a give-up, stopped: resume keeps the back-off and says how
    long and why; resume --now ends it, and the router nudges it at once."""
    sid = f"{unique_id}-b"
    ddb, store = _given_up(capsys, ddb_local, sid)
    assert run(capsys, "stop", sid)[0] == 0
    code, out, _ = run(capsys, "resume", sid)
    assert code == 0 and "in back-off for" in out and "refused" in out and "--now" in out
    old = _images(ddb, ddb_local.table, sid)
    assert int(old["lease_expires_at_ms"]["N"]) > store.clock()
    code, out, _ = run(capsys, "resume", sid, "--now")
    assert code == 0 and "back-off" not in out and "after last_seq 41" in out
    new = _images(ddb, ddb_local.table, sid)
    assert new["lease_expires_at_ms"] == {"N": "0"} and new["last_seq"] == {"N": "41"}
    decision = decide("MODIFY", old, new, store.clock())
    assert (decision.outcome, decision.delay_s) == (Outcome.NUDGE, 0)


def test_resume_now_never_touches_a_held_streams_expiry(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--now on a held stream: its holder's backstop expiry stays; it is said to be held."""
    sid = f"{unique_id}-o"
    ddb, store = _started(capsys, ddb_local, sid)
    store.acquire(sid, "w#a")
    before = _images(ddb, ddb_local.table, sid)["lease_expires_at_ms"]
    code, out, _ = run(capsys, "resume", sid, "--now")
    assert code == 0 and "held by w#a" in out
    assert _images(ddb, ddb_local.table, sid)["lease_expires_at_ms"] == before
    assert run(capsys, "resume", f"{unique_id}-none")[0] == 1


def test_resume_after_a_seq_skips_a_poison_message_of_a_parked_stream(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A stream parked on seq 42 (checkpoint 41): resume --now --after-seq 42 sets its checkpoint
    there and ends the back-off; refused without --now, and for a held stream."""
    sid = f"{unique_id}-k"
    ddb, store = _given_up(capsys, ddb_local, sid)
    assert run(capsys, "resume", sid, "--after-seq", "42")[0] == 2
    code, out, _ = run(capsys, "resume", sid, "--now", "--after-seq", "42")
    assert code == 0 and "after last_seq 42" in out
    item = _images(ddb, ddb_local.table, sid)
    assert item["last_seq"] == {"N": "42"} and item["lease_expires_at_ms"] == {"N": "0"}
    store.acquire(sid, "w#b")
    code, _, err = run(capsys, "resume", sid, "--now", "--after-seq", "50")
    assert code == 1 and "held" in err
    assert _images(ddb, ddb_local.table, sid)["last_seq"] == {"N": "42"}


def test_start_refuses_a_url_the_worker_refuses(aws_env: dict[str, str], unique_id: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A fragment (websockets refuses it at connect) exits 2 and creates nothing."""
    code, _, err = run(capsys, "start", unique_id, "ws://127.0.0.1:9000/s/f1#frag")
    assert code == 2 and "refused URL" in err and "fragment" in err
    assert unique_id not in ls_json(capsys, unique_id)


def test_start_of_a_name_only_address_ranges_allow_says_so(
        aws_env: dict[str, str], unique_id: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A host name the allow-list does not name, its ranges loopback only (the local fleet's),
    is started with a note that the workers connect only if it resolves into them; an
    address, or a name it names, is started without one."""
    monkeypatch.setenv("HOLDFAST_ALLOWED_HOSTS", "127.0.0.0/8,::1/128,feeds.example.org")
    code, _, err = run(capsys, "start", f"{unique_id}-n", "wss://feeds.example.com/cam/17")
    assert code == 0
    assert ("feeds.example.com is not named in HOLDFAST_ALLOWED_HOSTS: the workers connect "
            "only if it resolves into its address ranges (127.0.0.0/8, ::1/128)") in err
    for n, url in enumerate(("ws://127.0.0.1:9/s/a", "wss://feeds.example.org/cam/1")):
        code, _, err = run(capsys, "start", f"{unique_id}-{n}", url)
        assert code == 0 and "note" not in err


def test_rm_wait_0_of_a_held_stream_leaves_it_stopped(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rm --wait 0 of a held stream fails saying "stopped", and it is: STOPPED was written."""
    ddb, store = _started(capsys, ddb_local, f"{unique_id}-z")
    store.acquire(f"{unique_id}-z", "w#a")
    code, _, err = run(capsys, "rm", f"{unique_id}-z", "--wait", "0")
    assert code == 1 and "still held by w#a after 0 s (stopped" in err
    assert _images(ddb, ddb_local.table, f"{unique_id}-z")["desired_state"] == {"S": "STOPPED"}


def test_resume_of_a_started_held_stream_says_already_started(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """resume of a stream STARTED and held exits 0 saying it was already started, and by whom."""
    sid = f"{unique_id}-s"
    _, store = _started(capsys, ddb_local, sid)
    store.acquire(sid, "w#a")
    code, out, _ = run(capsys, "resume", sid)
    assert code == 0 and f"already started {sid}" in out and "held by w#a" in out
    assert "resumed" not in out


def test_resume_after_seq_says_the_checkpoint_it_replaced(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--after-seq below the checkpoint says what it was and which messages come again."""
    sid = f"{unique_id}-p"
    _given_up(capsys, ddb_local, sid)  # checkpoint 41
    code, out, _ = run(capsys, "resume", sid, "--now", "--after-seq", "5")
    assert code == 0 and (f"resumed {sid} from after last_seq 5 (was 41: messages 6-41 will "
                          "be delivered again)") in out


def test_the_table_key_form_of_an_id_is_refused_saying_what_to_type(
        aws_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """`stop CONN#cam-17` (the key deploy.md shows) exits 2 naming the id to type instead."""
    code, _, err = run(capsys, "stop", "CONN#cam-17")
    assert code == 2 and "give the stream id without the 'CONN#' prefix: cam-17" in err


@pytest.mark.parametrize("wait", ["-5", "nan", "inf"])
def test_wait_must_be_a_finite_number_of_seconds(wait: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """stop and rm --wait refuse a negative, NaN or infinite wait at parsing: exit 2."""
    for cmd in ("stop", "rm"):
        with pytest.raises(SystemExit) as exited:
            run(capsys, cmd, "cam-17", "--wait", wait)
        assert exited.value.code == 2 and "--wait" in capsys.readouterr().err


def test_stop_of_a_stopped_stream_says_already_stopped(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The first stop says "stopped", a second one "already stopped" (exit 0 both)."""
    sid = f"{unique_id}-t"
    _started(capsys, ddb_local, sid)
    assert run(capsys, "stop", sid)[:2] == (0, f"stopped {sid}\n")
    assert run(capsys, "stop", sid)[:2] == (0, f"already stopped {sid}\n")


def test_rm_on_a_terminal_asks_showing_the_checkpoint_that_goes(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """From a terminal rm shows the stream's state and last_seq and deletes only on "y" (a
    mistyped id lost a checkpoint for good); --yes does not ask; what went is printed."""
    sid = f"{unique_id}-t"
    _, store = _started(capsys, ddb_local, sid)
    store.release(store.acquire(sid, "w#a"), 41)
    answers = iter(["n", "y"])
    monkeypatch.setattr("sys.stdin", io.StringIO())
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    code, out, err = run(capsys, "rm", sid)
    assert code == 1 and "unowned, last_seq 41" in out and "not removed" in err
    assert sid in ls_json(capsys, unique_id)
    code, out, _ = run(capsys, "rm", sid)
    assert code == 0 and "removed" in out and "last_seq was 41" in out
    assert run(capsys, "start", sid, "ws://127.0.0.1:9/s/t")[0] == 0
    code, out, _ = run(capsys, "rm", sid, "--yes")
    assert code == 0 and "last_seq was none" in out and "[y/N]" not in out


def test_stop_wait_of_a_malformed_item_says_the_stop_landed(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """stop --wait on an item that does not parse (a mistyped epoch): the stop is written and
    the command exits 0 saying its release cannot be watched (it exited 1, read as failed)."""
    ddb, _ = _started(capsys, ddb_local, f"{unique_id}-m")
    ddb.update_item(TableName=ddb_local.table, Key={"Pk": {"S": f"CONN#{unique_id}-m"}},
                    UpdateExpression="SET lease_epoch = :bad",
                    ExpressionAttributeValues={":bad": {"S": "oops"}})
    code, out, _ = run(capsys, "stop", f"{unique_id}-m", "--wait", "2")
    assert code == 0 and "stopped" in out and "cannot be watched" in out
    assert _images(ddb, ddb_local.table, f"{unique_id}-m")["desired_state"]["S"] == "STOPPED"


def test_resume_after_seq_reports_the_checkpoint_its_write_replaced(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A release landing between resume's read (last_seq 40) and its write (which replaced
    60): the messages said to be delivered again are 6-60, from what the write replaced."""
    import dataclasses

    from holdfast.cli import ops

    sid = f"{unique_id}-r"
    _, store = _started(capsys, ddb_local, sid)
    store.release(store.acquire(sid, "w#a"), 60)
    real_get = ops._get

    def read_before_the_release(*args: Any) -> Any:
        item = real_get(*args)
        return dataclasses.replace(item, last_seq=40)

    monkeypatch.setattr(ops, "_get", read_before_the_release)
    code, out, _ = run(capsys, "resume", sid, "--now", "--after-seq", "5")
    assert code == 0 and "was 60: messages 6-60 will be delivered again" in out, out


def test_resume_of_a_stream_handed_to_a_named_successor_says_so(
        aws_env: dict[str, str], ddb_local: LocalAws, unique_id: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Released to a named successor, within its hold: resume says it is handing over, not
    "in back-off" with a --now that would end the hold."""
    sid = f"{unique_id}-s"
    _, store = _started(capsys, ddb_local, sid)
    store.release(store.acquire(sid, "w#a"), 7, successor="w#b")
    code, out, _ = run(capsys, "resume", sid)
    assert code == 0 and "handing over to w#b" in out and "--now" not in out, out
