"""The worker's logs: one Powertools logger hierarchy, whose lines carry the ``service`` the
environment names (``POWERTOOLS_SERVICE_NAME``: the stack sets the fleet's ``<fleet>-worker``),
as the worker's metrics and the Lambdas' logs do."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from aws_lambda_powertools import Logger

from holdfast.core import names

__all__ = ["WORKER_LOGGER", "service_of", "worker_logger"]

# Every module's logger is ``Logger(service=WORKER_LOGGER, child=True)``, which Powertools names
# "<WORKER_LOGGER>.<module>" at import, under the parent ``worker_logger`` makes: so the
# hierarchy's name is fixed, and the service a line shows is set on the parent instead.
WORKER_LOGGER: Final = "holdfast-worker"


def service_of(env: Mapping[str, str]) -> str:
    """The worker's ``service`` (log field, metric dimension, trace service): the
    environment's, else ``WORKER_LOGGER`` (what a fleet named "holdfast" is given too)."""
    return env.get(names.ENV_SERVICE_NAME) or WORKER_LOGGER


def worker_logger(env: Mapping[str, str], *, level: str, worker_id: str) -> Logger:
    """The parent of every module's logger, at ``level``, each line with the environment's
    service and this worker's id."""
    logger = Logger(service=WORKER_LOGGER, level=level)
    logger.append_keys(service=service_of(env), worker_id=worker_id)
    # Powertools child loggers pin their own level at import: let them follow the parent's.
    for name, child in list(logging.root.manager.loggerDict.items()):
        if name.startswith(f"{WORKER_LOGGER}.") and isinstance(child, logging.Logger):
            child.setLevel(logging.NOTSET)
    return logger
