"""The ``holdfast_fleet`` fixture (the pytest11 plugin) on a real local fleet."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from holdfast.fleet.procs import REPO_ROOT, Fleet
from holdfast.fleet.recorder import Handled
from holdfast.fleet.timing import FleetTiming
from holdfast.localaws import LocalAws
from holdfast.testing import LocalFleet
from holdfast.testing.checks import failing_streams, last_handler_error
from holdfast.testing.plugin import fallback_warning
from tests.conftest import TIMEOUT_SCALE
from tests.listening import descendants, listening_addresses

pytestmark = pytest.mark.slow


def _user_seen(fleet: LocalFleet, conn_id: str) -> set[int]:
    path = fleet.run_dir / "user-handler.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return {int(s) for c, _, s in (line.partition(" ") for line in lines) if c == conn_id}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_every_server_of_the_fleet_listens_on_loopback_only(holdfast_fleet: LocalFleet) -> None:
    """DynamoDB Local, moto, the demo upstream and the workers accept on 127.0.0.1 only."""
    listening = listening_addresses(descendants(os.getpid()))
    assert listening, "found no listening socket: the check would pass on anything"
    assert {a for addresses in listening.values() for a in addresses} == {"127.0.0.1"}, listening


def test_user_handler_is_wrapped_and_stop_releases(holdfast_fleet: LocalFleet) -> None:
    """The user's handler sees every recorded message; stopping releases and disconnects."""
    conn = holdfast_fleet.start_stream()
    holdfast_fleet.wait_owned(conn)
    handled = holdfast_fleet.wait_handled(conn, 10)
    assert {h.seq for h in handled} <= _user_seen(holdfast_fleet, conn)
    holdfast_fleet.stop_stream(conn)
    deadline = time.monotonic() + 10 * TIMEOUT_SCALE
    while holdfast_fleet.upstream_connections().get(conn) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not holdfast_fleet.upstream_connections().get(conn)
    holdfast_fleet.assert_no_loss([conn])


@pytest.mark.parametrize("hard", [True, False], ids=["sigkill", "sigterm"])
def test_failover_loses_nothing(holdfast_fleet: LocalFleet, hard: bool) -> None:
    """Killing the holder (hard or gracefully) moves the stream with no seq missed."""
    conns = [holdfast_fleet.start_stream() for _ in range(3)]
    for c in conns:
        holdfast_fleet.wait_owned(c)
    before = len(holdfast_fleet.handled(conns[0]))
    holdfast_fleet.wait_handled(conns[0], 5, after=before)
    # Read just before the kill: the balancer may have moved a stream since its first claim,
    # and a victim holding nothing of conns[0] would test no failover of it.
    owners = {c: holdfast_fleet.owner(c) for c in conns}
    victim = owners[conns[0]]
    assert victim is not None
    code = holdfast_fleet.kill_worker(victim, hard=hard)
    assert code == (-9 if hard else 0)
    for c in conns:
        if owners[c] == victim:
            holdfast_fleet.wait_owned(c, not_by=victim)
    holdfast_fleet.wait_new_seqs(conns[0], 10)
    checks = holdfast_fleet.assert_no_loss(conns)
    assert all(s.handled for s in checks.values())
    assert victim not in holdfast_fleet.live_workers()


def test_no_loss_reads_the_users_sink(holdfast_fleet: LocalFleet) -> None:
    """assert_no_loss checks the sink's seqs too: a seq it lacks fails with a clear message."""
    conn = holdfast_fleet.start_stream()
    holdfast_fleet.wait_owned(conn)
    holdfast_fleet.wait_handled(conn, 10)
    holdfast_fleet.stop_stream(conn)  # released: its checkpoint is final
    checks = holdfast_fleet.assert_no_loss([conn], lambda c: _user_seen(holdfast_fleet, c))
    first, checkpoint = checks[conn].first, checks[conn].checkpoint
    assert first is not None and checkpoint is not None and checkpoint > first
    dropped = first + 1  # a seq the worker delivered and the sink did not keep

    def lossy(conn_id: str) -> set[int]:
        return _user_seen(holdfast_fleet, conn_id) - {dropped}

    with pytest.raises(AssertionError, match=(
            rf"{conn}: the sink lacks 1 seq\(s\) the checkpoint {checkpoint} says were "
            rf"handled \(from {first}\): \[{dropped}\]")):
        holdfast_fleet.assert_no_loss([conn], lossy)


