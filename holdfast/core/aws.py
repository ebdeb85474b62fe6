"""Boto3 clients with Holdfast's retry and timeout policy, and botocore error translation.

Endpoints come from the standard ``AWS_ENDPOINT_URL_<SERVICE>`` variables, so the same code
talks to AWS, DynamoDB Local or moto without any endpoint plumbing of ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.exceptions import ConfigError, StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "ConditionFailed",
    "InvalidRequest",
    "call",
    "client_config",
    "dynamodb_client",
    "sqs_client",
    "translate_errors",
]

T = TypeVar("T")


def client_config(*, read_timeout: float = 3.0, max_attempts: int = 3) -> Config:
    """Short timeouts and few retries: a heartbeat must not hang longer than its fence allows."""
    return Config(
        connect_timeout=2,
        read_timeout=read_timeout,
        retries={"mode": "standard", "max_attempts": max_attempts},
        tcp_keepalive=True,
        max_pool_connections=32,
    )


def dynamodb_client(config: Config | None = None) -> DynamoDBClient:
    return boto3.session.Session().client("dynamodb", config=config or client_config())


def sqs_client(config: Config | None = None) -> SQSClient:
    # Long polls last up to 20 s, so SQS gets a longer read timeout than DynamoDB.
    return boto3.session.Session().client("sqs", config=config or client_config(read_timeout=25))


@dataclass
class ConditionFailed(Exception):
    """Internal: a conditional write's condition was false; ``item`` is ALL_OLD if returned."""

    item: dict[str, Any] | None


@dataclass
class InvalidRequest(Exception):
    """Internal: DynamoDB refused the request as invalid (often a mistyped attribute)."""

    message: str


@contextmanager
def translate_errors(operation: str) -> Iterator[None]:
    """Turn botocore errors into ``ConditionFailed``, ``InvalidRequest`` or our own exceptions."""
    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "")
        if code in ("ConditionalCheckFailedException", "ConditionalCheckFailed"):
            item: Any = exc.response.get("Item")
            raise ConditionFailed(dict(item) if item else None) from None
        if code == "ValidationException":
            raise InvalidRequest(err.get("Message", code)) from None
        if code == "ResourceNotFoundException":
            raise ConfigError(
                f"{operation}: table or index not found ({err.get('Message', '')})") from None
        if code in ("UnrecognizedClientException", "InvalidSignatureException",
                    "AccessDeniedException", "ExpiredTokenException"):
            raise ConfigError(f"{operation}: AWS refused the credentials ({code})") from None
        raise StoreUnavailable(operation, code or "client error") from None
    except BotoCoreError as exc:
        # Timeouts, connection errors, no credentials: the outcome of a write is unknown.
        if type(exc).__name__ in ("NoCredentialsError", "NoRegionError"):
            raise ConfigError(f"{operation}: {exc}") from None
        raise StoreUnavailable(operation, type(exc).__name__) from None


def call(operation: str, fn: Callable[..., T], **kwargs: Any) -> T:
    """Call a boto3 method under ``translate_errors``."""
    with translate_errors(operation):
        return fn(**kwargs)
