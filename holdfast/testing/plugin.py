"""The pytest plugin (entry point ``pytest11``: ``holdfast``): the ``holdfast_fleet`` fixture.

Configure it in ``pytest.ini`` / ``[tool.pytest.ini_options]``::

    holdfast_handler = myapp.handlers:on_message   # or --holdfast-handler on the command line
    holdfast_workers = 2
    holdfast_fleet_scope = session                 # or module: a fresh fleet per test module

or override the ``holdfast_options`` fixture (any scope) in a ``conftest.py`` to return a
``holdfast.testing.FleetOptions`` (a ``setup`` hook, extra worker environment, timings...);
options without a ``pythonpath`` get the default's (the rootdir and where pytest runs).

One fleet serves every test with equal options (per session, or per module); before each test
it is topped up to the configured number of workers, and the streams a test started are set
STOPPED after it. Every child process is stopped at the end of the session, after a failed or
interrupted (Ctrl-C) test too; on Linux they also die with the pytest process.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from holdfast.localaws import LocalAws
    from holdfast.testing.harness import LocalFleet
    from holdfast.testing.options import FleetOptions

__all__ = ["default_paths", "fallback_warning", "holdfast_fleet", "holdfast_options",
           "no_handler_warning", "pytest_addoption"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("holdfast", "Holdfast local fleet")
    group.addoption("--holdfast-handler", default=None, metavar="MODULE:FUNCTION",
                    help="the handler holdfast_fleet's workers run (overrides the ini)")
    parser.addini("holdfast_handler", "handler (package.module:function) for holdfast_fleet",
                  default="")
    parser.addini("holdfast_workers", "workers holdfast_fleet starts (default 2)", default="2")
    parser.addini("holdfast_fleet_scope", "session (default) or module", default="session")


@pytest.fixture(scope="session")
def holdfast_options(pytestconfig: pytest.Config) -> FleetOptions:
    """What ``holdfast_fleet`` starts, from the ini options; override it to change more."""
    from holdfast.testing.options import FleetOptions

    handler = (pytestconfig.getoption("holdfast_handler")
               or str(pytestconfig.getini("holdfast_handler")) or None)
    return FleetOptions(handler=handler, workers=int(pytestconfig.getini("holdfast_workers")),
                        pythonpath=default_paths(pytestconfig))


def default_paths(config: pytest.Config) -> tuple[Path, ...]:
    """Where workers import the user's code from unless told: the rootdir and where pytest
    runs (as the tests import it)."""
    return tuple(dict.fromkeys([config.rootpath, Path.cwd()]))


def no_handler_warning() -> str:
    """What to warn when no handler is given: the fleet runs the recorder alone."""
    from holdfast.fleet.recorder import RECORDER_SPEC

    return ("holdfast_fleet: no handler given (holdfast_handler in the ini, --holdfast-handler, "
            "or FleetOptions(handler=...)): the workers run the recorder alone, none of your "
            f"code; handler={RECORDER_SPEC!r} says so on purpose")


def fallback_warning(requested: str, aws: LocalAws | None) -> str | None:
    """What to warn when ``auto`` found no DynamoDB Local and moto serves DynamoDB instead."""
    if requested != "auto" or aws is None or aws.backend != "moto":
        return None
    from holdfast.localaws.dynamodb_local import missing_hint

    return ("holdfast_fleet: moto serves DynamoDB (no DynamoDB Local: slower under load, and "
            f"its table streams differ slightly); {missing_hint()}")


class _Pool:
    """At most one running fleet: reused while the key (options, module) stays the same."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.key: Any = None
        self.fleet: LocalFleet | None = None
        # The last start that failed: the same options fail the same way for every later test,
        # without paying for another local AWS each time.
        self.failed: tuple[Any, str] | None = None

    def get(self, options: FleetOptions, key: Any) -> LocalFleet:
        from holdfast.fleet.procs import FleetError
        from holdfast.testing.harness import LocalFleet

        if self.fleet is not None and self.key == key:
            return self.fleet
        if self.failed is not None and self.failed[0] == key:
            raise FleetError(f"not started again (the same options failed for an earlier "
                             f"test): {self.failed[1]}")
        self.close()
        scale = float(os.environ.get("HOLDFAST_TEST_TIMEOUT_SCALE", "1"))
        run_dir = self.base / f"fleet-{len(list(self.base.iterdir())) + 1}"
        try:
            self.fleet = LocalFleet(options, run_dir, timeout_scale=scale).start()
        except Exception as exc:
            self.failed = (key, f"{type(exc).__name__}: {exc}")
            raise
        self.key = key
        fallback = fallback_warning(options.backend, self.fleet.fleet.aws)
        if fallback:  # a log line pytest shows only on a failure: the warnings summary shows it
            warnings.warn(fallback, RuntimeWarning, stacklevel=1)
        if options.handler is None:
            # A forgotten (or misspelled: pytest only warns of an unknown ini key) handler
            # option passed every test with none of the user's code run.
            warnings.warn(no_handler_warning(), RuntimeWarning, stacklevel=1)
        return self.fleet

    def close(self) -> None:
        fleet, self.fleet, self.key = self.fleet, None, None
        if fleet is not None:
            fleet.close()


@pytest.fixture(scope="session")
def _holdfast_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Pool]:
    pool = _Pool(tmp_path_factory.mktemp("holdfast"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def holdfast_fleet(request: pytest.FixtureRequest, holdfast_options: FleetOptions,
                   _holdfast_pool: _Pool) -> Iterator[LocalFleet]:
    """A running local fleet (local AWS, runner, demo upstream, workers with the handler)."""
    scope = str(request.config.getini("holdfast_fleet_scope"))
    if scope not in ("session", "module"):
        raise pytest.UsageError(f"holdfast_fleet_scope must be session or module, not {scope}")
    module = request.node.module.__name__ if scope == "module" else None
    options = holdfast_options if holdfast_options.pythonpath else dataclasses.replace(
        holdfast_options, pythonpath=default_paths(request.config))
    fleet = _holdfast_pool.get(options, (options, module))
    fleet.ensure_workers()
    fleet.crashes.clear()
    before = set(fleet.started)
    try:
        yield fleet
    finally:
        for conn_id in [c for c in fleet.started if c not in before]:
            try:
                fleet.stop_stream(conn_id, wait=False)
            except Exception:  # the fleet may be gone (the test closed it): nothing to stop
                break
