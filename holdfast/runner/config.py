"""Settings of the local runner, from ``HOLDFAST_RUNNER_*`` variables (flags override them).

    HOLDFAST_TABLE                     the lease table whose changes are read (required)
    HOLDFAST_RUNNER_START              TRIM_HORIZON (default) or LATEST
    HOLDFAST_RUNNER_POLL_MS            GetRecords pause when a poll found nothing    (50)
    HOLDFAST_RUNNER_BATCH_SIZE         records per invocation at most                (100)
    HOLDFAST_RUNNER_BATCH_WINDOW_MS    wait for more records before invoking         (0)
    HOLDFAST_RUNNER_MAX_RETRIES        retries of a failing batch before dropping it (3)
    HOLDFAST_RUNNER_PARALLELIZATION    batches invoked at once, each in its own sandbox  (4)
    HOLDFAST_RUNNER_SWEEPER            1 to run the sweeper loop too, 0 not to        (1)
    HOLDFAST_RUNNER_STARTUP_WAIT_MS    wait this long for the table and its changes   (30000)

Parallelization is Lambda's ``ParallelizationFactor`` (1 to 10; order kept per item). The
deployed mapping's default is 1, but there the table has several shards, each polled and
invoked apart, and a router call to SQS or DynamoDB takes milliseconds; DynamoDB Local puts
every change in one shard and, on a loaded machine, a stop order's writes take 100-250 ms each,
so one batch of stop orders held every later insert for seconds. 4 keeps local delivery no
slower than the deployed mapping's.

The router and the sweeper read their own settings (``lambdas.settings``) from the same
environment, exactly as they would in Lambda.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from holdfast.core.exceptions import ConfigError
from holdfast.lambdas.settings import env_int
from holdfast.runner.esm import EsmConfig
from holdfast.runner.shards import StartPosition

__all__ = ["DEFAULT_HANDLER", "RunnerConfig"]

DEFAULT_HANDLER = "holdfast.lambdas.router.handler:lambda_handler"


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    table: str
    start: StartPosition = "TRIM_HORIZON"
    poll_ms: int = 50
    refresh_ms: int = 1_000
    startup_wait_ms: int = 30_000
    sweeper: bool = True
    handler: str = DEFAULT_HANDLER
    esm: EsmConfig = field(default_factory=EsmConfig)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunnerConfig:
        e = os.environ if env is None else env
        table = e.get("HOLDFAST_TABLE", "").strip()
        if not table:
            raise ConfigError("HOLDFAST_TABLE is not set (source the env printed by "
                              "`holdfast localaws`)")
        start = e.get("HOLDFAST_RUNNER_START", "TRIM_HORIZON").strip().upper()
        if start not in ("TRIM_HORIZON", "LATEST"):
            raise ConfigError(f"HOLDFAST_RUNNER_START must be TRIM_HORIZON or LATEST, not "
                              f"{start[:30]!r}")
        sweeper = e.get("HOLDFAST_RUNNER_SWEEPER", "1").strip().lower()
        if sweeper not in ("0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"HOLDFAST_RUNNER_SWEEPER must be 1 or 0, not {sweeper[:20]!r}")
        return cls(
            table=table,
            start="LATEST" if start == "LATEST" else "TRIM_HORIZON",
            poll_ms=env_int(e, "HOLDFAST_RUNNER_POLL_MS", 50, 1, 10_000),
            sweeper=sweeper in ("1", "true", "yes"),
            startup_wait_ms=env_int(e, "HOLDFAST_RUNNER_STARTUP_WAIT_MS", 30_000, 0, 3_600_000),
            esm=EsmConfig(
                batch_size=env_int(e, "HOLDFAST_RUNNER_BATCH_SIZE", 100, 1, 10_000),
                batching_window_ms=env_int(e, "HOLDFAST_RUNNER_BATCH_WINDOW_MS", 0, 0, 300_000),
                max_retry_attempts=env_int(e, "HOLDFAST_RUNNER_MAX_RETRIES", 3, 0, 10_000),
                parallelization=env_int(e, "HOLDFAST_RUNNER_PARALLELIZATION", 4, 1, 10)),
        )
