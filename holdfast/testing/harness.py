"""``LocalFleet``: the local fleet of ``holdfast up`` (``holdfast.fleet.procs.Fleet``), driven
from a test: local AWS, the router runner, the demo upstream and N real ``python -m worker``
processes running the user's handler wrapped by the recorder.

Every child runs in a process group of its own and, on Linux, dies with the test process even
if that is SIGKILLed; ``close()`` (also run at exit) stops them all, workers first.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from holdfast.core.model import LeaseItem
from holdfast.core.schema import STOPPED
from holdfast.core.table import create_stream, set_desired_state
from holdfast.fleet.procs import Fleet, FleetError, client_for_env
from holdfast.fleet.recorder import Handled, read_records
from holdfast.fleet.report import SeqCheck, check_seqs
from holdfast.fleet.scenario import open_connections
from holdfast.testing.checks import failing_streams, last_handler_error, sink_problems
from holdfast.testing.options import FleetOptions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["LocalFleet"]


def _wait(pred: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


class LocalFleet:
    """One running local fleet; ``timeout_scale`` stretches every wait (slow CI)."""

    def __init__(self, options: FleetOptions, run_dir: Path | None = None, *,
                 timeout_scale: float = 1.0) -> None:
        self.options = options
        self.scale = timeout_scale
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="holdfast-fleet-"))
        self.fleet = Fleet(self.run_dir, options.timing, backend=options.backend,
                           handler=options.handler, pythonpath=options.pythonpath,
                           worker_env=options.worker_env, die_with_parent=True)
        self.base_url = ""
        self.crashes: list[str] = []
        self.started: list[str] = []  # streams start_stream inserted, in order
        self._ddb: DynamoDBClient | None = None
        self._next = 1
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LocalFleet:
        """Check the handler loads, then local AWS, setup hook, runner, upstream, workers."""
        why = self.fleet.check_handler()
        if why:
            raise FleetError(f"handler {self.options.handler}: {why}")
        atexit.register(self.close)
        try:
            self.fleet.start_aws()
            if self.options.setup is not None:
                self.fleet.worker_env.update(self.options.setup(dict(self.fleet.env)) or {})
            self.fleet.start_runner()
            self.base_url = self.fleet.start_upstream()
            for _ in range(self.options.workers):
                self.start_worker(wait=False)
            self.wait_workers_ready()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every child, workers first (gracefully); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        self.fleet.close()

    def __enter__(self) -> LocalFleet:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- what a test reads -----------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """The environment a worker gets (endpoints, credentials, tables, ``worker_env`` and
        what ``setup`` returned): what a client of this fleet needs."""
        return {**self.fleet.env, **self.fleet.worker_env}

    @property
    def table(self) -> str:
        return self.fleet.env["HOLDFAST_TABLE"]

    @property
    def ddb(self) -> DynamoDBClient:
        """A DynamoDB client on the fleet's local DynamoDB."""
        if self._ddb is None:
            self._ddb = client_for_env(self.fleet.env, "dynamodb")
        return self._ddb

    def url(self, stream_id: str, kind: str = "s") -> str:
        """The demo upstream's URL for ``stream_id``; ``kind``: s, garbage, huge, drop, reject."""
        return f"{self.base_url}/{kind}/{stream_id}"

    def item(self, conn_id: str) -> LeaseItem | None:
        raw = self.ddb.get_item(TableName=self.table, Key={"Pk": {"S": f"CONN#{conn_id}"}},
                                ConsistentRead=True).get("Item")
        return LeaseItem.from_ddb(raw) if raw else None

    def owner(self, conn_id: str) -> str | None:
        """The worker id holding ``conn_id`` now (None: nobody)."""
        item = self.item(conn_id)
        return item.lease_owner.partition("#")[0] if item and item.lease_owner else None

    def handled(self, conn_id: str | None = None) -> list[Handled]:
        """Every recorded handler call (of ``conn_id`` only, if given), in file order."""
        return [h for h in read_records(self.fleet.record_dir)
                if conn_id is None or h.conn_id == conn_id]

    def upstream_connections(self) -> dict[str, int]:
        """Stream id -> connections the demo upstream holds open now."""
        return open_connections(self.fleet.conn_log)

    def live_workers(self) -> list[str]:
        return [w for w, p in self.fleet.workers.items() if p.alive() and not p.expected_exit]

    # -- what a test does ------------------------------------------------------------------
    def new_id(self, prefix: str = "s") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def start_stream(self, conn_id: str | None = None, url: str | None = None) -> str:
        """Insert a STARTED stream (the demo upstream's ``/s/<id>`` unless ``url``)."""
        conn_id = conn_id or self.new_id()
        if not create_stream(self.ddb, self.table, conn_id, url or self.url(conn_id)):
            raise AssertionError(f"stream {conn_id} already exists")
        self.started.append(conn_id)
        return conn_id

    def stop_stream(self, conn_id: str, *, wait: bool = True, timeout_s: float = 15) -> None:
        """Set STOPPED; with ``wait``, until its lease is released."""
        set_desired_state(self.ddb, self.table, conn_id, STOPPED)
        if wait:
            _wait(lambda: self.owner(conn_id) is None, timeout_s * self.scale,
                  f"{conn_id} to be released")

    def wait_owned(self, conn_id: str, *, not_by: str | None = None,
                   timeout_s: float = 20) -> str:
        """Until a worker (other than ``not_by``) holds ``conn_id``; its id."""
        got: list[str] = []

        def held() -> bool:
            owner = self.owner(conn_id)
            if owner and owner != not_by:
                got.append(owner)
            return bool(got)

        _wait(held, timeout_s * self.scale, f"{conn_id} to be owned"
              + (f" by a worker other than {not_by}" if not_by else ""))
        return got[0]

    def wait_handled(self, conn_id: str, count: int = 1, *, after: int = 0,
                     timeout_s: float = 20) -> list[Handled]:
        """Until ``count`` more handler calls on ``conn_id`` than ``after`` were made (a call
        that raised counts: ``Handled.raised``)."""
        self._wait_for(conn_id, lambda: len(self.handled(conn_id)) >= after + count, timeout_s,
                       f"{count} messages of {conn_id} handled")
        return self.handled(conn_id)

    def wait_new_seqs(self, conn_id: str, count: int = 1, *, past: int | None = None,
                      timeout_s: float = 20) -> list[Handled]:
        """Until ``count`` seqs above ``past`` (default: the highest handled now) were handled.

        Unlike ``wait_handled`` this does not count replays: after a failover the new holder
        first handles the replay window again, which may be longer than ``count``.
        """
        if past is None:
            past = max((h.seq for h in self.handled(conn_id)), default=0)
        floor = past

        def fresh() -> bool:
            return len({h.seq for h in self.handled(conn_id) if h.seq > floor}) >= count

        self._wait_for(conn_id, fresh, timeout_s, f"{count} new seqs of {conn_id} handled")
        return self.handled(conn_id)

    def _wait_for(self, conn_id: str, pred: Callable[[], object], timeout_s: float,
                  what: str) -> None:
        """``_wait``, and on a timeout what did arrive and where the workers' logs are."""
        try:
            _wait(pred, timeout_s * self.scale, what)
        except AssertionError as exc:
            got = self.handled(conn_id)
            raised = sum(h.raised for h in got)
            seqs = f", seqs {min(h.seq for h in got)}-{max(h.seq for h in got)}" if got else ""
            why = last_handler_error(self.fleet.worker_log_lines(), conn_id) if raised else None
            raise AssertionError(f"{exc}: {len(got)} handler calls so far ({raised} raised"
                                 f"{seqs}{f'; the last: {why}' if why else ''}); worker logs: "
                                 f"{self.fleet.run_dir}") from None

    def start_worker(self, *, wait: bool = True) -> str:
        while f"w{self._next}" in self.fleet.workers:
            self._next += 1
        wid = f"w{self._next}"
        self.fleet.start_worker(wid)
        if wait:
            self.wait_workers_ready()
        return wid

    def kill_worker(self, worker_id: str, *, hard: bool = False,
                    timeout_s: float | None = None) -> int | None:
        """SIGKILL (``hard``) or SIGTERM one worker and wait until it exited; its exit code."""
        proc = self.fleet.workers[worker_id]
        proc.expected_exit = True
        proc.signal(signal.SIGKILL if hard else signal.SIGTERM)
        budget = timeout_s or (self.options.timing.shutdown_s + 5) * self.scale
        _wait(lambda: not proc.alive(), budget, f"worker {worker_id} to exit")
        return proc.stop(0)

    def ensure_workers(self, count: int | None = None) -> None:
        """Start workers until ``count`` (default: the options') are running; a worker that
        exited on its own is recorded in ``crashes`` first."""
        self.collect_crashes()
        missing = (self.options.workers if count is None else count) - len(self.live_workers())
        for _ in range(missing):
            self.start_worker(wait=False)
        if missing > 0:
            self.wait_workers_ready()

    def collect_crashes(self) -> list[str]:
        """Add children that exited on their own since the last call to ``crashes``."""
        self.crashes += [proc.crash_line() for proc in self.fleet.crashed()]
        return self.crashes

    def wait_workers_ready(self, timeout_s: float = 30) -> None:
        """Until every live worker logged "worker started"; FleetError if one died."""
        def ready() -> bool:
            for proc in self.fleet.crashed():
                raise FleetError(proc.crash_line())
            return all(p.worker_started() for p in self.fleet.workers.values() if p.alive())
        _wait(ready, timeout_s * self.scale, "the workers to start")

    # -- verdicts ----------------------------------------------------------------------------
    def check(self, conn_ids: Iterable[str]) -> dict[str, SeqCheck]:
        """Per stream: handled seqs against its checkpoint (``last_seq``) in the table."""
        ids = list(conn_ids)
        # The table first: a checkpoint only ever covers seqs already recorded.
        checkpoints = {c: (i.last_seq if (i := self.item(c)) else None) for c in ids}
        records = [h for h in read_records(self.fleet.record_dir) if h.conn_id in checkpoints]
        return check_seqs(records, checkpoints)

    def assert_no_loss(self, conn_ids: Iterable[str],
                       stored: Callable[[str], Iterable[int]] | None = None,
                       ) -> dict[str, SeqCheck]:
        """Every seq from the first handled one to the checkpoint was handled; no crash.

        ``stored(conn_id)``, if given, answers the seqs the user's sink actually holds: each
        seq from the first delivered one to the checkpoint must be there too. The recorder
        counts deliveries (a call that raised is recorded too), so only this shows a handler
        that took a message and did not store it. With ``HOLDFAST_HANDLER_ON_FAILURE=skip``,
        answer the seqs sent to the on-failure queue as well.
        """
        checks = self.check(conn_ids)
        problems = [f"{c}: missed {s.missing[:10]}" for c, s in checks.items() if s.missing]
        problems += [f"{c}: nothing handled" for c, s in checks.items() if not s.handled]
        problems += [f"{line} (its errors: the worker logs in {self.fleet.run_dir})"
                     for line in failing_streams(self.handled(), checks)]
        if stored is not None:
            problems += sink_problems(checks, stored)
        self.collect_crashes()
        problems += self.crashes
        if problems:  # raised, not asserted: ``python -O`` strips an assert
            raise AssertionError("; ".join(problems))
        return checks

