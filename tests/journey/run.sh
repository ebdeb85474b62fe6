#!/usr/bin/env bash
# A new user's first hour, outside the checkout (issue "Holdfast as a library"): in an empty
# folder and a clean venv, `pip install <wheel>[local,cdk]`, a handler of their own storing
# into sqlite, a holdfast_fleet test through a SIGKILL, then a CDK app of their own with
# HoldfastFleet synthesized offline (no cdk.json, no checkout, no feature flags).
# `make journey` runs it (a few minutes: aws-cdk-lib is large); not part of `make test`.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/holdfast-journey.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
echo "# journey in $WORK"
"$REPO/.venv/bin/pip" wheel -q --no-deps -w dist "$REPO"
$PYTHON -m venv .venv
.venv/bin/pip install -q "$(ls dist/*.whl)[local,cdk]" pytest
tops=$(.venv/bin/python -c "import importlib.metadata as m; print(' '.join(sorted({f.parts[0] for f in m.files('holdfast') if not f.parts[0].endswith('.dist-info')} - {'..'})))")
[ "$tops" = "holdfast" ] || { echo "FAIL: the wheel installs top-level packages: $tops"; exit 1; }

mkdir -p myapp tests deploy
: > myapp/__init__.py
cat > myapp/handler.py <<'PY'
"""A user's handler: every message into sqlite, once per (conn, seq)."""
from __future__ import annotations

import os
import sqlite3

from holdfast import Message

DB = os.environ.get("MYAPP_DB", "sink.db")


def _db() -> sqlite3.Connection:
    con = sqlite3.connect(DB, timeout=30)
    con.execute("CREATE TABLE IF NOT EXISTS seen (conn TEXT, seq INTEGER, PRIMARY KEY (conn, seq))")
    return con


async def handle(msg: Message) -> None:
    with _db() as con:
        con.execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (msg.conn_id, msg.seq))


def stored(conn_id: str) -> set[int]:
    with _db() as con:
        return {r[0] for r in con.execute("SELECT seq FROM seen WHERE conn=?", (conn_id,))}
PY
cat > pyproject.toml <<TOML
[tool.pytest.ini_options]
holdfast_handler = "myapp.handler:handle"
holdfast_workers = "2"
pythonpath = ["."]
TOML
cat > tests/test_failover.py <<'PY'
from holdfast import LocalFleet
from myapp.handler import stored


def test_sigkill_loses_nothing(holdfast_fleet: LocalFleet) -> None:
    """A stream survives a SIGKILL of its worker, and the sink has every seq."""
    conn = holdfast_fleet.start_stream()
    holder = holdfast_fleet.wait_owned(conn)
    holdfast_fleet.wait_handled(conn, 5)
    holdfast_fleet.kill_worker(holder, hard=True)
    holdfast_fleet.wait_owned(conn, not_by=holder)
    holdfast_fleet.wait_new_seqs(conn, 10)
    holdfast_fleet.assert_no_loss([conn], stored=stored)
PY
MYAPP_DB="$WORK/sink.db" .venv/bin/pytest -q -p no:cacheprovider tests

cat > Dockerfile <<'DOCKER'
FROM python:3.12-slim
COPY dist/ /tmp/dist/
COPY myapp/ /opt/app/myapp/
RUN pip install --no-cache-dir /tmp/dist/*.whl
ENV PYTHONPATH=/opt/app
USER 10001:10001
ENTRYPOINT ["python", "-m", "holdfast.worker"]
DOCKER
cat > deploy/app.py <<'PY'
from holdfast.cdk import HoldfastFleet  # first: it quiets jsii's Node 20 banner

import aws_cdk as cdk

app = cdk.App()
stack = cdk.Stack(app, "MyFleet")
HoldfastFleet(stack, "Fleet", handler="myapp.handler:handle", worker_image_directory="..")
types = [r["Type"] for r in app.synth().get_stack_by_name("MyFleet").template["Resources"].values()]
assert "Custom::VpcRestrictDefaultSG" in types, "the default security group is left open"
print(f"synthesized MyFleet: {len(types)} resources")
PY
(cd deploy && ../.venv/bin/python app.py)
echo "# journey PASS"
