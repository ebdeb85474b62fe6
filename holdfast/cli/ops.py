"""Operator commands that change streams: ``start``, ``stop``, ``resume``, ``rm``.

The ``--table`` option, exit codes and error handling are those of every operator command
(``holdfast.cli.opscommon``); ``ls`` and ``status`` are in ``holdfast.cli.listing``. The line
``resume`` prints (what the stream was, what its write changed) is ``holdfast.cli.resumeline``'s.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holdfast.cli.opscommon import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    OpsExit,
    add_table_option,
    guard,
    ops_ddb,
    printable,
    table_name,
)
from holdfast.cli.resumeline import resume_line
from holdfast.cli.urlinput import UrlInputError, read_url
from holdfast.core import names
from holdfast.core.aws import call
from holdfast.core.exceptions import MalformedItem, StreamHeld
from holdfast.core.model import MAX_SEQ, LeaseItem, validate_conn_id
from holdfast.core.redact import redact
from holdfast.core.schema import ATTR, PK_PREFIX, STARTED, STOPPED, pk_for
from holdfast.core.store import wall_clock_ms
from holdfast.core.table import (
    create_stream,
    delete_stream,
    restart_now,
    set_desired_state,
    swap_desired_state,
)
from holdfast.core.urls import UrlPolicy, check_url, policy_from_env

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["OPS_COMMANDS"]


def _id(text: str) -> str:
    try:
        return validate_conn_id(text)
    except ValueError as exc:
        bare = text.removeprefix(PK_PREFIX)
        if bare != text and _valid_id(bare):  # the item's key, as the table shows it
            raise OpsExit(EXIT_USAGE, f"invalid id {text[:80]!r}: give the stream id without "
                          f"the {PK_PREFIX!r} prefix: {bare}") from None
        raise OpsExit(EXIT_USAGE, f"invalid id {text[:80]!r}: {exc}") from None


def _valid_id(text: str) -> bool:
    try:
        validate_conn_id(text)
    except ValueError:
        return False
    return True


def _seconds(text: str) -> float:
    """A ``--wait``: a finite number of seconds, 0 or more (argparse's ``type``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a number of seconds >= 0")
    return value


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
        checked = check_url(url, policy)
    except ValueError as exc:  # UnsafeUrl is a ValueError too; its message is redacted
        raise OpsExit(EXIT_USAGE, f"refused URL: {exc}") from None
    if checked.address is None and not checked.name_allowed and policy.networks:
        # Accepted as written, but the workers judge where the name resolves: on the local
        # fleet (loopback ranges only) a public name was claimed, refused and backed off
        # with nothing said here.
        ranges = ", ".join(str(n) for n in policy.networks)
        print(f"note: {printable(checked.host)} is not named in {names.ENV_ALLOWED_HOSTS}: "
              f"the workers connect only if it resolves into its address ranges ({ranges})",
              file=sys.stderr)
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
    p.add_argument("--wait", type=_seconds, default=0, metavar="SECONDS",
                   help="wait until its holder has released the lease")
    add_table_option(p)


def _get_raw(client: DynamoDBClient, table: str, conn_id: str) -> dict[str, Any] | None:
    resp = call("get", client.get_item, TableName=table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                ConsistentRead=True)
    return resp.get("Item") or None


def _get(client: DynamoDBClient, table: str, conn_id: str) -> LeaseItem | None:
    raw = _get_raw(client, table, conn_id)
    return LeaseItem.from_ddb(raw) if raw else None


def _run_stop(args: argparse.Namespace) -> int:
    conn_id, table, client = _id(args.id), table_name(args), ops_ddb()
    before = swap_desired_state(client, table, conn_id, STOPPED)
    if before is None:
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    print(f"{'already stopped' if before == STOPPED else 'stopped'} {conn_id}")
    deadline = time.monotonic() + args.wait
    while args.wait > 0:
        try:
            item = _get(client, table, conn_id)
        except MalformedItem as bad:  # the stop landed: only the watching cannot go on
            print(f"{conn_id}: malformed item, its release cannot be watched: "
                  f"{printable(bad.reason)}")
            break
        # Released means no owner: the holder's own release or the reaper's removes it (an
        # expiry in the past with the owner kept is not a release, the owner still delivers).
        if item is None or not item.lease_owner:
            print(f"{conn_id}: lease released (last_seq {item.last_seq if item else None})")
            break
        if time.monotonic() > deadline:
            raise OpsExit(EXIT_FAILED, f"{conn_id}: still held by "
                          f"{printable(item.lease_owner)} after {args.wait:g} s")
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
    if args.after_seq is not None and not (args.now and 0 <= args.after_seq <= MAX_SEQ):
        raise OpsExit(EXIT_USAGE, f"--after-seq needs --now and a seq in 0..{MAX_SEQ}")
    # Read before the write: what the operator is told is what the stream was (started
    # already? its checkpoint before --after-seq moved it); the write changes nothing else shown.
    try:
        before: LeaseItem | MalformedItem | None = _get(client, table, conn_id)
    except MalformedItem as bad:  # started all the same; the worker will say why it cannot
        before = bad
    if before is None:
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    replaced = None
    if args.after_seq is not None:
        replaced = restart_now(client, table, conn_id, after_seq=args.after_seq)
        if replaced is None:
            # Its checkpoint is its holder's: never moved under it.
            raise OpsExit(EXIT_FAILED, f"{conn_id!r} is held or unknown: stop it first "
                          "(`holdfast stop --wait 30`), then resume it --after-seq")
    elif args.now:
        replaced = restart_now(client, table, conn_id)
    restarted = replaced is not None
    if replaced is not None:
        # The item as the write found it: a release landing between the read and the write
        # moved its checkpoint (told "was 40" where 60 was replaced).
        try:
            before = LeaseItem.from_ddb(replaced)
        except MalformedItem as bad:
            before = bad
    elif not set_desired_state(client, table, conn_id, STARTED):
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    if isinstance(before, MalformedItem):
        print(f"resumed {conn_id} (its item is malformed: {printable(before.reason[:200])})")
    else:
        print(resume_line(before, restarted=restarted, after_seq=args.after_seq))
    return EXIT_OK


def _add_rm(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="stream (connection) id")
    p.add_argument("--wait", type=_seconds, default=30, metavar="SECONDS",
                   help="for a held stream: how long to wait for its holder to release it "
                        "after the stop (default 30)")
    p.add_argument("--force", action="store_true",
                   help="delete even while held (a stream created again under the same id "
                        "may then be delivered twice until the old holder's stop lands)")
    p.add_argument("--yes", "-y", action="store_true",
                   help="do not ask (a terminal is asked to confirm: the checkpoint goes too)")
    add_table_option(p)


def _confirm_rm(client: DynamoDBClient, table: str, conn_id: str) -> None:
    """Show what goes, and ask: a mistyped id loses a stream's checkpoint for good."""
    raw = _get_raw(client, table, conn_id)  # raw: a malformed item is shown, not refused
    if not raw:
        raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
    seq, owner = raw.get(ATTR.last_seq, {}).get("N"), raw.get(ATTR.lease_owner, {}).get("S")
    print(f"{conn_id}: {printable(raw.get(ATTR.desired_state, {}).get('S', '?'))}, "
          f"{'held by ' + printable(owner) if owner else 'unowned'}, last_seq "
          f"{seq or 'none'}")
    try:
        answer = input("delete it and its checkpoint? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise OpsExit(EXIT_FAILED, f"{conn_id}: not removed")


def _run_rm(args: argparse.Namespace) -> int:
    conn_id, table, client = _id(args.id), table_name(args), ops_ddb()
    if not args.yes and sys.stdin.isatty():
        _confirm_rm(client, table, conn_id)
    deadline = time.monotonic() + args.wait
    while True:
        try:
            old = delete_stream(client, table, conn_id, held_too=args.force)
            if not old:
                raise OpsExit(EXIT_FAILED, f"unknown id {conn_id!r}")
            break
        except StreamHeld as held:
            # Stopped first, deleted once its holder let go: only then can the same id be
            # created again without two deliverers (docs/concepts/protocol.md). Stopped before
            # the deadline is looked at: even a --wait 0 leaves it stopped, as it says.
            set_desired_state(client, table, conn_id, STOPPED)
            if time.monotonic() >= deadline:
                raise OpsExit(EXIT_FAILED, f"{conn_id}: still held by {printable(held.owner)} "
                              f"after {args.wait:g} s (stopped; run rm again, or --force)"
                              ) from None
            time.sleep(0.2)
    # What went, so a mistake can be undone (start it again, then resume it past that seq).
    print(f"removed {conn_id} (last_seq was {old.get(ATTR.last_seq, {}).get('N', 'none')})")
    return EXIT_OK


OPS_COMMANDS = {
    "start": ("insert a STARTED stream (refuses a hostile URL)", _add_start, guard(_run_start)),
    "stop": ("set a stream to STOPPED: its holder closes it and releases the lease",
             _add_stop, guard(_run_stop)),
    "resume": ("set a stream STARTED again: a worker claims it and resumes from its "
               "checkpoint (--now: also end its back-off)", _add_resume, guard(_run_resume)),
    "rm": ("delete a stream's item", _add_rm, guard(_run_rm)),
}
