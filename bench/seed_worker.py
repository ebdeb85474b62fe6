"""``python -m bench.seed_worker``: the seed's design as a program of its own (the baseline).

It does what the seed tutorial's worker does and nothing more, so the bench compares our
worker with the seed's code rather than with a mode of our own:

- **acquire**: one conditional ``UpdateItem`` per stream, ``desired_state = STARTED AND
  (attribute_not_exists(lease_expires_at_ms) OR lease_expires_at_ms < now)``, setting
  ``lease_owner`` (the worker id) and ``lease_expires_at_ms = now + lease``. The owner is not
  part of the condition, as in the seed;
- **renew**: every heartbeat, one ``UpdateItem`` per held stream conditional on ``lease_owner``
  (and ``STARTED``: a stop takes effect at the next renewal), carrying ``last_seq``;
- **release** on SIGTERM: ``lease_expires_at_ms = 0`` with the final ``last_seq``, the owner left
  in place, as the seed's ``release_lease`` does;
- **reconcile**: every ``HOLDFAST_RECONCILE_SECONDS`` (+/- 25 %), a ``Query`` of the
  ``desired_state-lease_expires_at_ms-index`` for STARTED items whose lease has expired, each
  tried with the acquire above. No router, no sweeper, no sessions.

Each held stream is read with ``websockets`` from ``ws_url`` resumed at ``last_seq + 1`` (the
``from_seq`` query parameter the demo upstream reads) and each frame handed to
``HOLDFAST_HANDLER`` as our worker's ``Message``, so the bench's recorder and its loss and
duplicate checks see both designs alike. Configured from the variables the fleet passes to our
worker: ``HOLDFAST_TABLE``, ``HOLDFAST_WORKER_ID``, ``HOLDFAST_HANDLER``,
``HOLDFAST_LEASE_SECONDS`` (20), ``HOLDFAST_HEARTBEAT_SECONDS`` (5),
``HOLDFAST_RECONCILE_SECONDS`` (60), ``HOLDFAST_SHUTDOWN_SECONDS``,
``HOLDFAST_RECONNECT_BASE_SECONDS`` / ``_CAP_SECONDS`` and ``HOLDFAST_SEND_WORKER_ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import boto3
import websockets
from botocore.config import Config

from holdfast.core import names
from holdfast.core.schema import ATTR, GSI_NAME, STARTED, conn_id_from_pk, pk_for
from holdfast.worker.handler import Handler, Message, load_handler

__all__ = ["SeedConfig", "SeedTable", "SeedWorker", "main", "now_ms", "resume_url"]

Client = Any
_NAMES = {"#ds": ATTR.desired_state, "#owner": ATTR.lease_owner,
          "#exp": ATTR.lease_expires_at_ms, "#seq": ATTR.last_seq}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class SeedTable:
    """The seed's four DynamoDB calls, as ``owner`` on ``table``; ``clock``: wall ms."""

    ddb: Client
    table: str
    owner: str
    lease_ms: int
    clock: Callable[[], int] = now_ms

    def acquire(self, conn_id: str) -> dict[str, Any] | None:
        """Take an expired STARTED lease; the item as written, or None if refused."""
        now = self.clock()
        try:
            return dict(self._update(
                conn_id, "SET #owner = :me, #exp = :exp",
                "#ds = :started AND (attribute_not_exists(#exp) OR #exp < :now)",
                {":exp": _n(now + self.lease_ms), ":started": {"S": STARTED}, ":now": _n(now)},
                ReturnValues="ALL_NEW")["Attributes"])
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return None

    def renew(self, conn_id: str, last_seq: int | None) -> bool:
        """Extend one lease and checkpoint; False if it is no longer ours (or not STARTED)."""
        return self._write(conn_id, self.clock() + self.lease_ms, last_seq,
                           "#owner = :me AND #ds = :started", {":started": {"S": STARTED}})

    def release(self, conn_id: str, last_seq: int | None) -> bool:
        """Expiry 0 and the final checkpoint, the owner left in place."""
        return self._write(conn_id, 0, last_seq, "#owner = :me", {})

    def due(self) -> list[str]:
        """The reconcile's index query: ids of STARTED streams whose lease has expired."""
        kwargs: dict[str, Any] = {
            "TableName": self.table, "IndexName": GSI_NAME,
            "KeyConditionExpression": "#ds = :started AND #exp < :now",
            "ExpressionAttributeNames": _names("#ds #exp"),
            "ExpressionAttributeValues": {":started": {"S": STARTED}, ":now": _n(self.clock())}}
        out: list[str] = []
        while True:
            resp = self.ddb.query(**kwargs)
            out += [conn_id_from_pk(item[ATTR.pk]["S"]) for item in resp.get("Items", [])]
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _write(self, conn_id: str, expires: int, last_seq: int | None, cond: str,
               values: dict[str, Any]) -> bool:
        update = "SET #exp = :exp" + (", #seq = :seq" if last_seq is not None else "")
        values = {**values, ":exp": _n(expires)}
        if last_seq is not None:
            values[":seq"] = _n(last_seq)
        try:
            self._update(conn_id, update, cond, values)
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _update(self, conn_id: str, update: str, cond: str, values: dict[str, Any],
                **extra: str) -> Any:
        return self.ddb.update_item(
            TableName=self.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
            UpdateExpression=update, ConditionExpression=cond,
            ExpressionAttributeNames=_names(update + cond),
            ExpressionAttributeValues={**values, ":me": {"S": self.owner}}, **extra)


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _names(text: str) -> dict[str, str]:
    return {k: v for k, v in _NAMES.items() if k in text}


