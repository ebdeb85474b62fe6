"""The local runner end to end on DynamoDB Local: stream -> filter -> router -> SQS, + sweeper."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.runner.__main__ import main as runner_main
from holdfast.runner.__main__ import not_local
from holdfast.runner.config import RunnerConfig
from tests.conftest import TIMEOUT_SCALE
from tests.lambdas.helpers import receive_nudges
from tests.lambdas.records import image
from tests.runner.conftest import running

URL = "wss://feeds.example.test/1"


def config(**kw: Any) -> RunnerConfig:
    return dataclasses.replace(RunnerConfig.from_env(), **kw)


def wait_for(predicate: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s * TIMEOUT_SCALE
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def test_insert_puts_a_nudge_on_the_queue(runner_env: dict[str, str], ddb: Any, sqs: Any,
                                          unique_id: str) -> None:
    """Creating a STARTED item makes a nudge appear on the queue, quickly."""
    with running(config(sweeper=False)) as runner:
        started = time.monotonic()
        assert create_stream(ddb, runner_env["HOLDFAST_TABLE"], unique_id, URL)
        got = receive_nudges(sqs, runner_env["HOLDFAST_QUEUE_URL"], expect=1)
        latency = time.monotonic() - started
    assert got == [{"conn_id": unique_id, "reason": "inserted", "epoch": 0,
                    "ws_url": URL}]
    assert latency < 2 * TIMEOUT_SCALE  # measured by bench/router_latency.py, not here
    assert runner.stats.esm.invocations == 1


def test_heartbeats_invoke_nothing(runner_env: dict[str, str], ddb: Any, sqs: Any,
                                   unique_id: str) -> None:
    """Acquire, heartbeats and checkpoints are read from the stream but never delivered."""
    table = runner_env["HOLDFAST_TABLE"]
    store = LeaseStore(ddb, table, lease_ms=20_000, skew_ms=100)
    with running(config(sweeper=False)) as runner:
        create_stream(ddb, table, unique_id, URL)
        assert wait_for(lambda: runner.stats.esm.invocations == 1)
        lease = store.acquire(unique_id, "w1")
        for seq in range(5):
            lease = store.renew(lease, handled_seq=seq)
        assert wait_for(lambda: runner.stats.records_read >= 7)
        time.sleep(0.2)
    assert runner.stats.esm.invocations == 1
    assert runner.stats.records_filtered_out == 6
    assert len(receive_nudges(sqs, runner_env["HOLDFAST_QUEUE_URL"], expect=2,
                              timeout_s=1)) == 1


def test_release_and_stop_start(runner_env: dict[str, str], ddb: Any, sqs: Any,
                                unique_id: str) -> None:
    """A release and a STOPPED -> STARTED flip are nudged; the stop itself is not."""
    from holdfast.core.table import set_desired_state

    table, queue = runner_env["HOLDFAST_TABLE"], runner_env["HOLDFAST_QUEUE_URL"]
    store = LeaseStore(ddb, table, lease_ms=20_000, skew_ms=100)
    create_stream(ddb, table, unique_id, URL)
    lease = store.acquire(unique_id, "w1")
    with running(config(sweeper=False, start="LATEST")):
        assert store.release(lease) is None
        assert receive_nudges(sqs, queue, expect=1) == [
            {"conn_id": unique_id, "reason": "released", "epoch": lease.epoch}]
        set_desired_state(ddb, table, unique_id, "STOPPED")
        set_desired_state(ddb, table, unique_id, "STARTED")
        assert receive_nudges(sqs, queue, expect=2, timeout_s=2) == [
            {"conn_id": unique_id, "reason": "started", "epoch": lease.epoch}]


def test_seed_item_is_normalised_through_the_stream(runner_env: dict[str, str], ddb: Any,
                                                    sqs: Any, unique_id: str) -> None:
    """An item written without an expiry is nudged once and given expiry 0 for the sweeper."""
    table = runner_env["HOLDFAST_TABLE"]
    with running(config(sweeper=False)) as runner:
        ddb.put_item(TableName=table, Item=image(unique_id))
        got = receive_nudges(sqs, runner_env["HOLDFAST_QUEUE_URL"], expect=2, timeout_s=2)
        assert wait_for(lambda: runner.stats.records_read >= 2)
    item = ddb.get_item(TableName=table, Key={ATTR.pk: {"S": pk_for(unique_id)}},
                        ConsistentRead=True)["Item"]
    assert item[ATTR.lease_expires_at_ms] == {"N": "0"}
    assert got == [{"conn_id": unique_id, "reason": "inserted", "epoch": 0,
                    "ws_url": image(unique_id)[ATTR.ws_url]["S"]}]


def test_sweeper_thread_nudges_an_expired_lease(runner_env: dict[str, str], ddb: Any, sqs: Any,
                                                unique_id: str) -> None:
    """With the sweeper on, a lease whose holder died is nudged soon after it expires."""
    table, queue = runner_env["HOLDFAST_TABLE"], runner_env["HOLDFAST_QUEUE_URL"]
    create_stream(ddb, table, unique_id, URL)
    lease = LeaseStore(ddb, table, lease_ms=500, skew_ms=100).acquire(unique_id, "dead")
    with running(config(start="LATEST")):
        got = receive_nudges(sqs, queue, expect=1, timeout_s=4)
        received_ms = time.time() * 1000
    assert got == [{"conn_id": unique_id, "reason": "expired", "epoch": None}]
    assert received_ms >= lease.expires_at_ms + 100


def test_sqs_outage_is_retried_then_dropped(runner_env: dict[str, str], ddb: Any,
                                            monkeypatch: pytest.MonkeyPatch,
                                            unique_id: str) -> None:
    """With SQS down the batch is retried, then dropped and counted; the shard moves on."""
    from holdfast.localaws.processes import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HOLDFAST_NUDGE_SEND_ATTEMPTS", "1")
    cfg = config(sweeper=False)
    cfg = dataclasses.replace(cfg, esm=dataclasses.replace(cfg.esm, max_retry_attempts=1,
                                                           retry_backoff_ms=10))
    with running(cfg) as runner:
        create_stream(ddb, runner_env["HOLDFAST_TABLE"], unique_id, URL)
        assert wait_for(lambda: runner.stats.esm.dropped == 1, timeout_s=30)
        create_stream(ddb, runner_env["HOLDFAST_TABLE"], f"{unique_id}-2", URL)
        assert wait_for(lambda: runner.stats.esm.invocations >= 3, timeout_s=30)
    assert runner.stats.esm.retries >= 1


def test_module_entry_point_stops_cleanly_on_sigterm(runner_env: dict[str, str], ddb: Any,
                                                     sqs: Any, unique_id: str) -> None:
    """``python -m holdfast.runner`` delivers nudges and exits 0 with a summary on SIGTERM."""
    env = {**os.environ, **runner_env, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "holdfast.runner", "--start", "LATEST"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "runner reading" in line:
                break
        create_stream(ddb, runner_env["HOLDFAST_TABLE"], unique_id, URL)
        assert receive_nudges(sqs, runner_env["HOLDFAST_QUEUE_URL"], expect=1, timeout_s=10)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20 * TIMEOUT_SCALE)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "SIGTERM: stopping" in out
    assert "runner stopped: 1 records read, 0 filtered out, 1 invocations" in out
    assert '"_aws"' not in out  # EMF metric lines are off locally unless asked for


def test_waits_for_the_table_to_appear(runner_env: dict[str, str], ddb: Any, sqs: Any,
                                       monkeypatch: pytest.MonkeyPatch, unique_id: str) -> None:
    """Started before its table exists, the runner waits for it, then reads from its start."""
    import threading

    from holdfast.core.schema import table_definition

    table = f"late-{unique_id}"
    monkeypatch.setenv("HOLDFAST_TABLE", table)
    timer = threading.Timer(1.0, lambda: ddb.create_table(**table_definition(table)))
    timer.start()
    try:
        with running(config(sweeper=False)):
            create_stream(ddb, table, unique_id, URL)
            assert receive_nudges(sqs, runner_env["HOLDFAST_QUEUE_URL"], expect=1)
    finally:
        timer.cancel()


def test_missing_table_is_a_clear_error(runner_env: dict[str, str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no such table (and no waiting), the runner fails naming the table."""
    from holdfast.runner.exceptions import ChangesNotFound
    from holdfast.runner.runner import Runner

    monkeypatch.setenv("HOLDFAST_TABLE", "no-such-table")
    with pytest.raises(ChangesNotFound, match="no-such-table"):
        Runner(config(sweeper=False, startup_wait_ms=0)).run()


