"""In-process worker helpers: run a ``Supervisor`` on the test loop with its own trigger."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.orders import prefix_for
from holdfast.core.schema import BACKSTOP_MS
from holdfast.core.sessions import sweep_sessions
from holdfast.core.store import LeaseStore
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.balancer import Balancer, BalanceRound
from holdfast.worker.config import WorkerConfig
from holdfast.worker.connection import Connection
from holdfast.worker.handler import Handler, Message
from holdfast.worker.holdings import Holdings
from holdfast.worker.protocol import QueryParamProtocol
from holdfast.worker.supervisor import Supervisor
from tests.conftest import client_for
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until, worker_config

__all__ = ["DeciderSim", "Recorder", "running_worker"]


@dataclass
class Recorder:
    """A handler that records (conn_id, seq) in call order; optionally raises on some seqs
    (every call, or with ``transient`` only the first call per stream and seq)."""

    calls: list[Message] = field(default_factory=list)
    fail_on: set[int] = field(default_factory=set)
    delay_s: float = 0.0
    transient: bool = False
    failed: set[tuple[str, int]] = field(default_factory=set)

    async def __call__(self, message: Message) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.calls.append(message)
        if message.seq in self.fail_on:
            key = (message.conn_id, message.seq)
            if not (self.transient and key in self.failed):
                self.failed.add(key)
                raise RuntimeError(f"boom at {message.seq}")

    def seqs(self, conn_id: str) -> list[int]:
        return [m.seq for m in self.calls if m.conn_id == conn_id and m.seq is not None]


@dataclass
class Running:
    worker: Supervisor
    stop: asyncio.Event
    task: asyncio.Task[Counter[str]]


@contextlib.asynccontextmanager
async def running_worker(fleet: Fleet, handler: Handler, **env: str) -> AsyncIterator[Running]:
    """A worker running until the block ends (then stopped gracefully and awaited)."""
    config = worker_config(fleet, **env)
    worker = Supervisor(config, ddb=client_for(fleet.aws, "dynamodb"),
                    sqs=client_for(fleet.aws, "sqs"), handler=handler)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop.wait))
    running = Running(worker, stop, task)
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


@dataclass
class Alone:
    """A worker's holdings alone (``holdings_alone``), with its handler, store and supervisor."""

    holdings: Holdings
    rec: Recorder
    store: LeaseStore
    sup: Supervisor


def holdings_alone(fleet: Fleet, *, config: WorkerConfig | None = None,
                   owner: Callable[[], str | None] | None = None,
                   streams: dict[str, Connection] | None = None,
                   session_fence: Callable[[], int] | None = None,
                   store_class: type[LeaseStore] = LeaseStore,
                   store_kwargs: dict[str, Any] | None = None) -> Alone:
    """A worker's holdings with no session, claims by hand and no fence watcher: as ``owner``
    (default one fixed owner), on a ``store_class`` (default the real ``LeaseStore``; its
    extra arguments ``store_kwargs``), the session's fence ``session_fence`` (default a
    minute ahead)."""
    config = config or worker_config(fleet)
    ddb = client_for(fleet.aws, "dynamodb")
    sup = Supervisor(config, ddb=ddb, sqs=client_for(fleet.aws, "sqs"), handler=Recorder())
    fixed = f"{config.worker_id}#holdings"
    leases = store_class(ddb, config.table, lease_ms=BACKSTOP_MS, skew_ms=config.timing.skew_ms,
                         **(store_kwargs or {}))
    rec = Recorder()
    holdings = Holdings(
        config, leases, sup.checkpointer, handler=rec, protocol=QueryParamProtocol(),
        streams={} if streams is None else streams, owner=owner or (lambda: fixed),
        stopping=lambda: False, session_fence=session_fence or (lambda: sup.mono() + 60_000),
        wall=sup.wall, mono=sup.mono, metrics=sup.metrics, counts=Counter(),
        balancing=sup.balancing)
    return Alone(holdings, rec, leases, sup)


def item_attr(item: dict[str, Any], name: str) -> Any:
    value = item.get(name)
    if not value:
        return None
    return value.get("S") if "S" in value else int(value["N"]) if "N" in value else value


async def start_held(fleet: Fleet, upstream: UpstreamThread, run: Running,
                     conns: list[str]) -> None:
    """Create and nudge ``conns`` (on the demo upstream); wait until ``run``'s worker holds
    every one."""
    for c in conns:
        fleet.create(c, upstream.url(c))
        fleet.nudge(c)
    await async_wait_until(lambda: all(c in run.worker.streams for c in conns), 10,
                           f"{len(conns)} streams held")


async def nudge_until_backoff(fleet: Fleet, conn: str, timeout_s: float, what: str) -> None:
    """Nudge ``conn`` and wait until its item is in BACKOFF (given up or parked)."""
    fleet.nudge(conn)
    await async_wait_until(lambda: item_attr(fleet.item(conn), "status") == "BACKOFF",
                           timeout_s, what)


def set_attr(fleet: Fleet, conn_id: str, name: str, value: dict[str, Any]) -> None:
    """Set one attribute of a stream's item, as an operator would."""
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn_id}"}},
                          UpdateExpression="SET #a = :v", ExpressionAttributeNames={"#a": name},
                          ExpressionAttributeValues={":v": value})


async def claim_directly(fleet: Fleet, upstream: UpstreamThread, run: Running,
                         conns: list[str]) -> None:
    """Create ``conns`` (on the demo upstream) and have ``run``'s worker claim each itself, no
    nudge (another running worker would take some), once its session is up."""
    await async_wait_until(lambda: run.worker.owner, 5, "a session")
    for c in conns:
        fleet.create(c, upstream.url(c))
    for c in conns:
        await run.worker.holdings.claim(c)


class DeciderSim:
    """Stands in for the sweeper's placement decider: the real ``Balancer`` over the fleet's
    live sessions every ``period_s``, a decision an interval apart or at once when a member
    begins draining, written to the session items and sent to the order queues."""

    def __init__(self, fleet: Fleet, period_s: float = 0.1) -> None:
        self.fleet, self.period_s = fleet, period_s
        self.balancer = Balancer(Settings(
            table=fleet.table, queue_url=fleet.queue_url, session_table=fleet.session_table,
            orders_queue_prefix=prefix_for(fleet.table), balance_interval_ms=60_000))
        self.rounds: list[BalanceRound] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        sessions, sqs = self.fleet.sessions(), client_for(self.fleet.aws, "sqs")
        log = logging.getLogger("tests.decidersim")
        while not self.stop_event.wait(self.period_s):
            now = int(time.time() * 1000)
            # The sweeper's own view of the live sessions (its session half, as RouterSim runs).
            alive = sweep_sessions(sessions, now, sessions.skew_ms, log).alive
            done = self.balancer.step(sessions, sqs, alive, unowned=0, now_ms=now, logger=log)
            if done is not None:
                self.rounds.append(done)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
