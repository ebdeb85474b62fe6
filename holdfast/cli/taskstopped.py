"""``holdfast task-stopped WORKER_ID``: report a worker's process gone, as ECS would.

Builds the "ECS Task State Change" (STOPPED) event the platform sends and runs the taskstopped
Lambda's own ``handle`` in this process, against the tables the environment names
(HOLDFAST_TABLE, HOLDFAST_SESSION_TABLE, AWS_ENDPOINT_URL_*): the session is declared dead at
once and its streams released, with no TTL waited out. Only for a process that is really gone:
a session that heartbeated within its TTL is refused unless ``--force`` (a live process would
deliver its streams beside their new holders until its next heartbeat is refused).
Exit codes as the other operator commands (``holdfast.cli.opscommon``).
"""

from __future__ import annotations

import argparse
import sys

from holdfast.cli.opscommon import (
    ENV_HINT,
    EXIT_AWS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    worker_id_arg,
)
from holdfast.core.exceptions import (
    ConfigError,
    HoldfastError,
    SessionStillLive,
    StoreUnavailable,
)
from holdfast.core.reaping import NO_SESSION_ITEM

__all__ = ["TASKSTOPPED_COMMANDS"]


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("worker_id", metavar="WORKER_ID",
                   help="the worker id (on ECS: the task id) whose process is gone")
    p.add_argument("--reason", default="reported stopped by an operator",
                   help="why it stopped (kept as the session's end reason)")
    p.add_argument("--force", action="store_true",
                   help="report it even if it heartbeated within its TTL (risks two "
                        "deliverers per stream for up to a heartbeat if it is alive)")


def _run(args: argparse.Namespace) -> int:
    from holdfast.lambdas.taskstopped.handler import report_stopped

    def fail(code: int, message: str) -> int:
        print(f"holdfast task-stopped: {message}", file=sys.stderr)
        return code

    try:
        out = report_stopped(worker_id_arg(args.worker_id), reason=args.reason,
                             force=args.force)
    except ValueError as exc:  # ConfigError is not one: it is caught below
        return fail(EXIT_USAGE, str(exc))
    except SessionStillLive as exc:
        return fail(EXIT_USAGE, f"refused: {exc}")
    except ConfigError as exc:
        return fail(EXIT_USAGE if "is not set" in str(exc) else EXIT_AWS,
                    f"{exc} ({ENV_HINT})")
    except StoreUnavailable as exc:
        return fail(EXIT_AWS, f"cannot reach DynamoDB: {exc}")
    except HoldfastError as exc:
        return fail(EXIT_FAILED, str(exc))
    # An unknown id fails as in every operator command; the other skips (already reaped, a
    # newer process) are done already.
    if out.skipped == NO_SESSION_ITEM:
        return fail(EXIT_FAILED, f"unknown worker {out.worker_id!r}: {out.skipped}")
    print(out.describe())
    return EXIT_OK


TASKSTOPPED_COMMANDS = {
    "task-stopped": ("report a worker's task stopped, as ECS would: its session is declared "
                     "dead now and its streams released", _add, _run),
}
