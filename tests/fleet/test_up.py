"""``holdfast up`` end to end, as subprocesses: the env-file mode and the failover scenario."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from holdfast.core import names
from holdfast.core.boto import new_session
from holdfast.core.table import create_stream
from holdfast.fleet.procs import REPO_ROOT
from holdfast.fleet.traces import CONNECTED_BEFORE, acquisition_paths, read_spans
from tests.conftest import TIMEOUT_SCALE

pytestmark = pytest.mark.slow


def _wait(pred: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s * TIMEOUT_SCALE
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def _listening(url: str) -> bool:
    host, _, port = url.removeprefix("http://").partition(":")
    try:
        with socket.create_connection((host, int(port)), 0.5):
            return True
    except OSError:
        return False


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "holdfast.cli.main", "up", *args]


def test_env_file_mode_serves_a_worker_we_bring(tmp_path: Path) -> None:
    """--workers 0 --streams 0 writes an env a worker can use; SIGTERM stops all, cleanly,
    and removes the env file (a script waiting for it would read dead endpoints)."""
    env_file = tmp_path / "fleet.env"
    up = subprocess.Popen(_cmd("--workers", "0", "--streams", "0", "--env-file", str(env_file),
                               "--run-dir", str(tmp_path / "run")), cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL)
    worker: subprocess.Popen[bytes] | None = None
    try:
        assert _wait(env_file.exists, 60), "env file never written"
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        worker = subprocess.Popen(
            [sys.executable, "-m", "holdfast.worker"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env, "HOLDFAST_WORKER_ID": "brought", "PYTHONPATH":
                 str(REPO_ROOT), "HOLDFAST_HEALTH_PORT": "0"})
        ddb = new_session().client(
            "dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"], region_name="us-east-1",
            aws_access_key_id="local", aws_secret_access_key="local")
        time.sleep(2)
        assert create_stream(ddb, env["HOLDFAST_TABLE"], "own-1", "ws://127.0.0.1:9/s/own-1")

        def owned() -> bool:
            item = ddb.get_item(TableName=env["HOLDFAST_TABLE"],
                                Key={"Pk": {"S": "CONN#own-1"}})["Item"]
            return str(item.get("lease_owner", {}).get("S", "")).startswith("brought#")

        assert _wait(owned, 30), "the stream was never claimed by our worker"
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
        up.send_signal(signal.SIGTERM)
        out = up.communicate(timeout=60)[0].decode()
    assert up.returncode == 0, out
    assert "local AWS stopped" in out and "runner stopped" in out
    assert not _listening(env["AWS_ENDPOINT_URL_DYNAMODB"])
    assert not _listening(env["AWS_ENDPOINT_URL_SQS"])
    assert not env_file.exists(), "the env file outlived the servers it names"


def test_a_closed_terminal_stops_the_fleet_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGHUP (a closed terminal, a dropped SSH session) stops every child and exits 0: the
    children run in sessions of their own, and before they went on for good."""
    env_file = tmp_path / "fleet.env"
    up = subprocess.Popen(_cmd("--workers", "0", "--streams", "0", "--env-file", str(env_file),
                               "--run-dir", str(tmp_path / "run")), cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL)
    try:
        assert _wait(env_file.exists, 60), "env file never written"
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    finally:
        up.send_signal(signal.SIGHUP)
        out = up.communicate(timeout=60)[0].decode()
    assert up.returncode == 0, out
    assert "local AWS stopped" in out and "runner stopped" in out
    assert not _listening(env["AWS_ENDPOINT_URL_DYNAMODB"])


