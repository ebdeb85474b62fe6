"""What the session keep-alive hands back to the loop (``worker.session``): a heartbeat's
orders carried out, and the lost session's handling said if it fails.

Apart from ``worker.session``, whose ``SessionKeeper`` beats on its thread and hands each
renewal (``_apply``) and each loss (``_report_lost``) to the loop: these are what the loop
then does that needs none of the keeper's state, so each is tested, and read, alone.

- ``act_on_orders``: carry out each order of a heartbeat once (``stop_stream``);
- ``log_failure``: the done-callback of the lost session's handling, which nobody awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aws_lambda_powertools import Logger

from holdfast.core.orders import Order, parse_order

__all__ = ["act_on_orders", "log_failure"]

logger = Logger(service="holdfast-worker", child=True)


def act_on_orders(orders: frozenset[str], done: frozenset[str],
                  stop_stream: Callable[[Order], bool]) -> frozenset[str]:
    """Carry out every order not in ``done`` once; all of them are acknowledged with the next
    heartbeat (the new ``done``)."""
    for order in sorted(orders - done):
        parsed = parse_order(order)
        if parsed is None:
            logger.warning("unknown order ignored", order=order[:200])
            continue
        acted = stop_stream(parsed)
        logger.info("order", verb=parsed.verb, conn_id=parsed.conn_id, epoch=parsed.epoch,
                    held=acted, via="session")
    return orders


def log_failure(task: asyncio.Future[None]) -> None:
    """The lost session's handling ended with an error (the worker may be left without a
    session): said, with its traceback."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.error("handling the lost session failed",
                     error=f"{type(exc).__name__}: {exc}"[:300], exc_info=exc)
