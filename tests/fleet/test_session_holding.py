"""``holdfast up``'s table watch judges holdings by sessions, not by the backstop expiry."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

from holdfast.core import names
from holdfast.core.sessions import SessionStore
from holdfast.core.store import wall_clock_ms
from holdfast.core.table import create_stream
from holdfast.fleet.procs import Fleet
from holdfast.fleet.session import Session
from holdfast.fleet.view import Snapshot
from holdfast.localaws import LocalAws


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, t: float, text: str, style: str = "") -> None:
        self.lines.append(text)

    def refresh(self, snap: Snapshot) -> None:
        pass

    def close(self) -> None:
        pass


def _own(ddb: Any, table: str, conn_id: str, owner: str) -> None:
    ddb.update_item(TableName=table, Key={"Pk": {"S": f"CONN#{conn_id}"}},
                    UpdateExpression="SET lease_owner = :o, lease_expires_at_ms = :e",
                    ExpressionAttributeValues={":o": {"S": owner},
                                               ":e": {"N": str(wall_clock_ms() + 3_600_000)}})


def test_a_stream_owned_by_no_live_session_is_not_shown_held(
        ddb_local: LocalAws, ddb: Any, unique_id: str) -> None:
    """An owner without a session item is not holding its stream, whatever its hour-long
    backstop says; a live session's stream is held."""
    sessions = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=8_000,
                            skew_ms=1_000)
    live = sessions.start(f"live-{unique_id}", 10).owner
    for conn_id, owner in ((f"ghost-{unique_id}", f"gone-{unique_id}#1"),
                           (f"held-{unique_id}", live)):
        create_stream(ddb, ddb_local.table, conn_id, "wss://example.com/s")
        _own(ddb, ddb_local.table, conn_id, owner)
    fleet = SimpleNamespace(env={names.ENV_TABLE: ddb_local.table,
                                 names.ENV_SESSION_TABLE: ddb_local.session_table},
                            workers={}, crashed=lambda: [])
    view = _Lines()
    up = Session(cast(Fleet, fleet), view, threading.Event())
    up._ddb = ddb
    up.tick()
    assert up.observer.streams[f"ghost-{unique_id}"].owner is None
    assert up.observer.streams[f"held-{unique_id}"].owner == live
