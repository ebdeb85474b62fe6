"""What the operator commands share: their exit codes, the ``--table`` option, the DynamoDB
client they use, and the guard that turns their errors into one stderr line and an exit code.

The operator commands (``start``, ``stop``, ``rm`` in ``holdfast.cli.ops``; ``ls``, ``status``
in ``holdfast.cli.listing``) work against the local stack (the env ``holdfast localaws`` /
``holdfast up`` writes) or a real AWS account (standard AWS configuration). Exit codes, for
scripts (``holdfast drain`` and ``holdfast task-stopped`` use them too):

    0  done
    1  the operation failed: unknown id, id already exists, ``stop --wait`` timed out
    2  usage: bad arguments, an invalid id, a refused (hostile) URL, no table named
    3  AWS or configuration: table missing, credentials refused or absent, AWS unreachable
  130  interrupted (Ctrl-C; ``holdfast.cli.main``)
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Final

from holdfast.core import settings as S
from holdfast.core.aws import client_config, dynamodb_client
from holdfast.core.exceptions import ConfigError, HoldfastError, StoreUnavailable
from holdfast.core.liveness import session_owner
from holdfast.core.model import validate_worker_id
from holdfast.core.redact import scrub
from holdfast.core.schema import TABLE_NAME_RE

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "ENV_HINT",
    "EXIT_AWS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "OpsExit",
    "add_table_option",
    "guard",
    "ops_ddb",
    "printable",
    "table_name",
    "worker_id_arg",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AWS = 0, 1, 2, 3
# Where a command run by hand against the local fleet finds its environment.
ENV_HINT: Final = ("for the local fleet: `holdfast up --env-file .holdfast.env`, then "
                   "`set -a; . ./.holdfast.env; set +a`")
# C0, DEL and C1 control characters, shown as \xNN: table text is anyone's to write, and
# an escape sequence printed as written retitles or clears the operator's terminal.
# Unicode's bidirectional controls too (shown as \uNNNN): printed raw, they reorder what the
# terminal shows after them, so a crafted error could make a line read otherwise.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                               *range(0x2066, 0x206A))}


class OpsExit(Exception):
    """Ends a command with this exit code and message (printed by ``guard``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def printable(text: str) -> str:
    """``text`` with its control characters shown as ``\\xNN`` and its bidirectional controls
    as ``\\uNNNN`` (printable unicode kept)."""
    return text.translate(_CONTROLS)


def worker_id_arg(text: str) -> str:
    """``text`` as a worker id, else ``ValueError``; for a session owner as ``ls`` and
    ``status`` show it (``w1#<incarnation>``) the message says what to type instead."""
    try:
        return validate_worker_id(text)
    except ValueError:
        owner = session_owner(text)
        if owner is None:
            raise
        raise ValueError(f"invalid worker id {text[:80]!r}: give the worker id without its "
                         f"'#<incarnation>' suffix: {owner[0]}") from None


def add_table_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", default=None,
                   help="lease table (default: $HOLDFAST_TABLE)")


def table_name(args: argparse.Namespace) -> str:
    table: str = args.table or S.TABLE.get(os.environ) or ""
    if not table:
        raise OpsExit(EXIT_USAGE, f"no table: pass --table or set HOLDFAST_TABLE ({ENV_HINT})")
    if not TABLE_NAME_RE.match(table):
        raise OpsExit(EXIT_USAGE, f"not a DynamoDB table name: {printable(table[:300])} "
                      "(3-255 of A-Z a-z 0-9 _ . -)")
    return table


def ops_ddb() -> DynamoDBClient:
    # An operator waits for an answer; three attempts (``retries=2``: two after the first)
    # with short timeouts say "unreachable" fast.
    return dynamodb_client(client_config(read_timeout=5, retries=2))


def guard(run: Any) -> Any:
    """Turn our exceptions into one clear stderr line and a distinct exit code."""
    def wrapped(args: argparse.Namespace) -> int:
        try:
            code: int = run(args)
            return code
        except OpsExit as exc:
            print(f"holdfast {args.command}: {exc}", file=sys.stderr)
            return exc.code
        except ConfigError as exc:
            hint = ""
            if "not found" in str(exc):
                hint = " (check --table / HOLDFAST_TABLE, region and endpoint)"
            print(f"holdfast {args.command}: {exc}{hint}", file=sys.stderr)
            return EXIT_AWS
        except StoreUnavailable as exc:
            endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get(
                "AWS_ENDPOINT_URL") or "the AWS endpoint"
            # An endpoint may carry credentials (a proxy's user info): never printed.
            print(scrub(f"holdfast {args.command}: cannot reach DynamoDB at {endpoint}: {exc}",
                        endpoint, paths=True), file=sys.stderr)
            return EXIT_AWS
        except HoldfastError as exc:
            print(f"holdfast {args.command}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    return wrapped
