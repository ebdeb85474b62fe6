"""Operator commands that read the fleet: ``ls`` (one row per stream) and ``status`` (a fleet
summary), and ``scan_all``, the lease-table scan they (and ``holdfast up``) read it with.

The ``--table`` option, exit codes and error handling are those of the other operator commands
(``holdfast.cli.opscommon``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from holdfast.cli.fleetstate import (
    SessionRow,
    fleet_status,
    session_rows,
    sessions_by_worker,
    stream_row,
)
from holdfast.cli.opscommon import (
    EXIT_OK,
    EXIT_USAGE,
    OpsExit,
    add_table_option,
    guard,
    ops_ddb,
    printable,
    table_name,
)
from holdfast.core import rules
from holdfast.core import settings as S
from holdfast.core.aws import call, client_config, sqs_client
from holdfast.core.exceptions import ConfigError, MalformedItem
from holdfast.core.model import LeaseItem
from holdfast.core.redact import scrub
from holdfast.core.schema import ATTR, PK_PREFIX, STARTED, STOPPED, LeaseStatus, pk_for
from holdfast.core.sessions import SessionItem, SessionStore
from holdfast.core.urls import log_paths_from_env

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["LISTING_COMMANDS", "SHOWN", "scan_all"]

SHOWN = 10  # streams named per line of `status`; `ls` lists them all


def scan_all(client: DynamoDBClient, table: str) -> tuple[list[LeaseItem | MalformedItem],
                                                          dict[str, int]]:
    """Every item, parsed, plus ``updated_at_ms`` per id (for unowned ages)."""
    items: list[LeaseItem | MalformedItem] = []
    updated: dict[str, int] = {}
    kwargs: dict[str, Any] = {"TableName": table}
    while True:
        resp = call("scan", client.scan, **kwargs)
        for raw in resp.get("Items", []):
            try:
                item = LeaseItem.from_ddb(raw)
            except MalformedItem as bad:
                items.append(bad)
                continue
            items.append(item)
            with_updated = raw.get(ATTR.updated_at_ms, {}).get("N")
            if with_updated and with_updated.isdigit():
                updated[item.conn_id] = int(with_updated)
        if not resp.get("LastEvaluatedKey"):
            return items, updated
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _add_ls(p: argparse.ArgumentParser) -> None:
    p.add_argument("ids", nargs="*", metavar="ID",
                   help="only these streams, with their last errors in full")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_table_option(p)


ERROR_SHOWN = 120  # characters of a last error in a row of the whole listing


def _error_shown(error: str, whole: bool) -> str:
    """A last error as a row shows it: cut in the whole listing, saying where it is whole."""
    if whole or len(error) <= ERROR_SHOWN:
        return error
    return f"{error[:ERROR_SHOWN]}... (holdfast ls ID: in full)"


def _secs(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}s"


def esc(text: str) -> str:
    """Item text as shown: rich reads "[...]" as markup (a "[/]" anyone can write in an owner
    or an error failed the whole listing), and a terminal obeys the escape sequences in it."""
    return escape(printable(text))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class _PipedConsole(Console):
    """rich's console, but a closed pipe is the CLI's to handle (``cli.main``): rich exits 1
    on its own, which reads as "the command failed"."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _console() -> Console:
    # Piped (``| less``, ``| cat``): 120 columns at least, not the 80 rich assumes.
    return _PipedConsole(width=max(Console().width, 120) if not sys.stdout.isatty() else None)


