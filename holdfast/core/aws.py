"""Boto3 clients with Holdfast's retry and timeout policy, and botocore error translation.

Endpoints come from the standard ``AWS_ENDPOINT_URL_<SERVICE>`` variables, so the same code
talks to AWS, DynamoDB Local or moto without any endpoint plumbing of ours.

With ``HOLDFAST_RECORD_AWS_CALLS=<dir>`` every client built here records its calls for the
IAM test (``holdfast.core.callrecord``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from holdfast.core.boto import new_session
from holdfast.core.callrecord import maybe_record
from holdfast.core.exceptions import ConfigError, HoldfastError, StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "BACK_OFF_AFTER_THROTTLE_S",
    "THROTTLING_CODES",
    "ConditionFailed",
    "InvalidRequest",
    "RetryMode",
    "call",
    "client_config",
    "dynamodb_client",
    "note_throttled",
    "pages",
    "recently_throttled",
    "sqs_client",
    "throttled_at_s",
    "worst_call_ms",
]

T = TypeVar("T")
# DynamoDB's throttling answers: whole-call error codes, and BatchExecuteStatement's
# per-statement codes (which drop the "Exception" suffix).
THROTTLING_CODES = frozenset({
    "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
    "ThrottlingError", "ProvisionedThroughputExceeded"})


# When this process last had a DynamoDB call refused as throttled (time.monotonic(), None:
# never): a worker's session heartbeat shortens its period while its table refuses calls,
# whichever call met the refusal first (``worker.session``).
_THROTTLED_AT_S: list[float] = []  # one entry at most (a mutable cell, no ``global``)


def note_throttled() -> None:
    """A DynamoDB call of this process was refused as throttled now."""
    _THROTTLED_AT_S[:] = [time.monotonic()]


def throttled_at_s() -> float | None:
    """``time.monotonic()`` of the last throttled call of this process (None: none yet)."""
    return _THROTTLED_AT_S[0] if _THROTTLED_AT_S else None


# How long after a throttled call a process counts its table as still throttling. Meanwhile
# the work that can wait does (a shed for balance, the safety-net sweeps, checkpoints whose
# backstop is not due), so the session heartbeat, whose retries and shorter period are most of
# a small worker's calls then, keeps the process within twice its normal call rate (issue
# "Hardening"; the bench's throttle scenario measured 2.03 and 2.11 times without).
BACK_OFF_AFTER_THROTTLE_S = 5.0


def recently_throttled() -> bool:
    """True within ``BACK_OFF_AFTER_THROTTLE_S`` of a DynamoDB call of this process refused
    as throttled."""
    at_s = throttled_at_s()
    return at_s is not None and time.monotonic() - at_s < BACK_OFF_AFTER_THROTTLE_S


RetryMode = Literal["standard", "adaptive"]


def client_config(*, read_timeout: float = 3.0, retries: int = 3,
                  retry_mode: RetryMode = "standard") -> Config:
    """Short timeouts and few retries: a heartbeat must not hang longer than its fence allows.

    ``retries``: attempts after the first. The name is botocore's meaning of ``max_attempts``
    in a client's config (retries, not attempts); under that name the session heartbeat's
    client, meant to make one attempt per call, made two, a jittered pause of up to a second
    apart, so a refused heartbeat came back 0.1-0.9 s late and its own retries, timed against
    the fence, came late too (the throttle scenario fenced at production defaults).

    ``adaptive`` adds botocore's client-side rate limiter (a token bucket that shrinks on every
    throttling answer): a process whose DynamoDB calls all go through one such client backs off
    as one, instead of each caller retrying on its own.
    """
    return Config(
        connect_timeout=2,
        read_timeout=read_timeout,
        retries={"mode": retry_mode, "max_attempts": retries},
        tcp_keepalive=True,
        max_pool_connections=32,
    )


def worst_call_ms(config: Config) -> int:
    """The longest one call through a client of ``config`` can take before it fails: every
    attempt connecting and reading to its timeouts, and botocore's back-off between them
    (at most 2 ** n s before retry n, capped at 20 s). What a caller with a deadline (a Lambda's
    remaining time) must keep in hand before it starts one."""
    # Config's options are attributes botocore sets from its keyword arguments (untyped).
    retries = int((getattr(config, "retries", None) or {}).get("max_attempts", 0))
    per_attempt = (float(getattr(config, "connect_timeout", 60))
                   + float(getattr(config, "read_timeout", 60)))
    backoff = sum(min(2.0 ** n, 20.0) for n in range(1, retries + 1))
    return round(((retries + 1) * per_attempt + backoff) * 1000)


def _new_client(service: str, config: Config) -> Any:
    session = new_session()
    # botocore reads AWS_DEFAULT_REGION and the profile, not AWS_REGION, which the AWS CLI, the
    # CDK and our deploy docs use: honoured too, after botocore's own sources.
    region = None if session.region_name else os.environ.get("AWS_REGION") or None
    try:
        return session.client(service, config=config,  # type: ignore[call-overload]
                              region_name=region)
    except NoRegionError:
        # botocore's own message names no setting; ours is one line an operator can act on.
        raise ConfigError(f"{service}: no AWS region: set AWS_DEFAULT_REGION or AWS_REGION, or "
                          "use a profile with a region") from None


def dynamodb_client(config: Config | None = None) -> DynamoDBClient:
    client: DynamoDBClient = _new_client("dynamodb", config or client_config())
    # Every throttled answer, also those botocore retries itself and that so never reach
    # ``call`` as an error, marks the process as throttled (``note_throttled``).
    client.meta.events.register("needs-retry.dynamodb", _note_throttled_answer)
    maybe_record(client)
    return client


def _note_throttled_answer(response: Any = None, **_: Any) -> None:
    parsed = response[1] if isinstance(response, tuple) and len(response) == 2 else None
    if isinstance(parsed, dict) and parsed.get("Error", {}).get("Code") in THROTTLING_CODES:
        note_throttled()


def sqs_client(config: Config | None = None) -> SQSClient:
    # Long polls last up to 20 s, so SQS gets a longer read timeout than DynamoDB.
    client: SQSClient = _new_client("sqs", config or client_config(read_timeout=25))
    maybe_record(client)
    return client


@dataclass
class ConditionFailed(Exception):
    """Internal: a conditional write's condition was false; ``item`` is ALL_OLD if returned."""

    item: dict[str, Any] | None


class InvalidRequest(HoldfastError):
    """DynamoDB refused the request as invalid (a mistyped attribute, an item over 400 KB):
    an error of that one item, never of the table. Callers that act on many items log and
    count it for the item and go on (``docs/concepts/protocol.md``, "Bad input stays local")."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def call(operation: str, fn: Callable[..., T], **kwargs: Any) -> T:
    """Call a boto3 method; botocore errors become ``ConditionFailed``, ``InvalidRequest`` or
    our own exceptions."""
    try:
        return fn(**kwargs)
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
        if code in THROTTLING_CODES:
            note_throttled()
        raise StoreUnavailable(operation, code or "client error") from None
    except BotoCoreError as exc:
        # Timeouts, connection errors, no credentials: the outcome of a write is unknown.
        if type(exc).__name__ in ("NoCredentialsError", "NoRegionError"):
            raise ConfigError(f"{operation}: {exc}") from None
        raise StoreUnavailable(operation, type(exc).__name__) from None


def pages(operation: str, fn: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every page of a paginated Query or Scan (``call`` each), following LastEvaluatedKey."""
    while True:
        resp = call(operation, fn, **kwargs)
        yield resp
        if not resp.get("LastEvaluatedKey"):
            return
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
