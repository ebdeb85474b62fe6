"""``holdfast``: the operator command line. Subcommands register themselves in ``COMMANDS``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from holdfast import __version__
from holdfast.cli.drain import DRAIN_COMMANDS
from holdfast.cli.listing import LISTING_COMMANDS
from holdfast.cli.ops import OPS_COMMANDS
from holdfast.cli.settingsref import SETTINGS_COMMANDS
from holdfast.cli.taskstopped import TASKSTOPPED_COMMANDS
from holdfast.fleet.cli import FLEET_COMMANDS
from holdfast.upstream import cli as upstream_cli

__all__ = ["COMMANDS", "build_parser", "main"]

# name -> (help, add_arguments(parser), run(args) -> exit code)
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: dict[str, Command] = {}


def _add_localaws(p: argparse.ArgumentParser) -> None:
    from holdfast.localaws.__main__ import add_arguments

    add_arguments(p)


def _run_localaws(args: argparse.Namespace) -> int:
    from holdfast.localaws.__main__ import run

    return run(args)


COMMANDS["localaws"] = ("run the embedded local AWS (DynamoDB Local + moto SQS) until Ctrl-C",
                        _add_localaws, _run_localaws)
COMMANDS["upstream"] = upstream_cli.COMMAND
COMMANDS.update(OPS_COMMANDS)
COMMANDS.update(LISTING_COMMANDS)
COMMANDS.update(TASKSTOPPED_COMMANDS)
COMMANDS.update(DRAIN_COMMANDS)
COMMANDS.update(FLEET_COMMANDS)
COMMANDS.update(SETTINGS_COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="holdfast",
        description="Holdfast: leased, self-healing fleets of outbound WebSocket connections.")
    parser.add_argument("--version", action="version", version=f"holdfast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_args, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(run=run)
    return parser


# 128 + SIGPIPE: what a shell reports for a command whose reader closed the pipe.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        result: int = args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: the shell's exit code for SIGINT, not a traceback
        return 130
    except BrokenPipeError:
        # The reader went away (``holdfast ls | head``): quiet, and the shell's code for
        # SIGPIPE, as other tools die with, not a traceback and not "failed" (1). Later writes
        # (the interpreter's final flush) go nowhere instead of failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return result


if __name__ == "__main__":
    sys.exit(main())
