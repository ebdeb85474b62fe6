"""Fault injection for lease tests: botocore event hooks that lose requests or responses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from botocore.exceptions import EndpointConnectionError, ReadTimeoutError


@contextmanager
def _fail_calls(client: Any, event: str, error: Exception, times: int) -> Iterator[list[int]]:
    hits: list[int] = []

    def hook(**_: Any) -> None:
        if len(hits) < times:
            hits.append(1)
            raise error

    client.meta.events.register(event, hook)
    try:
        yield hits
    finally:
        client.meta.events.unregister(event, hook)


def lose_response(client: Any, operation: str,
                  times: int = 1) -> AbstractContextManager[list[int]]:
    """The next ``times`` calls reach DynamoDB (and apply) but the client sees a read timeout."""
    return _fail_calls(client, f"after-call.dynamodb.{operation}",
                       ReadTimeoutError(endpoint_url="http://lost-response"), times)


def drop_request(client: Any, operation: str,
                 times: int = 1) -> AbstractContextManager[list[int]]:
    """The next ``times`` calls never reach DynamoDB: the client sees a connection error."""
    return _fail_calls(client, f"before-call.dynamodb.{operation}",
                       EndpointConnectionError(endpoint_url="http://dropped-request"), times)