def resume_url(ws_url: str, next_seq: int | None) -> str:
    """``ws_url`` with ``from_seq=next_seq`` in its query (replacing one already there)."""
    if next_seq is None:
        return ws_url
    parts = urlsplit(ws_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "from_seq"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("from_seq", str(next_seq))])))


@dataclass(frozen=True, slots=True)
class SeedConfig:
    table: str
    worker_id: str
    handler: str | None
    lease_ms: int = 20_000
    heartbeat_s: float = 5.0
    reconcile_s: float = 60.0
    shutdown_s: float = 8.0
    reconnect_base_s: float = 0.5
    reconnect_cap_s: float = 30.0
    send_worker_id: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str]) -> SeedConfig:
        def num(name: str, default: float) -> float:
            return float(env.get(name) or default)

        return cls(table=env[names.ENV_TABLE],
                   worker_id=env.get("HOLDFAST_WORKER_ID") or f"{socket.gethostname()}-"
                                                              f"{os.getpid()}",
                   handler=env.get(names.ENV_HANDLER) or None,
                   lease_ms=round(num(names.ENV_LEASE_SECONDS, 20) * 1000),
                   heartbeat_s=num(names.ENV_HEARTBEAT_SECONDS, 5),
                   reconcile_s=num(names.ENV_RECONCILE_SECONDS, 60),
                   shutdown_s=num(names.ENV_SHUTDOWN_SECONDS, 8),
                   reconnect_base_s=num("HOLDFAST_RECONNECT_BASE_SECONDS", 0.5),
                   reconnect_cap_s=num("HOLDFAST_RECONNECT_CAP_SECONDS", 30),
                   send_worker_id=env.get("HOLDFAST_SEND_WORKER_ID", "").lower() == "true")


def log(message: str, **fields: object) -> None:
    print(json.dumps({"message": message, "ts_ms": now_ms(), **fields}), flush=True)


@dataclass
class _Held:
    conn_id: str
    ws_url: str
    handled: int | None  # the last seq handled (the checkpoint at acquire until one is)
    task: asyncio.Task[None] | None = None


