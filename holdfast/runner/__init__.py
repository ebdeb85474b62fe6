"""The local runner: plays the Lambda event source mapping and the sweeper schedule locally.

    python -m holdfast.runner      (environment as printed by ``holdfast localaws``)

It reads the lease table's change records (DynamoDB Streams) from DynamoDB Local (every
shard, parents before children), drops records the ``FILTER_PATTERNS`` drop, batches the rest
like the event source mapping, invokes the real ``lambdas.router.handler.lambda_handler`` with
a Lambda-like context in sandbox processes (several batches at once, order kept per item),
retries reported failures, and runs the sweeper loop in a thread. Reading never waits for
the router or the sweeper.
"""

from __future__ import annotations

__all__: list[str] = []
