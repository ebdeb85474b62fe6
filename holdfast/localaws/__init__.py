"""An embedded local AWS: DynamoDB Local (or moto) for DynamoDB and Streams, moto for SQS."""

from __future__ import annotations

from holdfast.localaws.stack import LocalAws, LocalAwsError

__all__ = ["LocalAws", "LocalAwsError"]
