"""The suite's xdist scheduling (tests/scheduling.py), on a small suite run with ``-n 2``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CONFTEST = """
from tests.scheduling import (pytest_collection_modifyitems, pytest_configure,
                              pytest_unconfigure, pytest_xdist_make_scheduler)
"""
# Each test appends (worker, name) to a log, in the order the tests start.
MODULE = """
import json, os, pytest

def note(name):
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], name]) + "\\n")

{fixture}

@pytest.mark.parametrize("i", range(8))
def test_{name}(i, {arg}):
    note("{name}")
"""
SLOW = """
import json, os, pytest

@pytest.mark.slow
def test_long():
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], "long"]) + "\\n")
"""


def test_module_fixtures_share_a_worker_and_slow_tests_start_first(tmp_path: Path) -> None:
    """Under ``-n 2 --dist loadgroup``, a module's tests sharing a module fixture run on one
    worker (set up once), and a ``slow`` test collected last starts first."""
    pytest.importorskip("xdist", reason="pytest-xdist comes with the [dev] extra")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\nmarkers = slow: long\n")
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_a_shared.py").write_text(MODULE.format(
        name="shared", arg="table",
        fixture='@pytest.fixture(scope="module")\ndef table():\n    note("set-up")\n'))
    (suite / "test_b_free.py").write_text(MODULE.format(name="free", arg="tmp_path", fixture=""))
    (suite / "test_z_slow.py").write_text(SLOW)
    log = tmp_path / "order.jsonl"
    env = {**os.environ, "ORDER_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("HOLDFAST_TEST_GROUPS_FILE", None)  # our own run's, if any: the child makes its own
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadgroup", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    workers = {name: {w for w, n in runs if n == name} for name in ("shared", "set-up")}
    assert len(workers["shared"]) == 1 and workers["set-up"] == workers["shared"], runs
    assert [n for _, n in runs].count("set-up") == 1, runs
    (worker,) = {w for w, n in runs if n == "long"}
    first = next(n for w, n in runs if w == worker and n != "set-up")
    assert first == "long", runs  # handed out first, though collected last
