"""One ``holdfast up`` run: watch the table, drive the fleet, report crashes, stop on a signal.

``tick()`` scans the table (every ~300 ms), feeds the observer, prints new events and checks
that no child died unexpectedly. Scenarios are plain sequential code on top of ``wait_until``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from holdfast.cli.fleetstate import sessions_by_worker
from holdfast.cli.listing import scan_all
from holdfast.core import names
from holdfast.core.exceptions import ConfigError, HoldfastError
from holdfast.core.model import LeaseItem
from holdfast.core.rules import LeaseTiming
from holdfast.core.schema import STARTED
from holdfast.core.sessions import SessionItem, SessionStore
from holdfast.core.table import create_stream
from holdfast.fleet.observer import Observer
from holdfast.fleet.procs import Fleet, client_for_env
from holdfast.fleet.view import Snapshot, View

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["Interrupted", "Session", "stream_url"]

_STYLE = {"claimed": "green", "moved": "cyan", "released": "yellow", "expired": "red",
          "removed": "magenta", "action": "bold", "crash": "bold red"}


def stream_url(base_url: str, conn_id: str) -> str:
    """The demo upstream's ``<base>/s/<id>``, or a user's template with ``{id}`` replaced."""
    if "{id}" in base_url:
        return base_url.replace("{id}", conn_id)
    return f"{base_url}/s/{conn_id}"


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop the scenario and shut the fleet down."""


