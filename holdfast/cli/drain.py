"""``holdfast drain WORKER_ID [--cancel]``: empty a live worker gracefully, without stopping it.

Sets the drain flag on the worker's live session (``holdfast.core.directives``): the worker
sheds every stream it holds, a few at a time, and claims none while the flag stays. The flag
is also sent to the session's order queue when the environment names the queues' prefix
(HOLDFAST_ORDERS_QUEUE_PREFIX, with HOLDFAST_QUEUE_URL to derive their URLs), so the worker
starts at once rather than at its next heartbeat; that message is best effort, the session
item is what counts. ``--cancel`` clears the flag: the worker claims again.

It works against the tables the environment names (HOLDFAST_SESSION_TABLE, AWS_ENDPOINT_URL_*),
as ``holdfast task-stopped`` does. Exit codes as the other operator commands
(``holdfast.cli.opscommon``): 1 when the worker has no live session.
"""

from __future__ import annotations

import argparse
import os
import sys

from holdfast.cli.opscommon import (
    ENV_HINT,
    EXIT_AWS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    printable,
    worker_id_arg,
)
from holdfast.core import settings as S
from holdfast.core.aws import client_config, dynamodb_client, sqs_client
from holdfast.core.directives import drain_body
from holdfast.core.exceptions import ConfigError, HoldfastError, StoreUnavailable
from holdfast.core.schema import SessionState
from holdfast.core.sessions import SessionStore

__all__ = ["DRAIN_COMMANDS"]

def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("worker_id", metavar="WORKER_ID",
                   help="the worker id (on ECS: the task id) to drain")
    p.add_argument("--cancel", action="store_true",
                   help="stop draining: the worker claims streams again")


def _fail(code: int, message: str) -> int:
    print(f"holdfast drain: {message}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        worker_id = worker_id_arg(args.worker_id)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    table = S.SESSION_TABLE.get(os.environ)
    if not table:
        return _fail(EXIT_USAGE, f"{S.SESSION_TABLE.name} is not set ({ENV_HINT})")
    draining = not args.cancel
    # Only the session table is read and written: no lease table, TTL or skew is needed.
    try:
        store = SessionStore(dynamodb_client(client_config(read_timeout=5, retries=2)),
                             table, "", ttl_ms=0, skew_ms=0)
        item = store.get(worker_id)
        if item is None or item.state is not SessionState.ALIVE:
            state = "no session item" if item is None else f"its session is {item.state}"
            return _fail(EXIT_FAILED, f"worker {worker_id!r} has no live session ({state})")
        if not store.set_draining(item.owner, draining):
            return _fail(EXIT_FAILED, f"session {item.owner} ended or was replaced meanwhile")
    except ConfigError as exc:
        return _fail(EXIT_AWS, f"{exc} ({ENV_HINT})")
    except StoreUnavailable as exc:
        return _fail(EXIT_AWS, f"cannot reach DynamoDB: {exc}")
    except HoldfastError as exc:
        return _fail(EXIT_FAILED, str(exc))
    queued = _queue(item.owner, draining)
    what = ("draining: it sheds its streams and claims none" if draining
            else "drain cancelled: it claims streams again")
    print(f"{printable(item.owner)}: {what} (holds {item.held} stream{'s' * (item.held != 1)} now; "
          f"{queued})")
    return EXIT_OK


def _queue(owner: str, draining: bool) -> str:
    """Tell the worker through its order queue too, if the environment names the queues."""
    from holdfast.lambdas.orderqueues import send_body  # the router's one send, kept in one place

    try:
        prefix, queue_url = S.ORDERS_QUEUE_PREFIX.get(os.environ), S.QUEUE_URL.get(os.environ)
    except ConfigError as exc:
        print(f"holdfast drain: not queued: {exc}", file=sys.stderr)
        return "it reads the flag with its next heartbeat"
    if not prefix or not queue_url:
        return "it reads the flag with its next heartbeat"
    try:
        sqs = sqs_client(client_config(read_timeout=5, retries=2))
    except ConfigError as exc:
        print(f"holdfast drain: not queued: {exc}", file=sys.stderr)
        return "it reads the flag with its next heartbeat"
    result, detail = send_body(sqs, queue_url, prefix, owner, drain_body(owner, draining))
    if result == "order_queue_sent":
        return "sent to its order queue"
    if result == "order_queue_failed":
        print(f"holdfast drain: not queued: {detail}", file=sys.stderr)
    return "it reads the flag with its next heartbeat"


DRAIN_COMMANDS = {
    "drain": ("drain a live worker: it sheds every stream gracefully and claims none, but keeps "
              "running (--cancel: claim again)", _add, _run),
}
