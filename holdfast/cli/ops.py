"""Operator commands that change streams: ``start``, ``stop``, ``resume``, ``rm``.

The ``--table`` option, exit codes and error handling are those of every operator command
(``holdfast.cli.opscommon``); ``ls`` and ``status`` are in ``holdfast.cli.listing``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from holdfast.cli.opscommon import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    OpsExit,
    add_table_option,
    guard,
    ops_ddb,
    table_name,
)
from holdfast.cli.urlinput import UrlInputError, read_url
from holdfast.core.aws import call
from holdfast.core.exceptions import MalformedItem, StreamHeld
from holdfast.core.model import MAX_SEQ, LeaseItem, validate_conn_id
from holdfast.core.redact import redact
from holdfast.core.schema import ATTR, STARTED, STOPPED, pk_for
from holdfast.core.store import wall_clock_ms
from holdfast.core.table import create_stream, delete_stream, restart_now, set_desired_state
from holdfast.core.urls import UrlPolicy, check_url, policy_from_env

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["OPS_COMMANDS"]


def _id(text: str) -> str:
    try:
        return validate_conn_id(text)
    except ValueError as exc:
        raise OpsExit(EXIT_USAGE, f"invalid id {text[:80]!r}: {exc}") from None


def _add_start(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="stream (connection) id")
    p.add_argument("url", nargs="?", default=None,
                   help="upstream ws:// or wss:// URL, or - to read it from stdin (keeps a "
                        "secret URL out of ps and shell history)")
    p.add_argument("--url-file", type=Path, default=None, metavar="FILE",
                   help="read the URL from FILE instead")
    add_table_option(p)


def _url_policy() -> UrlPolicy:
    try:
        return policy_from_env(os.environ)
    except ValueError as exc:
        raise OpsExit(EXIT_USAGE, str(exc)) from None


def _run_start(args: argparse.Namespace) -> int:
    conn_id = _id(args.id)
    policy = _url_policy()
    try:
        url = read_url(args.url, args.url_file, sys.stdin)
    except UrlInputError as exc:
        raise OpsExit(EXIT_USAGE, str(exc)) from None
    try:
        check_url(url, policy)
    except ValueError as exc:  # UnsafeUrl is a ValueError too; its message is redacted
        raise OpsExit(EXIT_USAGE, f"refused URL: {exc}") from None
    # Marked unowned since now: the first claim is measured like any handover.
    table = table_name(args)  # "no table" (usage) before any AWS configuration
    if not create_stream(ops_ddb(), table, conn_id, url,
                         created_at_ms=wall_clock_ms()):
        raise OpsExit(EXIT_FAILED,
                      f"{conn_id!r} already exists (`holdfast resume` starts it again from its "
                      "checkpoint; `holdfast rm` first to start afresh)")
    print(f"started {conn_id} -> {redact(url, paths=policy.log_paths)}")
    return EXIT_OK


def _add_stop(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="stream (connection) id")
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                   help="wait until its holder has released the lease")
    add_table_option(p)


def _get(client: DynamoDBClient, table: str, conn_id: str) -> LeaseItem | None:
    resp = call("get", client.get_item, TableName=table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                ConsistentRead=True)
    raw = resp.get("Item")
    return LeaseItem.from_ddb(raw) if raw else None


def _run_stop(args: argparse.Namespace) -> int:
    conn_id, table, client = _id(args.id), table_name(args), ops_ddb()
    if not set_desired_state(client, table, conn_id, STOPPED):
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    print(f"stopped {conn_id}")
    deadline = time.monotonic() + args.wait
    while args.wait > 0:
        item = _get(client, table, conn_id)
        # Released means no owner: the holder's own release or the reaper's removes it (an
        # expiry in the past with the owner kept is not a release, the owner still delivers).
        if item is None or not item.lease_owner:
            print(f"{conn_id}: lease released (last_seq {item.last_seq if item else None})")
            break
        if time.monotonic() > deadline:
            raise OpsExit(EXIT_FAILED, f"{conn_id}: still held by {item.lease_owner} after "
                          f"{args.wait:g} s")
        time.sleep(0.2)
    return EXIT_OK


def _add_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="stream (connection) id")
    p.add_argument("--now", action="store_true",
                   help="also end its back-off (after upstream or handler failures) so it is "
                        "claimed at once; a held stream is left to its holder")
    p.add_argument("--after-seq", type=int, default=None, metavar="SEQ",
                   help="with --now: resume after SEQ, its checkpoint set there (past a "
                        "message that can never be handled: SEQ itself is never delivered "
                        "again); refused for a held stream")
    add_table_option(p)


def _run_resume(args: argparse.Namespace) -> int:
    conn_id, table, client = _id(args.id), table_name(args), ops_ddb()
    if args.after_seq is not None:
        if not args.now or not 0 <= args.after_seq <= MAX_SEQ:
            raise OpsExit(EXIT_USAGE, f"--after-seq needs --now and a seq in 0..{MAX_SEQ}")
        if not restart_now(client, table, conn_id, after_seq=args.after_seq):
            # Its checkpoint is its holder's: never moved under it.
            raise OpsExit(EXIT_FAILED, f"{conn_id!r} is held or unknown: stop it first "
                          "(`holdfast stop --wait 30`), then resume it --after-seq")
    elif not (args.now and restart_now(client, table, conn_id)) and not set_desired_state(
            client, table, conn_id, STARTED):
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    try:
        item = _get(client, table, conn_id)
    except MalformedItem as bad:  # started all the same; the worker will say why it cannot
        print(f"resumed {conn_id} (its item is malformed: {bad.reason[:200]})")
        return EXIT_OK
    if item is None:  # deleted in between
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    where = "its start" if item.last_seq is None else f"after last_seq {item.last_seq}"
    said = f"resumed {conn_id} from {where}"
    left_s = ((item.lease_expires_at_ms or 0) - wall_clock_ms()) / 1000
    if item.lease_owner:
        said += f"; held by {item.lease_owner}"
    elif left_s > 0:
        # A give-up's back-off outlives a stop (only a holder's release ends one), so the
        # operator is told, with the way to end it.
        said += (f"; in back-off for {left_s:.0f} s more ({item.status or 'BACKOFF'}"
                 f"{': ' + item.last_error[:200] if item.last_error else ''}); "
                 f"`holdfast resume {conn_id} --now` retries at once")
    print(said)
    return EXIT_OK


def _add_rm(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="stream (connection) id")
    p.add_argument("--wait", type=float, default=30, metavar="SECONDS",
                   help="for a held stream: how long to wait for its holder to release it "
                        "after the stop (default 30)")
    p.add_argument("--force", action="store_true",
                   help="delete even while held (a stream created again under the same id "
                        "may then be delivered twice until the old holder's stop lands)")
    add_table_option(p)


def _run_rm(args: argparse.Namespace) -> int:
    conn_id, table, client = _id(args.id), table_name(args), ops_ddb()
    deadline = time.monotonic() + args.wait
    while True:
        try:
            if not delete_stream(client, table, conn_id, held_too=args.force):
                raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
            break
        except StreamHeld as held:
            # Stopped first, deleted once its holder let go: only then can the same id be
            # created again without two deliverers (docs/concepts/protocol.md).
            if time.monotonic() > deadline:
                raise OpsExit(EXIT_FAILED, f"{conn_id}: still held by {held.owner} after "
                              f"{args.wait:g} s (stopped; run rm again, or --force)") from None
            set_desired_state(client, table, conn_id, STOPPED)
            time.sleep(0.2)
    print(f"removed {conn_id}")
    return EXIT_OK


OPS_COMMANDS = {
    "start": ("insert a STARTED stream (refuses a hostile URL)", _add_start, guard(_run_start)),
    "stop": ("set a stream to STOPPED: its holder closes it and releases the lease",
             _add_stop, guard(_run_stop)),
    "resume": ("set a stream STARTED again: a worker claims it and resumes from its "
               "checkpoint (--now: also end its back-off)", _add_resume, guard(_run_resume)),
    "rm": ("delete a stream's item", _add_rm, guard(_run_rm)),
}
