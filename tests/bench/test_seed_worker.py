"""bench.seed_worker, the seed's own program, on DynamoDB Local and a real upstream."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.seed_worker import resume_url
from holdfast.core.schema import pk_for, table_definition
from holdfast.core.table import create_stream
from holdfast.fleet.procs import REPO_ROOT
from holdfast.fleet.recorder import RECORD_DIR_ENV, RECORDER_SPEC, read_records
from holdfast.localaws import LocalAws
from holdfast.upstream import UpstreamServer
from tests.conftest import TIMEOUT_SCALE


def test_resume_url_sets_from_seq() -> None:
    """The resume point goes into ``from_seq``, replacing one already in the URL."""
    assert resume_url("ws://h/s/a", None) == "ws://h/s/a"
    assert resume_url("ws://h/s/a", 6) == "ws://h/s/a?from_seq=6"
    assert resume_url("ws://h/s/a?x=1&from_seq=2", 6) == "ws://h/s/a?x=1&from_seq=6"


async def _wait(pred: Any, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s * TIMEOUT_SCALE
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(0.1)
    return bool(pred())


async def test_seed_worker_acquires_delivers_and_releases_with_expiry_zero(
        ddb: Any, ddb_local: LocalAws, unique_id: str, tmp_path: Path) -> None:
    """It claims a STARTED stream, delivers from last_seq + 1 through the recorder, carries
    the checkpoint on its renewals, and on SIGTERM releases with expiry 0, owner kept."""
    table, key = f"{unique_id}-leases", {"Pk": {"S": pk_for("s1")}}
    ddb.create_table(**table_definition(table))

    def item() -> dict[str, Any]:
        got: dict[str, Any] = ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
        return got

    def seqs() -> list[int]:
        return [r.seq for r in read_records(tmp_path) if r.conn_id == "s1"]

    async with UpstreamServer(rate=50) as up:
        create_stream(ddb, table, "s1", up.url("s1"))
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET last_seq = :s",
                        ExpressionAttributeValues={":s": {"N": "5"}})
        env = {**os.environ, **ddb_local.env(), "HOLDFAST_TABLE": table,
               "HOLDFAST_WORKER_ID": "seed-w1", "HOLDFAST_HANDLER": RECORDER_SPEC,
               RECORD_DIR_ENV: str(tmp_path), "HOLDFAST_LEASE_SECONDS": "3",
               "HOLDFAST_HEARTBEAT_SECONDS": "0.5", "HOLDFAST_RECONCILE_SECONDS": "1",
               "PYTHONPATH": str(REPO_ROOT)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.seed_worker", env=env, cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            assert await _wait(lambda: len(seqs()) >= 10 and "last_seq" in item()
                               and int(item()["last_seq"]["N"]) > 5, 30), seqs()
            held = item()
            assert held["lease_owner"]["S"] == "seed-w1"
            assert int(held["lease_expires_at_ms"]["N"]) > time.time_ns() // 10**6
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 15 * TIMEOUT_SCALE)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        out = (await proc.stdout.read()).decode() if proc.stdout else ""
    assert code == 0, out
    handled = seqs()
    assert handled[0] == 6 and handled == list(range(6, 6 + len(handled))), handled
    released = item()
    assert released["lease_expires_at_ms"]["N"] == "0"
    assert released["lease_owner"]["S"] == "seed-w1"
    assert int(released["last_seq"]["N"]) == handled[-1]
    ddb.delete_table(TableName=table)