def test_no_loss_fails_a_stream_whose_handler_always_raised(holdfast_fleet: LocalFleet) -> None:
    """A handler that raised on every call it got passes no check: assert_no_loss names the
    stream (its checkpoint never moved, so "every seq to the checkpoint" held vacuously)."""
    conn = holdfast_fleet.start_stream(holdfast_fleet.new_id("always-fails"))
    calls = holdfast_fleet.wait_handled(conn, 2)  # attempts: calls that raised count too
    assert calls and all(c.raised for c in calls)
    with pytest.raises(AssertionError, match=rf"{conn}: every one of its \d+ handler calls "
                                             r"raised \(seqs \d+-\d+\) \(its errors: "):
        holdfast_fleet.assert_no_loss([conn])
    # A wait that times out says what did arrive, and the handler's last error.
    with pytest.raises(AssertionError, match=r"\d+ handler calls so far \(\d+ raised, seqs "
                                             r"\d+-\d+; the last: seq \d+: ConnectionError: "
                                             r"downstream down\); worker logs: "):
        holdfast_fleet.wait_handled(conn, 1000, timeout_s=0.5)
    holdfast_fleet.stop_stream(conn, wait=False)


def test_failing_streams_names_only_streams_with_no_call_done() -> None:
    """A stream with one completed call among failures is not named; one with only raised
    calls is, with their count and seqs; streams not asked about are left out."""
    records = [Handled("a", 5, "w1", 1, raised=True), Handled("a", 5, "w1", 2),
               Handled("b", 7, "w1", 3, raised=True), Handled("b", 8, "w2", 4, raised=True),
               Handled("c", 1, "w1", 5, raised=True)]
    assert failing_streams(records, ["a", "b"]) == [
        "b: every one of its 2 handler calls raised (seqs 7-8)"]


def test_the_last_handler_error_of_a_stream_is_read_from_the_worker_logs() -> None:
    """The last "handler raised" or "timed out" line of the stream, as "seq N: error"; other
    streams' lines, other messages and lines that are not JSON are passed over."""
    lines = ['{"message": "handler raised", "conn_id": "a", "seq": 3, "error": "E: one"}',
             'not json, handler a',
             '{"message": "claimed", "conn_id": "a", "seq": 9, "error": "no handler"}',
             '{"message": "handler timed out, call cancelled", "conn_id": "a", "seq": 4, '
             '"error": "TimeoutError"}',
             '{"message": "handler raised", "conn_id": "b", "seq": 5, "error": "E: b"}']
    assert last_handler_error(lines, "a") == "seq 4: TimeoutError"
    assert last_handler_error(lines[:3], "a") == "seq 3: E: one"
    assert last_handler_error(lines, "c") is None


def test_next_test_gets_its_workers_back(holdfast_fleet: LocalFleet) -> None:
    """After a test killed a worker, the next one starts with the configured count again."""
    assert len(holdfast_fleet.live_workers()) == 2


def test_bad_handler_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """A handler that is missing or not async is named in the error before anything starts."""
    fleet = Fleet(tmp_path, FleetTiming(), handler="nosuchpkg.mod:fn", pythonpath=[tmp_path])
    why = fleet.check_handler()
    assert why and "No module named 'nosuchpkg'" in why and str(tmp_path) in why
    fleet.handler = "tests.fleet.user_handler:not_async"
    assert "must be an async function" in (fleet.check_handler() or "")
    fleet.handler = "tests.fleet.user_handler:handle"
    assert fleet.check_handler() is None


def test_a_handler_making_a_client_at_import_passes_the_check_without_aws_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check imports the handler with the local AWS's region and dummy credentials (the
    handler docs' module-level client loads; nothing reaches real AWS), and an import that
    fails for another reason than a missing module gets no import-path hint."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    pkg = tmp_path / "regionpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "handler.py").write_text('import boto3\n\nTABLE = boto3.client("dynamodb")\n\n\n'
                                    "async def handle(message):\n    pass\n")
    (pkg / "broken.py").write_text('raise RuntimeError("config missing")\n')
    fleet = Fleet(tmp_path / "run", FleetTiming(), handler="regionpkg.handler:handle",
                  pythonpath=[tmp_path])
    assert fleet.check_handler() is None
    fleet.handler = "regionpkg.broken:handle"
    assert fleet.check_handler() == ("HOLDFAST_HANDLER='regionpkg.broken:handle' cannot be "
                                     "loaded: RuntimeError: config missing")