class Session:
    def __init__(self, fleet: Fleet, view: View, stop: threading.Event, *,
                 poll_s: float = 0.3, title: str = "holdfast up") -> None:
        self.fleet = fleet
        self.view = view
        self.stop = stop
        self.poll_s = poll_s
        self.title = title
        self.observer = Observer()
        self.t0 = time.monotonic()
        self.crashes: list[str] = []
        self._after_stop = False  # ``tick_final``'s scan: the views say so
        self.items: dict[str, LeaseItem] = {}
        self.updated_ms: dict[str, int] = {}
        self._ddb: DynamoDBClient | None = None
        self._session_store: SessionStore | None = None
        # Wall ms of the last write seen with each claim / release (the item's updated_at_ms):
        # finer than the scan period, for the unowned-time figures.
        self.claimed_wall: dict[str, list[tuple[str, int]]] = {}
        self.released_wall: dict[str, list[int]] = {}

    @property
    def ddb(self) -> DynamoDBClient:
        if self._ddb is None:
            self._ddb = client_for_env(self.fleet.env, "dynamodb", read_timeout=3,
                                       retries=2)
        return self._ddb

    @property
    def table(self) -> str:
        return self.fleet.env["HOLDFAST_TABLE"]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _sessions(self) -> dict[str, SessionItem] | None:
        """The session items by worker id, so only a live session counts as holding (an
        owner's future backstop expiry is not a holding); None if they cannot be read."""
        table = self.fleet.env.get(names.ENV_SESSION_TABLE)
        if not table:
            return None
        if self._session_store is None:
            self._session_store = SessionStore(self.ddb, table, "", ttl_ms=0, skew_ms=0)
        try:
            return {w: item for w, item in sessions_by_worker(self._session_store.scan()).items()
                    if isinstance(item, SessionItem)}
        except HoldfastError as exc:
            self.say(f"session scan failed: {exc}", "red")
            return None

    def _skew_ms(self) -> int:
        try:
            return LeaseTiming.from_env(self.fleet.env).skew_ms
        except ConfigError:
            return LeaseTiming().skew_ms

    def say(self, text: str, style: str = "") -> None:
        self.view.line(self.now(), text, style)

    def action(self, text: str) -> None:
        self.observer.note(self.now(), text, "action")
        self.say(f"==> {text}", "bold")

    def create_streams(self, count: int, base_url: str, prefix: str = "demo",
                       spread_s: float = 0.0) -> list[str]:
        return self.create_streams_named([f"{prefix}-{i:02d}" for i in range(1, count + 1)],
                                         base_url, spread_s)

    def wait_workers_ready(self, timeout_s: float = 30) -> bool:
        """Until every worker logged "worker started" (claims made before are all one's)."""
        def ready() -> bool:
            return all(p.worker_started() for p in self.fleet.workers.values() if p.alive())
        return self.wait_until(ready, timeout_s)

    def create_streams_named(self, ids: list[str], base_url: str,
                             spread_s: float = 0.0) -> list[str]:
        for n, conn_id in enumerate(ids):
            if n and spread_s:
                # One at a time: each nudge wakes a different waiting poller, so the streams
                # spread over the workers instead of one receive taking a batch of ten.
                self.sleep(spread_s)
            # Exactly what a user does: insert a STARTED item with the seed attributes.
            create_stream(self.ddb, self.table, conn_id, stream_url(base_url, conn_id))
        return ids

    def tick(self) -> None:
        if self.stop.is_set():
            raise Interrupted()
        t = self.now()
        try:
            scanned, self.updated_ms = scan_all(self.ddb, self.table)
        except HoldfastError as exc:
            self.say(f"table scan failed: {exc}", "red")
            scanned = []
        else:
            items = [i for i in scanned if isinstance(i, LeaseItem)]
            self.items = {i.conn_id: i for i in items}
            wall = int(time.time() * 1000)
            for ev in self.observer.observe(t, wall, items, self._sessions(), self._skew_ms()):
                self.say(ev.text, _STYLE.get(ev.kind, ""))
                if ev.conn_id is None:
                    continue
                at = self.updated_ms.get(ev.conn_id, wall)
                owner = self.observer.worker_of(ev.conn_id)  # a worker id, as victims are
                if ev.kind in ("claimed", "moved") and owner:
                    self.claimed_wall.setdefault(ev.conn_id, []).append((owner, at))
                elif ev.kind == "released":
                    self.released_wall.setdefault(ev.conn_id, []).append(at)
        for proc in self.fleet.crashed():
            msg = (f"{proc.name} (pid {proc.pid}) exited unexpectedly with code "
                   f"{proc.returncode()}; log: {proc.log_path}")
            self.crashes.append(msg)
            self.say(msg, "bold red")
            for line in proc.tail(5).splitlines():
                self.say(f"    {line[:200]}", "red")
        self.view.refresh(self.snapshot())

    def tick_final(self) -> None:
        """One last scan after the workers stopped (their final checkpoints), even if stopping."""
        was = self.stop.is_set()
        self.stop.clear()
        self._after_stop = True
        try:
            self.tick()
        finally:
            if was:
                self.stop.set()

    def snapshot(self) -> Snapshot:
        states = {}
        for wid, proc in self.fleet.workers.items():
            code = proc.returncode()
            states[wid] = ("running" if code is None and not proc.expected_exit else
                           "paused" if code is None and proc.paused else
                           "stopping" if code is None else f"exited {code}")
        return Snapshot(self.now(), states, self.observer.loads(),
                        list(self.observer.streams.values()), self.title,
                        after_stop=self._after_stop)

    def sleep(self, seconds: float) -> None:
        self.wait_until(lambda: False, seconds)

    def wait_until(self, pred: Callable[[], bool], timeout_s: float) -> bool:
        """Tick until ``pred()`` holds (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            started = time.monotonic()
            self.tick()
            if pred():
                return True
            if started >= deadline:
                return False
            self.stop.wait(max(0.0, min(self.poll_s - (time.monotonic() - started),
                                        deadline - time.monotonic())))

    # -- predicates ------------------------------------------------------------------------
    def unowned_started(self, ids: list[str] | None = None) -> list[str]:
        return [c for c, v in self.observer.streams.items()
                if v.desired_state == STARTED and v.owner is None and (ids is None or c in ids)]

    def all_owned(self, ids: list[str]) -> bool:
        return all(self.observer.owner_of(c) for c in ids)

    def write_log_index(self, path: Path) -> None:
        lines = [f"{p.name}: {p.log_path}" for p in
                 [self.fleet.runner, self.fleet.upstream, *self.fleet.workers.values()] if p]
        path.write_text("\n".join(lines) + "\n")