class SeedWorker:
    """The seed's loops on one event loop; every DynamoDB call runs in a thread."""

    def __init__(self, cfg: SeedConfig, ddb: Client, handler: Handler) -> None:
        self.cfg, self.handler = cfg, handler
        self.table = SeedTable(ddb, cfg.table, cfg.worker_id, cfg.lease_ms)
        self.held: dict[str, _Held] = {}
        self.stop = asyncio.Event()

    async def run(self) -> None:
        """Until ``self.stop`` is set; then stop delivering and release every stream."""
        log("worker started", worker_id=self.cfg.worker_id, design="seed")
        # The loops end between two calls, not by cancellation: a cancelled ``to_thread`` call
        # still lands, and a renewal landing after the release would undo it.
        await asyncio.gather(
            self._every(self.reconcile, lambda: self.cfg.reconcile_s * random.uniform(
                0.75, 1.25), at_once=True),  # at once, then every period +/- 25 %
            self._every(self.renew_all, lambda: self.cfg.heartbeat_s))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.cfg.shutdown_s):
                await self.release_all()
        log("worker stopped", worker_id=self.cfg.worker_id)

    async def _every(self, step: Callable[[], Awaitable[None]], period_s: Callable[[], float],
                     *, at_once: bool = False) -> None:
        if at_once:
            await step()
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), period_s())
            if not self.stop.is_set():
                await step()

    async def reconcile(self) -> None:
        try:
            due = await asyncio.to_thread(self.table.due)
        except Exception as exc:  # the next pass tries again
            log("reconcile failed", error=repr(exc))
            return
        for conn_id in due:
            if self.stop.is_set():
                return
            if conn_id in self.held:
                continue
            try:
                item = await asyncio.to_thread(self.table.acquire, conn_id)
            except Exception as exc:
                log("acquire failed", conn_id=conn_id, error=repr(exc))
                continue
            if item is not None:
                seq = item.get(ATTR.last_seq, {}).get("N")
                h = _Held(conn_id, item[ATTR.ws_url]["S"], int(seq) if seq else None)
                h.task = asyncio.create_task(self.deliver(h))
                self.held[conn_id] = h
                log("acquired", conn_id=conn_id)

    async def renew_all(self) -> None:
        for h in list(self.held.values()):
            if self.stop.is_set():
                return
            try:
                ok = await asyncio.to_thread(self.table.renew, h.conn_id, h.handled)
            except Exception as exc:  # not renewed this time; the seed simply tries again
                log("renew failed", conn_id=h.conn_id, error=repr(exc))
                continue
            if not ok:
                log("lease lost", conn_id=h.conn_id)
                await self._drop(h)

    async def _drop(self, h: _Held) -> None:
        self.held.pop(h.conn_id, None)
        if h.task is not None:
            h.task.cancel()
            await asyncio.gather(h.task, return_exceptions=True)

    async def release_all(self) -> None:
        for h in list(self.held.values()):
            await self._drop(h)
            with contextlib.suppress(Exception):  # unreleased: it expires instead
                await asyncio.to_thread(self.table.release, h.conn_id, h.handled)

    async def deliver(self, h: _Held) -> None:
        headers = {"X-Holdfast-Worker": self.cfg.worker_id} if self.cfg.send_worker_id else {}
        delay = self.cfg.reconnect_base_s
        while True:
            url = resume_url(h.ws_url, None if h.handled is None else h.handled + 1)
            try:
                async with websockets.connect(url, additional_headers=headers) as ws:
                    delay = self.cfg.reconnect_base_s
                    async for frame in ws:
                        await self._handle(h, frame)
            except (OSError, websockets.WebSocketException) as exc:
                log("connection ended", conn_id=h.conn_id, error=repr(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.cfg.reconnect_cap_s)

    async def _handle(self, h: _Held, frame: str | bytes) -> None:
        seq: int | None = None
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            value = json.loads(frame).get("seq")
            seq = value if isinstance(value, int) and not isinstance(value, bool) else None
        if seq is not None and h.handled is not None and seq <= h.handled:
            return  # a replay of what this holder already handled
        try:
            await self.handler(Message(h.conn_id, seq, frame, self.cfg.worker_id))
        except Exception as exc:  # logged; the stream goes on
            log("handler failed", conn_id=h.conn_id, seq=seq, error=repr(exc))
        if seq is not None:
            h.handled = seq


async def _main() -> int:
    cfg = SeedConfig.from_env(dict(os.environ))
    # Short timeouts, few retries: a renewal must not hang past the lease.
    config = Config(connect_timeout=2, read_timeout=3, retries={"mode": "standard",
                                                                "max_attempts": 3})
    worker = SeedWorker(cfg, boto3.session.Session().client("dynamodb", config=config),
                        load_handler(cfg.handler))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop.set)
    await worker.run()
    return 0


def main() -> int:
    return asyncio.run(_main())


if __name__ == "__main__":
    sys.exit(main())