def _run_ls(args: argparse.Namespace) -> int:
    name = table_name(args)  # "no table" (usage) before any AWS configuration
    items, _ = scan_all(ops_ddb(), name)
    try:
        paths = log_paths_from_env(os.environ)
    except ValueError as exc:
        raise OpsExit(EXIT_USAGE, str(exc)) from None
    notes: list[str] = []
    sessions = _read_sessions(notes)
    by_worker = None if sessions is None else sessions_by_worker(sessions)
    now = int(time.time() * 1000)
    rows = sorted((stream_row(i, now, log_paths=paths, sessions=by_worker, skew_ms=_skew_ms())
                   for i in items if isinstance(i, LeaseItem)),
                  key=lambda r: r.conn_id)
    bad = [i for i in items if isinstance(i, MalformedItem)]
    if args.ids:
        wanted = set(args.ids)
        keys = {pk_for(i) for i in wanted}
        bad = [b for b in bad if b.key in keys]  # named, with its reason
        found = {r.conn_id for r in rows} | {b.key.removeprefix(PK_PREFIX) for b in bad}
        notes += [f"no stream {i!r}" for i in sorted(wanted - found)]
        rows = [r for r in rows if r.conn_id in wanted]
    if args.json:
        print(json.dumps({"streams": [r.to_json() for r in rows],
                          "malformed": [{"key": b.key, "reason": b.reason} for b in bad],
                          "notes": notes}))
        return EXIT_OK
    # "session left": how long the holder's session has before it could be declared dead.
    # Without the session table only the item's backstop expiry is known: say so, since an
    # hour-long figure next to a seconds-long TTL reads as a bug.
    table = Table("id", "desired", "owner", "session left", "last_seq", "status / last error",
                  box=None, header_style="bold")
    for r in rows:
        state = r.desired_state if r.desired_state == STOPPED else f"[green]{STARTED}[/]"
        # Every text from an item through ``esc``.
        owner = esc(r.owner or "") or ("[red]unowned[/]" if r.desired_state == STARTED else "-")
        if r.stranded:
            owner = f"[red]stranded[/] {esc(r.owner or '')} ({esc(r.stranded[:60])})"
        # A RUNNING stream's last_error is history (left from an earlier failure): --json has it.
        shown_error = r.last_error if r.status != LeaseStatus.RUNNING else None
        detail = esc((r.status or "-") + (
            f": {_error_shown(shown_error, bool(args.ids))}" if shown_error else ""))
        left = (f"? (backstop {_secs(r.lease_left_ms)})" if r.backstop
                else _secs(r.lease_left_ms))
        table.add_row(esc(r.conn_id), state, owner, left,
                      "-" if r.last_seq is None else str(r.last_seq), detail)
    console = _console()
    console.print(table)
    for b in bad:
        console.print(f"[yellow]malformed[/] {esc(b.key)}: {esc(b.reason)}")
    console.print(_plural(len(rows), "stream"))
    for note in notes:
        console.print(f"[yellow]note[/] {esc(note)}")
    return EXIT_OK


def _add_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--queue-url", default=None, help="nudge queue (default: $HOLDFAST_QUEUE_URL)")
    p.add_argument("--dlq-url", default=None, help="dead-letter queue (default: $HOLDFAST_DLQ_URL)")
    add_table_option(p)


def _depth(url: str | None, notes: list[str]) -> int | None:
    if not url:
        return None
    try:
        sqs = sqs_client(client_config(read_timeout=5, retries=2))
        attrs = sqs.get_queue_attributes(QueueUrl=url,
                                         AttributeNames=["ApproximateNumberOfMessages"])
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"])
    except Exception as exc:  # the queue is a detail of the status: report, do not fail it
        notes.append(scrub(f"queue {url}: {type(exc).__name__}: {str(exc)[:120]}", url,
                           paths=True))
        return None


def _read_sessions(notes: list[str]) -> list[SessionItem | MalformedItem] | None:
    """Every session item, or None (noted) if there is no session table to read: then an
    owner with an unexpired lease counts as holding it, as before sessions."""
    table = S.SESSION_TABLE.get(os.environ)
    if not table:
        notes.append(f"no {S.SESSION_TABLE.name}: owners are not checked against their sessions, "
                     "a stream whose owner died may show as held for up to an hour; "
                     "'backstop' is the item's own expiry (refreshed while held), not the "
                     "session's time left")
        return None
    try:
        return list(SessionStore(ops_ddb(), table, "", ttl_ms=0, skew_ms=0).scan())
    except Exception as exc:  # sessions are a detail of the status: report, do not fail it
        notes.append(f"sessions {table}: {type(exc).__name__}: {str(exc)[:120]}; owners are "
                     "not checked against their sessions")
        return None


def _skew_ms() -> int:
    try:
        return rules.LeaseTiming.from_env(os.environ).skew_ms
    except ConfigError:  # a status must not fail on the worker's timings: the default skew
        return rules.DEFAULT_SKEW_MS


