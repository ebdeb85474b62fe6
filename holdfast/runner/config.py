"""Settings of the local runner, from ``HOLDFAST_RUNNER_*`` variables (flags override them);
names, defaults and limits are in ``holdfast.core.settings`` (docs/reference/settings.md).

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

from holdfast.core import settings as S
from holdfast.core.exceptions import ConfigError
from holdfast.runner.esm import EsmConfig
from holdfast.runner.shards import StartPosition

__all__ = ["DEFAULT_HANDLER", "RunnerConfig"]

DEFAULT_HANDLER = "holdfast.lambdas.router.handler:lambda_handler"


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    table: str
    start: StartPosition = "TRIM_HORIZON"
    poll_ms: int = S.RUNNER_POLL_MS.read({})
    refresh_ms: int = 1_000
    startup_wait_ms: int = S.RUNNER_STARTUP_WAIT_MS.read({})
    sweeper: bool = S.RUNNER_SWEEPER.read({})
    handler: str = DEFAULT_HANDLER
    esm: EsmConfig = field(default_factory=EsmConfig)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunnerConfig:
        e = os.environ if env is None else env
        try:
            table = S.TABLE.read(e)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (source the env printed by `holdfast localaws`)") from None
        return cls(
            table=table,
            start="LATEST" if S.RUNNER_START.read(e) == "LATEST" else "TRIM_HORIZON",
            poll_ms=S.RUNNER_POLL_MS.read(e),
            sweeper=S.RUNNER_SWEEPER.read(e),
            startup_wait_ms=S.RUNNER_STARTUP_WAIT_MS.read(e),
            esm=EsmConfig(
                batch_size=S.RUNNER_BATCH_SIZE.read(e),
                batching_window_ms=S.RUNNER_BATCH_WINDOW_MS.read(e),
                max_retry_attempts=S.RUNNER_MAX_RETRIES.read(e),
                parallelization=S.RUNNER_PARALLELIZATION.read(e)),
        )
