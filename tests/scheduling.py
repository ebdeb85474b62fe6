"""The suite on pytest-xdist workers (``make test``: ``-n 3 --dist loadgroup``).

The suite's time is real waiting (leases expiring, fleets failing over, a 60 s soak) and CPU
(both cores ~85 % busy at ``-n 3``): workers overlap the waits, provided that a costly set-up
is not repeated on every worker and that the longest tests do not start last. So, under
``--dist loadgroup``:

- the tests sharing a costly session fixture (``SET_UP_ONCE``) or any module-scoped fixture
  form one group, run by one worker, so that set-up happens once;
- the work is handed out longest first: tests marked ``slow`` (and the groups holding one),
  then the other groups, then the rest, each in file order.

Why not xdist's own loadgroup: it tags groups by rewriting node ids, which pytest >= 9.2 no
longer allows (pytest-xdist#1386: the groups are silently ignored). Here the workers write the
groups to a file and the controller's scheduler reads it: same grouping, public hooks only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

__all__ = ["GROUPS_ENV", "SET_UP_ONCE", "groups_of", "plan", "pytest_collection_modifyitems",
           "pytest_configure", "pytest_unconfigure", "pytest_xdist_make_scheduler", "scheduler"]

GROUPS_ENV = "HOLDFAST_TEST_GROUPS_FILE"
# Session fixtures too costly to repeat on each worker: the two CDK synths (~20 s of CPU
# each), a whole local fleet (``holdfast_fleet``'s pool).
SET_UP_ONCE = ("synth_jobs", "_holdfast_pool")


def set_ups(item: pytest.Item) -> list[str]:
    """The costly set-ups ``item`` needs: a ``SET_UP_ONCE`` fixture, its module's fixtures
    (any module- or class-scoped one), an explicit ``xdist_group``."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    keys = [name for name in SET_UP_ONCE if name in info.names_closure]
    module = getattr(item, "module", None)
    if module is not None and any(d.scope in ("module", "class")
                                  for defs in info.name2fixturedefs.values() for d in defs):
        keys.append(str(module.__name__))
    keys += [str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")]
    return keys


def groups_of(items: list[pytest.Item]) -> dict[str, str]:
    """Node id -> group, for the tests that share a set-up with others. Tests sharing any
    set-up are in one group (a module fixture used with a synth puts the module with it)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    needs = {item.nodeid: set_ups(item) for item in items}
    for keys in needs.values():
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    return {nodeid: root(keys[0]) for nodeid, keys in needs.items() if keys}


def plan(items: list[pytest.Item], groups_file: Path) -> None:
    """On a worker: slow tests first, and the groups written where the controller reads them.

    Every worker collects the same items and writes the same file (atomically).
    """
    groups = groups_of(items)
    slow_groups = {groups.get(i.nodeid) for i in items if i.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        group = groups.get(item.nodeid)
        if item.get_closest_marker("slow") or (group is not None and group in slow_groups):
            return 0
        return 1 if group is not None else 2

    items.sort(key=rank)  # stable: a file's tests keep their order
    tmp = groups_file.with_name(f"{groups_file.name}.{os.getpid()}")
    tmp.write_text(json.dumps(groups))
    tmp.replace(groups_file)


def scheduler(config: pytest.Config, log: Any, groups_file: Path) -> Any:
    """xdist's scope scheduler, with a scope per group and one per ungrouped test."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # Called once the workers have collected, so the file is written.
            if self.groups is None:
                self.groups = (json.loads(groups_file.read_text())
                               if groups_file.exists() else {})
            return self.groups.get(nodeid, nodeid)

    # A unit's place in the queue is its first test's place (``plan``'s order), not its size.
    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


# The hooks, re-exported by tests/conftest.py.
def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller, under ``--dist loadgroup``: where the workers write the groups."""
    if (not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist")
            and config.getoption("dist", "no") == "loadgroup"):
        # The workers are started after this and inherit the environment.
        os.environ[GROUPS_ENV] = str(
            Path(tempfile.mkdtemp(prefix="holdfast-groups-")) / "groups.json")


def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(GROUPS_ENV)
    if path and not hasattr(config, "workerinput"):
        shutil.rmtree(Path(path).parent, ignore_errors=True)
        del os.environ[GROUPS_ENV]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get(GROUPS_ENV)
    if path and hasattr(config, "workerinput"):
        plan(items, Path(path))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    path = os.environ.get(GROUPS_ENV)
    return scheduler(config, log, Path(path)) if path else None