def test_runs_on_moto_streams_too(moto_local: Any, monkeypatch: pytest.MonkeyPatch,
                                  unique_id: str) -> None:
    """On moto (server mode), an UpdateItem that creates an item is nudged exactly once."""
    from tests.conftest import client_for
    from tests.lambdas.helpers import new_queue, new_table

    env = {**moto_local.env(), "HOLDFAST_TABLE": new_table(moto_local),
           "HOLDFAST_QUEUE_URL": new_queue(moto_local)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ddb, sqs = client_for(moto_local, "dynamodb"), client_for(moto_local, "sqs")
    with running(config(sweeper=False)) as runner:
        # moto emits two INSERT records for this write, the first with only the key.
        ddb.update_item(TableName=env["HOLDFAST_TABLE"], Key={ATTR.pk: {"S": pk_for(unique_id)}},
                        UpdateExpression="SET desired_state = :s, ws_url = :u, "
                                         "lease_expires_at_ms = :z",
                        ExpressionAttributeValues={":s": {"S": "STARTED"}, ":u": {"S": URL},
                                                   ":z": {"N": "0"}})
        got = receive_nudges(sqs, env["HOLDFAST_QUEUE_URL"], expect=2, timeout_s=2)
    assert got == [{"conn_id": unique_id, "reason": "inserted", "epoch": 0,
                    "ws_url": URL}]
    assert runner.stats.esm.invocations == 1


@pytest.mark.slow
def test_a_slow_batch_and_a_busy_sweeper_delay_no_other_stream(
        runner_env: dict[str, str], ddb: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
        unique_id: str) -> None:
    """While the handler is stuck 3 s on one stream's batch and the sweeper thread keeps the
    CPU busy, another stream's insert still reaches the handler within 0.5 s."""
    import holdfast.runner.runner as runner_module

    arrivals = tmp_path / "arrivals"
    arrivals.touch()
    monkeypatch.setenv("HOLDFAST_TEST_ARRIVALS", str(arrivals))
    monkeypatch.setenv("HOLDFAST_RUNNER_PARALLELIZATION", "4")  # the default, not the suite's

    def busy_sweeper(*_args: Any, should_stop: Any, **_kw: Any) -> None:
        while not should_stop():  # pure-Python work: it competes for the interpreter lock
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                pass

    monkeypatch.setattr(runner_module, "run_sweeps", busy_sweeper)

    def arrived(conn: str) -> float | None:
        for line in arrivals.read_text().splitlines():
            name, _, at = line.partition(" ")
            if name == conn:
                return float(at)
        return None

    table = runner_env["HOLDFAST_TABLE"]
    slow, fast = f"slow-{unique_id}", f"fast-{unique_id}"
    with running(config(handler="tests.runner.slow_handler:handle", start="LATEST")) as runner:
        create_stream(ddb, table, slow, URL)
        assert wait_for(lambda: arrived(slow) is not None)
        inserted = time.time()
        create_stream(ddb, table, fast, URL)
        assert wait_for(lambda: arrived(fast) is not None)
        latency = (arrived(fast) or 0) - inserted
        slow_done = wait_for(lambda: runner.stats.esm.invocations >= 2)
    assert slow_done
    assert latency < 0.5 * TIMEOUT_SCALE, runner.stats.summary()


def test_the_runner_refuses_to_run_against_real_aws(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A shell set up for the operator commands against a real table (no local endpoints) does
    not start a second router and sweeper there: exit 2, saying what to do; local endpoints
    (or --against-aws) pass the check."""
    local = {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000",
             "AWS_ENDPOINT_URL_DYNAMODB_STREAMS": "http://localhost:8000",
             "AWS_ENDPOINT_URL_SQS": "http://[::1]:9324"}
    assert not_local(local) == []
    assert not_local({**local, "AWS_ENDPOINT_URL_SQS": "https://sqs.eu-west-1.amazonaws.com"}) \
        == ["AWS_ENDPOINT_URL_SQS"]
    assert not_local({"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}) == []
    for name in (*local, "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOLDFAST_TABLE", "production-leases")
    assert runner_main(["--no-sweeper"]) == 2
    assert "not on this machine" in capsys.readouterr().err
