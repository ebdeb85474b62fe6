"""The worker's logs (``holdfast.worker.logs``): one hierarchy, the environment's service."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.worker import handler
from holdfast.worker.logs import WORKER_LOGGER, service_of, worker_logger


@pytest.fixture
def parent() -> Iterator[Logger]:
    """The worker's parent logger as a fleet named "prod" configures it, put back after."""
    levels = {name: child.level for name, child in logging.root.manager.loggerDict.items()
              if name.startswith(f"{WORKER_LOGGER}.") and isinstance(child, logging.Logger)}
    logger = worker_logger({names.ENV_SERVICE_NAME: "prod-worker"}, level="INFO",
                           worker_id="w7")
    yield logger
    logger.append_keys(service=WORKER_LOGGER)
    logger.remove_keys(["worker_id"])
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_a_module_line_carries_the_environment_service_and_the_worker_id(
        parent: Logger, caplog: pytest.LogCaptureFixture) -> None:
    """A module's line shows the stack's ``<fleet>-worker`` (as its metrics do) and the id."""
    with caplog.at_level(logging.INFO):
        handler.logger.info("hello")
    record = next(r for r in caplog.records if r.getMessage() == "hello")
    line = json.loads(parent.registered_formatter.format(record))
    assert (line["service"], line["worker_id"]) == ("prod-worker", "w7")


def test_module_loggers_follow_the_parent_level(parent: Logger) -> None:
    """Every module's logger follows the parent's level instead of the one pinned at import."""
    child = logging.getLogger(handler.logger.name)
    assert child.level == logging.NOTSET
    assert child.getEffectiveLevel() == logging.INFO


@pytest.mark.parametrize(("env", "service"), [
    ({names.ENV_SERVICE_NAME: "prod-worker"}, "prod-worker"),
    ({names.ENV_SERVICE_NAME: ""}, WORKER_LOGGER), ({}, WORKER_LOGGER)])
def test_the_service_is_the_environment_s_else_the_hierarchy_s(
        env: dict[str, str], service: str) -> None:
    """No ``POWERTOOLS_SERVICE_NAME`` (or an empty one): "holdfast-worker"."""
    assert service_of(env) == service
