"""Fault injection for lease tests: botocore event hooks that lose requests or responses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import EndpointConnectionError, ReadTimeoutError


@contextmanager
def lose_response(client: Any, operation: str, times: int = 1) -> Iterator[list[int]]:
    """The next ``times`` calls reach DynamoDB (and apply) but the client sees a read timeout."""
    hits: list[int] = []

    def after_call(**_: Any) -> None:
        if len(hits) < times:
            hits.append(1)
            raise ReadTimeoutError(endpoint_url="http://lost-response")

    event = f"after-call.dynamodb.{operation}"
    client.meta.events.register(event, after_call)
    try:
        yield hits
    finally:
        client.meta.events.unregister(event, after_call)


@contextmanager
def drop_request(client: Any, operation: str, times: int = 1) -> Iterator[list[int]]:
    """The next ``times`` calls never reach DynamoDB: the client sees a connection error."""
    hits: list[int] = []

    def before_call(**_: Any) -> None:
        if len(hits) < times:
            hits.append(1)
            raise EndpointConnectionError(endpoint_url="http://dropped-request")

    event = f"before-call.dynamodb.{operation}"
    client.meta.events.register(event, before_call)
    try:
        yield hits
    finally:
        client.meta.events.unregister(event, before_call)