def test_a_run_dir_in_use_is_refused(tmp_path: Path) -> None:
    """--run-dir holding an earlier run is refused (its logs would pass this run's readiness
    waits and mix into its verdict), exit 2, nothing started."""
    used = tmp_path / "run"
    used.mkdir()
    (used / "worker-w1.log").write_text('{"message": "worker started"}\n')
    proc = subprocess.run(_cmd("--run-dir", str(used)), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 2 and "is not empty" in proc.stderr
    assert "local AWS" not in proc.stdout


def test_failover_scenario_passes(tmp_path: Path) -> None:
    """With a user handler: exit 0, summary, PASS, PNG, and the handler saw every message; the
    reported crash and the TTL-found hang both moved streams, the woken worker fenced, and the
    fleet ended balanced (with a row for the rebalancing moves)."""
    run_dir = tmp_path / "run"
    # With a user's handler: the recorder wraps it, and the verdict is the same.
    proc = subprocess.run(_cmd("--scenario", "failover", "--workers", "3", "--streams", "6",
                               "--handler", "tests.fleet.user_handler:handle",
                               "--run-dir", str(run_dir)), check=False, cwd=REPO_ROOT,
                          capture_output=True, timeout=120 * TIMEOUT_SCALE,
                          stdin=subprocess.DEVNULL)
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out[-4000:]
    assert "Holdfast failover summary" in out and "PASS" in out
    assert "SIGKILL" in out and "SIGTERM" in out
    png = run_dir / "timeline.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    rows = {r["event"].split()[0]: r for r in
            json.loads((run_dir / "summary.json").read_text())["rows"]}
    for kind in ("SIGTERM", "SIGKILL", "SIGSTOP"):  # each moved streams, and all recovered
        assert rows[kind]["affected"] > 0 and rows[kind]["max_unowned_s"] is not None, rows
    # The fleet ends balanced (the woken worker and the replacement got their share), and the
    # rebalancing moves have their row: count, unowned per move, seqs handled twice.
    kinds = {r.get("kind"): r for r in json.loads((run_dir / "summary.json").read_text())["rows"]}
    assert "moves" in kinds and kinds["moves"]["moves"] >= 0, kinds
    assert kinds["holdings"]["balanced"] is True, kinds["holdings"]
    assert len(kinds["holdings"]["holdings"]) >= 2 and "holdings at the end" in out, kinds
    assert "reported stopped" in out and "found by its TTL" in out
    assert "woken by SIGCONT: found its session dead" in out
    user_seen = (run_dir / "user-handler.log").read_text().splitlines()
    recorded = [line.split()[:2] for f in (run_dir / "handled").glob("*.seqs")
                for line in f.read_text().splitlines()]
    assert user_seen and len(user_seen) == len(recorded)
    _assert_trace_linkage(run_dir, out)


def _assert_trace_linkage(run_dir: Path, out: str) -> None:
    """One trace links the router's span to a worker's claim, connect and first message."""
    spans = read_spans(run_dir / "spans.jsonl")
    assert spans, "holdfast up wrote no spans"
    by_id = {s["spanId"]: s for s in spans}
    paths = acquisition_paths(spans)
    routed = [p for p in paths if p.hops[0].name == names.SPAN_ROUTE]
    assert routed, f"no claim is a child of a router span: {sorted({s['name'] for s in spans})}"
    path = routed[-1]
    assert path.stream_id and path.worker_id
    trace = [s for s in spans if s["traceId"] == path.trace_id]
    # A new stream's upstream may be opened before its claim (``worker.prestart``): no connect
    # span under the claim then, and the path says so.
    connected = {names.SPAN_CONNECT} if path.hops[3].name != CONNECTED_BEFORE else set()
    assert {s["name"] for s in trace} >= {names.SPAN_ROUTE, names.SPAN_CLAIM,
                                          names.SPAN_FIRST_MESSAGE, *connected}
    for s in trace:  # every span of ours names the stream; the worker's also the worker
        attrs = {a["key"]: a["value"].get("stringValue") for a in s["attributes"]}
        if s["name"] in (names.SPAN_CLAIM, names.SPAN_CONNECT, names.SPAN_FIRST_MESSAGE):
            assert attrs[names.TRACE_ATTR_STREAM_ID] == path.stream_id
            assert s["parentSpanId"] in by_id
            # A nudge handed on (a worker at its rebalancing share, or one that shed the
            # stream) keeps its trace: that worker's claim span ends "refused" or "no_capacity".
            if attrs.get("holdfast.outcome") not in ("refused", "no_capacity"):
                assert attrs[names.TRACE_ATTR_WORKER_ID] == path.worker_id
    assert "acquisition path of" in out and "nudge queue" in out


def test_an_earlier_runs_env_file_is_gone_until_this_runs_is_written(tmp_path: Path) -> None:
    """`--env-file` naming an earlier run's file: removed before the local AWS starts (a script
    waiting for the file read the old endpoints), then written whole (renamed into place)."""
    import argparse
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from holdfast.fleet import cli as fleet_cli
    from holdfast.fleet.procs import Fleet

    env_file = tmp_path / "fleet.env"
    env_file.write_text("HOLDFAST_TABLE=from-an-earlier-run\n")
    seen: list[bool] = []
    fake = SimpleNamespace(
        aws=SimpleNamespace(backend="moto", dynamodb_url="-", sqs_url="-"), runner=None,
        run_dir=tmp_path, env={"HOLDFAST_TABLE": "this-run"},
        start_aws=lambda: seen.append(env_file.exists()), start_runner=lambda: None)
    fake.write_env = lambda path: Fleet.write_env(fake, path)  # type: ignore[arg-type]
    fleet_cli._start_base(Console(file=io.StringIO()), fake,  # type: ignore[arg-type]
                          argparse.Namespace(env_file=env_file))
    assert seen == [False]
    assert env_file.read_text() == "HOLDFAST_TABLE=this-run\n"
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.env"]
