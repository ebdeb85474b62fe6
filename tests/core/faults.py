"""Fault injection for lease tests: botocore event hooks that lose requests or responses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import urllib3
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


@contextmanager
def replayed_after_a_lost_answer(client: Any, operation: str) -> Iterator[list[int]]:
    """The next ``operation`` is sent and applied, then its answer is lost inside botocore's
    retry loop (a read timeout), so botocore sends the identical request again: what a write
    that landed looks like to the code that made it (its condition fails on its own write)."""
    pool, sent = urllib3.PoolManager(), []

    def send_then_time_out(request: Any, **_: Any) -> None:
        if not sent:
            resp = pool.request("POST", request.url, body=request.body, headers={
                k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})
            sent.append(resp.status)
            raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register(f"before-send.dynamodb.{operation}", send_then_time_out)
    try:
        yield sent
    finally:
        client.meta.events.unregister(f"before-send.dynamodb.{operation}", send_then_time_out)
