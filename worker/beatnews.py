"""What the loop does with a heartbeat's orders (``worker.session``): ``act_on_orders``
carries out each once (``stop_stream``).

Apart from ``worker.session``, whose ``SessionKeeper`` beats on its thread and hands each
renewal (``_apply``) to the loop: this needs none of the keeper's state.
"""

from __future__ import annotations

from collections.abc import Callable

from aws_lambda_powertools import Logger

from holdfast.core.orders import Order, parse_order
from holdfast.worker.logs import WORKER_LOGGER

__all__ = ["act_on_orders"]

logger = Logger(service=WORKER_LOGGER, child=True)


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

