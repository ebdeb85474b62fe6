"""Holdfast's Lambda functions: the stream router and the expired-lease sweeper.

Both ship in one asset with ``holdfast.core`` (boto3 and Powertools come from the runtime and
its layer), so nothing here imports the worker, the runner or the local AWS.

    lambdas.router.handler.lambda_handler    DynamoDB Streams -> SQS nudges
    lambdas.sweeper.handler.lambda_handler   scheduled: GSI orphan query every ~second -> nudges
"""

from __future__ import annotations

__all__: list[str] = []