def _run_status(args: argparse.Namespace) -> int:
    name = table_name(args)  # "no table" (usage) before any AWS configuration
    items, updated = scan_all(ops_ddb(), name)
    notes: list[str] = []
    sessions = _read_sessions(notes)
    notes += [f"{m}: fix or delete it" for m in sessions or [] if isinstance(m, MalformedItem)]
    now, skew_ms = int(time.time() * 1000), _skew_ms()
    st = fleet_status(items, now, updated, skew_ms=skew_ms,
                      sessions=None if sessions is None else sessions_by_worker(sessions))
    # Unchecked: a status reports what it can reach rather than refuse a malformed URL.
    queue = args.queue_url or S.QUEUE_URL.raw(os.environ)
    dlq = args.dlq_url or S.DLQ_URL.raw(os.environ)
    rows: list[SessionRow] = [] if sessions is None else session_rows(sessions, now,
                                                                      skew_ms=skew_ms)
    st = dataclasses.replace(st, queue_depth=_depth(queue, notes),
                             dlq_depth=_depth(dlq, notes), notes=notes, sessions=rows)
    if args.json:
        print(json.dumps(st.to_json()))
        return EXIT_OK
    console = _console()
    for r in st.sessions:
        color = {"ALIVE": "green", "SILENT": "red", "DEAD": "red"}.get(r.state, "yellow")
        # A session that is not renewing says how much it held when it last did: read as
        # "now", a dead worker's count long after its streams moved on looked like a leak.
        console.print(f"  session [{color}]{r.state}[/] {esc(r.owner)}"
                      + (f" ({esc(r.version)})" if r.version else "") + f": {r.held}/{r.capacity} "
                      + ("streams" if r.state == "ALIVE" else "streams at its last heartbeat")
                      + f", heartbeat {_secs(r.heartbeat_age_ms)} ago"
                      + (f", expires in {_secs(r.expires_in_ms)}" if r.state == "ALIVE" else "")
                      + ("" if r.reaped or r.state == "ALIVE" else ", streams being released")
                      + (", draining" if r.draining else "")
                      + (f", rebalancing to {r.target:g}" if r.target is not None else ""))
    versions = st.versions()
    if any(versions):  # some worker says what it runs
        console.print(("[yellow]versions live (a deploy is under way)[/]: " if len(versions) > 1
                       else "version live: ")
                      + ", ".join(f"{esc(v) or 'unknown'} ({w} worker{'s' * (w != 1)}, {n} "
                                  f"stream{'s' * (n != 1)})" for v, (w, n) in versions.items()))
    # Owners of leases (a live worker holding nothing is in the session lines above only).
    console.print(f"[bold]{_plural(len(st.workers), 'worker')} holding leases[/], "
                  f"{_plural(st.streams, 'stream')} ({st.started} started, {st.stopped} stopped)")
    for owner, n in st.workers.items():
        console.print(f"  {esc(owner)}: {_plural(n, 'lease')}")
    color = "red" if st.unowned_started else "green"
    console.print(f"[{color}]unowned STARTED streams: {len(st.unowned_started)}[/]"
                  + (f" (oldest {_secs(st.oldest_unowned_ms)})" if st.oldest_unowned_ms
                     is not None else "")
                  + (f": {_first(st.unowned_started)}" if st.unowned_started else ""))
    for s in st.stranded[:SHOWN]:
        console.print(f"  [red]stranded[/] {esc(s.conn_id)}: owned by {esc(s.owner)}, "
                      f"{esc(s.reason)}"
                      + (f", for {_secs(s.age_ms)}" if s.age_ms is not None else "")
                      + (" (nobody releases it until then)" if s.stuck
                         else " (the sweeper releases it)"))
    if len(st.stranded) > SHOWN:
        console.print(f"  [red]and {len(st.stranded) - SHOWN} more stranded[/] (holdfast ls)")
    for label, ids in (("in back-off", st.backoff),
                       ("[yellow]quarantined (malformed item, see ls)[/]", st.quarantined),
                       ("handing over to a named successor", st.handing_over)):
        if ids:
            console.print(f"{label}: {len(ids)}: {_first(ids)}")
    if st.malformed:
        console.print(f"[yellow]malformed items: {len(st.malformed)}[/]")
    console.print(f"nudge queue depth: {'-' if st.queue_depth is None else st.queue_depth}, "
                  f"DLQ depth: {'-' if st.dlq_depth is None else st.dlq_depth}")
    for note in notes:
        console.print(f"[yellow]note[/] {esc(note)}")
    return EXIT_OK


def _first(ids: list[str]) -> str:
    """The first ``SHOWN`` of ``ids``, escaped, saying how many more there are."""
    more = len(ids) - SHOWN
    return esc(", ".join(ids[:SHOWN])) + (f" and {more} more (holdfast ls)" if more > 0 else "")


LISTING_COMMANDS = {
    "ls": ("list streams: owner, its session time left, last_seq, status", _add_ls,
           guard(_run_ls)),
    "status": ("fleet summary: workers, unowned streams, queue and DLQ depth",
               _add_status, guard(_run_status)),
}
