"""A thin layer over ``holdfast.fleet.procs.Fleet`` for the soak and the benchmarks: workers
started through the clock-skew launcher, DynamoDB reached through a ``FaultProxy``, and a direct
(unproxied) client for the driver's own reads and writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from holdfast.chaos.consumed import index_keys_of
from holdfast.chaos.launch import OFFSET_ENV
from holdfast.chaos.proxy import FaultProxy
from holdfast.core.schema import table_definition
from holdfast.fleet.procs import REPO_ROOT, Fleet, Proc, client_for_env
from holdfast.fleet.recorder import RECORD_DIR_ENV
from holdfast.fleet.timing import FleetTiming

__all__ = ["ProxiedFleet"]


class ProxiedFleet:
    """Local AWS + runner (direct) + upstream + workers whose DynamoDB (and SQS) go through
    counting proxies. ``with_runner=False`` is the seed's polling design: no router, no sweeper.
    ``capacity=True``: the DynamoDB proxies also add up consumed capacity (the benchmarks).
    ``proxied=False``: no proxies at all, every process straight to the backend (nothing
    counted or faulted: for figures read from logs and records, where a proxy's hop and its
    CPU would only be in the way)."""

    def __init__(self, run_dir: Path, timing: FleetTiming, *, with_runner: bool = True,
                 worker_env: dict[str, str] | None = None, runner_env: dict[str, str] | None = None,
                 capacity: bool = False, proxied: bool = True) -> None:
        self.fleet = Fleet(run_dir, timing, backend="dynamodb-local")
        self.with_runner = with_runner
        self.capacity = capacity
        self.proxied = proxied
        self.runner_env = runner_env or {}
        self.worker_env = worker_env or {}
        self.ddb_proxy: FaultProxy | None = None
        self.sqs_proxy: FaultProxy | None = None
        self.runner_proxies: list[FaultProxy] = []
        self.direct_env: dict[str, str] = {}
        self.base_url = ""
        self._n = 0

    def start(self) -> ProxiedFleet:
        f = self.fleet
        f.start_aws()
        self.direct_env = dict(f.env)
        table = f.env["HOLDFAST_TABLE"]
        ddb_opts: dict[str, Any] = {"capacity": self.capacity,
                                    "index_keys": {table: index_keys_of(table_definition(table))}}
        if self.with_runner:
            # The runner plays the router and sweeper Lambdas: its DynamoDB (index queries)
            # and SQS (nudges) calls are counted too; its Streams reads stay direct (free to a
            # Lambda event source mapping).
            through: dict[str, str] = {}
            if self.proxied:
                rd = FaultProxy(f.env["AWS_ENDPOINT_URL_DYNAMODB"], name="runner-ddb",
                                **ddb_opts).start()
                rs = FaultProxy(f.env["AWS_ENDPOINT_URL_SQS"], name="runner-sqs").start()
                self.runner_proxies = [rd, rs]
                through = {"AWS_ENDPOINT_URL_DYNAMODB": rd.url, "AWS_ENDPOINT_URL_SQS": rs.url,
                           "AWS_ENDPOINT_URL_DYNAMODB_STREAMS": f.env["AWS_ENDPOINT_URL_DYNAMODB"]}
            saved = dict(f.env)
            f.env.update(**through, **self.runner_env)
            f.start_runner()
            f.env.clear()
            f.env.update(saved)
        if self.proxied:
            self.ddb_proxy = FaultProxy(f.env["AWS_ENDPOINT_URL_DYNAMODB"], name="ddb-proxy",
                                        **ddb_opts).start()
            self.sqs_proxy = FaultProxy(f.env["AWS_ENDPOINT_URL_SQS"], name="sqs-proxy").start()
            f.env["AWS_ENDPOINT_URL_DYNAMODB"] = self.ddb_proxy.url
            f.env["AWS_ENDPOINT_URL_SQS"] = self.sqs_proxy.url
        self.base_url = f.start_upstream()
        return self

    @property
    def table(self) -> str:
        return self.direct_env["HOLDFAST_TABLE"]

    def client(self, service: str) -> Any:
        """A client straight to the backend (never faulted, never counted)."""
        return client_for_env(self.direct_env, service, read_timeout=10, retries=5)

    def start_worker(self, worker_id: str | None = None, *, clock_offset_ms: int = 0,
                     module: str = "holdfast.chaos.launch", **extra: str) -> Proc:
        """A worker process (``module``: the bench runs the seed's program the same way)."""
        self._n += 1
        wid = worker_id or f"w{self._n}"
        f = self.fleet
        env = {**os.environ, **f.env, **self.worker_env, **extra,
               "HOLDFAST_WORKER_ID": wid, "HOLDFAST_HANDLER": "holdfast.fleet.recorder:handle",
               RECORD_DIR_ENV: str(f.record_dir), OFFSET_ENV: str(clock_offset_ms),
               "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT),
                                                         os.environ.get("PYTHONPATH", "")) if p)}
        proc = Proc(wid, [sys.executable, "-m", module],
                    f.run_dir / f"worker-{wid}.log", env).start()
        f.workers[wid] = proc
        return proc

    def close(self) -> list[str]:
        lines = self.fleet.close()
        for p in (self.ddb_proxy, self.sqs_proxy, *self.runner_proxies):
            if p is not None:
                p.close()
        return lines
