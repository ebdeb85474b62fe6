"""``python -m holdfast.runner``: the local event source mapping and sweeper, until Ctrl-C.

Reads its settings from the environment ``holdfast localaws`` prints (``HOLDFAST_TABLE``,
``HOLDFAST_QUEUE_URL``, ``AWS_ENDPOINT_URL_*`` ...); flags override ``HOLDFAST_RUNNER_*``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Mapping
from urllib.parse import urlsplit

from holdfast.core import tracing
from holdfast.core.exceptions import HoldfastError
from holdfast.core.urls import is_loopback_host

__all__ = ["main", "not_local"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m holdfast.runner", description=__doc__)
    p.add_argument("--start", choices=["TRIM_HORIZON", "LATEST"],
                   help="where to start reading shards present at start")
    p.add_argument("--poll-ms", type=int, help="pause between empty GetRecords polls")
    p.add_argument("--batch-size", type=int, help="records per invocation at most")
    p.add_argument("--batch-window-ms", type=int, help="batching window")
    p.add_argument("--parallelization", type=int, choices=range(1, 11), metavar="1-10",
                   help="batches invoked at once (order kept per item)")
    p.add_argument("--no-sweeper", action="store_true", help="do not run the sweeper loop")
    p.add_argument("--emit-metrics", action="store_true",
                   help="print the Lambdas' EMF metric lines (off by default: noisy locally)")
    p.add_argument("--log-level", default="INFO", help="runner log level (default INFO)")
    p.add_argument("--against-aws", action="store_true",
                   help="run even though DynamoDB or SQS is not on this machine (real AWS: a "
                        "second router and sweeper beside the deployed ones)")
    return p


# The endpoints the runner must find on this machine (``holdfast localaws`` prints them).
_LOCAL_ENDPOINTS = ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
                    "AWS_ENDPOINT_URL_SQS")


def not_local(env: Mapping[str, str]) -> list[str]:
    """The endpoint variables of ``env`` that do not point at this machine (unset: real AWS).
    The runner stands in for Lambda on the local fleet; a shell set up for the operator
    commands against a real table (``HOLDFAST_TABLE`` exported) would otherwise run it there,
    reading a day of stream records and sending nudges and orders to the real queues."""
    out = []
    for name in _LOCAL_ENDPOINTS:
        url = env.get(name) or env.get("AWS_ENDPOINT_URL") or ""
        if not is_loopback_host(urlsplit(url).hostname or ""):
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.against_aws and (remote := not_local(os.environ)):
        print(f"holdfast runner: {', '.join(remote)} not on this machine (unset: real AWS). "
              "The runner stands in for Lambda on the local fleet: run `holdfast localaws` "
              "and use the environment it prints, or pass --against-aws to run beside a "
              "deployed stack", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.emit_metrics:
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        # With nothing to publish, Powertools warns once per handler; that is expected here.
        warnings.filterwarnings("ignore", "No application metrics to publish")
    # Imported after the environment is final: the Lambdas read it at first use.
    from holdfast.runner.config import RunnerConfig
    from holdfast.runner.runner import Runner

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("holdfast.runner").info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        config = RunnerConfig.from_env()
        esm = dataclasses.replace(
            config.esm,
            batch_size=args.batch_size or config.esm.batch_size,
            parallelization=args.parallelization or config.esm.parallelization,
            batching_window_ms=(args.batch_window_ms if args.batch_window_ms is not None
                                else config.esm.batching_window_ms))
        config = dataclasses.replace(
            config, start=args.start or config.start, poll_ms=args.poll_ms or config.poll_ms,
            sweeper=config.sweeper and not args.no_sweeper, esm=esm)
        Runner(config, stop=stop).run()
    except HoldfastError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        # The router (imported by the runner) set tracing up, if HOLDFAST_TRACING asks for it.
        tracing.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
