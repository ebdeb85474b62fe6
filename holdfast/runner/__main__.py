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

from holdfast.core import tracing
from holdfast.core.exceptions import HoldfastError

__all__ = ["main"]


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
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