def test_up_with_unloadable_handler_exits_2(tmp_path: Path) -> None:
    """`holdfast up --handler` that cannot be imported exits 2 and says why, starting nothing."""
    proc = subprocess.run([sys.executable, "-m", "holdfast.cli.main", "up", "--handler",
                           "nosuchpkg.mod:fn", "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "No module named 'nosuchpkg'" in proc.stderr and "local AWS" not in proc.stdout


def test_interrupted_session_leaves_no_process(tmp_path: Path) -> None:
    """A test suite interrupted by Ctrl-C (KeyboardInterrupt) still stops every child."""
    (tmp_path / "test_interrupt.py").write_text(textwrap.dedent("""
        import os
        from pathlib import Path

        def test_interrupted(holdfast_fleet):
            pids = [p.pid for p in holdfast_fleet.fleet.workers.values()]
            pids += [holdfast_fleet.fleet.runner.pid, holdfast_fleet.fleet.upstream.pid]
            pids += [c.proc.pid for c in holdfast_fleet.fleet.aws.children]
            Path(os.environ["PIDS_FILE"]).write_text(" ".join(map(str, pids)))
            raise KeyboardInterrupt
    """))
    pids_file = tmp_path / "pids"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--holdfast-handler", "tests.fleet.user_handler:handle",
                           "-o", "holdfast_workers=1", str(tmp_path / "test_interrupt.py")],
                          cwd=tmp_path, capture_output=True, text=True,
                          timeout=120 * TIMEOUT_SCALE, check=False,
                          env={**os.environ, "PIDS_FILE": str(pids_file),
                               "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 2, proc.stdout[-3000:]  # pytest's "interrupted"
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) >= 5
    alive = [p for p in pids if _alive(p)]
    assert not alive, f"left running: {alive}\n{proc.stdout[-3000:]}"


def test_overridden_options_keep_the_default_import_path_and_a_failed_start_is_not_repeated(
        tmp_path: Path) -> None:
    """Options a conftest returns without ``pythonpath`` import the handler from the rootdir,
    run from a subfolder too; a start that failed fails the next test at once, saying so."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "h.py").write_text('raise RuntimeError("imported from the rootdir")\n')
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(textwrap.dedent("""
        import pytest
        from holdfast import FleetOptions

        @pytest.fixture
        def holdfast_options():
            return FleetOptions(handler="userpkg.h:handle", workers=1)
    """))
    (tests / "test_two.py").write_text(textwrap.dedent("""
        def test_one(holdfast_fleet):
            pass

        def test_two(holdfast_fleet):
            pass
    """))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_two.py"], cwd=tests, capture_output=True, text=True,
                          timeout=120 * TIMEOUT_SCALE, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "2 errors" in out, out[-3000:]
    assert "RuntimeError: imported from the rootdir" in out, out[-3000:]
    assert "not started again (the same options failed for an earlier test)" in out, out[-3000:]


def test_a_fallback_to_moto_is_a_warning_pytest_shows(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` served by moto (no DynamoDB Local) warns, naming how to get DynamoDB Local; a
    fleet on DynamoDB Local, or on moto by request, does not."""
    monkeypatch.setenv("HOLDFAST_DYNAMODB_LOCAL_DIR", str(tmp_path))
    on_moto = LocalAws(backend="moto", workdir=tmp_path / "a")
    on_ddb = LocalAws(backend="dynamodb-local", workdir=tmp_path / "b")
    on_moto.backend, on_ddb.backend = "moto", "dynamodb-local"
    said = fallback_warning("auto", on_moto)
    assert said and "moto serves DynamoDB" in said and str(tmp_path) in said
    assert fallback_warning("auto", on_ddb) is None
    assert fallback_warning("moto", on_moto) is None and fallback_warning("auto", None) is None


def test_a_fleet_without_a_handler_is_a_warning_pytest_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No handler given (a forgotten or misspelled ini option): the fleet runs the recorder
    alone and pytest's warnings summary says so (every test passed, none of the user's code
    run); the recorder named on purpose, or a handler, says nothing."""
    import warnings
    from types import SimpleNamespace

    from holdfast.fleet.recorder import RECORDER_SPEC
    from holdfast.testing import FleetOptions, harness
    from holdfast.testing.plugin import _Pool

    class Started:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.fleet = SimpleNamespace(aws=None)

        def start(self) -> Started:
            return self

        def close(self) -> None:
            pass

    monkeypatch.setattr(harness, "LocalFleet", Started)
    said = {}
    for handler in (None, RECORDER_SPEC, "myapp.handlers:on_message"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _Pool(tmp_path).get(FleetOptions(handler=handler), handler)
        said[handler] = [str(w.message) for w in caught]
    assert len(said[None]) == 1 and "the recorder alone, none of your code" in said[None][0]
    assert said[RECORDER_SPEC] == [] and said["myapp.handlers:on_message"] == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of an exited child is not running (its parent, pytest, is gone).
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_stream_urls_from_a_template() -> None:
    """--url templates replace {id}; the demo upstream's base gets /s/<id>."""
    from holdfast.fleet.session import stream_url

    assert stream_url("ws://127.0.0.1:9000/feed/{id}?x=1", "a") == "ws://127.0.0.1:9000/feed/a?x=1"
    assert stream_url("ws://127.0.0.1:5", "b") == "ws://127.0.0.1:5/s/b"
