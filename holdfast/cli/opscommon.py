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
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from holdfast.core import settings as S
from holdfast.core.aws import client_config, dynamodb_client
from holdfast.core.exceptions import ConfigError, HoldfastError, StoreUnavailable

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "EXIT_AWS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "OpsExit",
    "add_table_option",
    "guard",
    "ops_ddb",
    "table_name",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AWS = 0, 1, 2, 3


class OpsExit(Exception):
    """Ends a command with this exit code and message (printed by ``guard``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_table_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", default=None,
                   help="lease table (default: $HOLDFAST_TABLE)")


def table_name(args: argparse.Namespace) -> str:
    table: str = args.table or S.TABLE.get(os.environ) or ""
    if not table:
        raise OpsExit(EXIT_USAGE, "no table: pass --table or set HOLDFAST_TABLE "
                      "(for the local stack: source the env file `holdfast up` writes)")
    return table


def ops_ddb() -> DynamoDBClient:
    # An operator waits for an answer; two attempts with short timeouts say "unreachable" fast.
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
            print(f"holdfast {args.command}: cannot reach DynamoDB at {endpoint}: {exc}",
                  file=sys.stderr)
            return EXIT_AWS
        except HoldfastError as exc:
            print(f"holdfast {args.command}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    return wrapped
