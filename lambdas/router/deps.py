"""What the router talks to: its clients, built on first use from the standard environment
(``AWS_ENDPOINT_URL_*``) so the handler module imports without AWS settings, and the time it
keeps in hand for them. ``configure()`` injects other dependencies (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from holdfast.core.aws import client_config, dynamodb_client, sqs_client, worst_call_ms
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.loop import session_store_for

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["DDB_CONFIG", "FUNCTION_TIMEOUT_S", "SEND_RESERVE_MS", "SQS_CONFIG", "RouterDeps",
           "configure", "current_deps"]

# Short timeouts and few retries (the nudge sender's rounds and Lambda retry beyond them): a
# stuck call holds the whole shard. The reserve is what the slower of the two clients' calls
# can take at its worst (21 s), and a second for the partial response: a round begun with less
# left could be cut off by Lambda's timeout (``FUNCTION_TIMEOUT_S``, the stack's and the local
# runner's), failing the whole batch instead of reporting what was not done.
DDB_CONFIG = client_config(read_timeout=3.0, retries=2)
SQS_CONFIG = client_config(read_timeout=3.0, retries=1)
SEND_RESERVE_MS = max(worst_call_ms(DDB_CONFIG), worst_call_ms(SQS_CONFIG)) + 1_000
# Room for the reserve after the work a slow table or queue stretches (a batch takes < 1 s).
FUNCTION_TIMEOUT_S = 60


@dataclass
class RouterDeps:
    """What the router talks to; built from the environment unless a test injects its own."""

    sqs: SQSClient
    store: LeaseStore
    settings: Settings
    clock: Callable[[], int] = wall_clock_ms
    sleep: Callable[[float], object] = time.sleep
    sessions: SessionStore | None = None

    @classmethod
    def from_env(cls) -> RouterDeps:
        settings = Settings.from_env()
        ddb = dynamodb_client(DDB_CONFIG)
        store = LeaseStore(ddb, settings.table, skew_ms=settings.skew_ms)
        sqs = sqs_client(SQS_CONFIG)
        return cls(sqs, store, settings, sessions=session_store_for(ddb, settings))


# Warm invocations reuse the clients; a dict rather than a ``global`` rebinding.
_state: dict[str, RouterDeps] = {}


def configure(deps: RouterDeps | None) -> None:
    """Use ``deps`` for the next invocations (None: rebuild from the environment on next use)."""
    _state.pop("deps", None)
    if deps is not None:
        _state["deps"] = deps


def current_deps() -> RouterDeps:
    """The dependencies of this invocation (built from the environment on first use)."""
    if "deps" not in _state:
        _state["deps"] = RouterDeps.from_env()
    return _state["deps"]
