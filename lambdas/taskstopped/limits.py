"""The task-stopped function's DynamoDB client config and the timeout the stack gives it: one
place for both, so the timeout follows the calls' worst case (and the stack imports this, not
the handler with its logger and tracer)."""

from __future__ import annotations

from typing import Final

from holdfast.core.aws import client_config, worst_call_ms

__all__ = ["DDB_CONFIG", "FUNCTION_TIMEOUT_S"]

DDB_CONFIG: Final = client_config(read_timeout=2.0)  # the sweeper's: short timeouts, few retries
# Room for two DynamoDB calls at their worst (each up to 30 s with its retries). A report is a
# read, a write, its streams' releases and nudges, well under a second as a rule; one that
# times out is retried by Lambda (it was 30 s, one call's worst: a slow table could pass it),
# harmlessly (it is idempotent), and the sweeper's TTL path covers the session meanwhile.
FUNCTION_TIMEOUT_S: Final = 2 * worst_call_ms(DDB_CONFIG) // 1000
