"""``python -m worker``: run one worker until SIGTERM/SIGINT (a second signal exits at once).

Exit codes: 0 after a graceful stop, 2 for a configuration error (the message names the
variable), 1 for a forced exit on the second signal, 3 after a graceful stop because a lost
session could not be started again (``worker.incarnation``: the platform replaces the worker).

Once the graceful stop is done the process exits within ``EXIT_WITHIN_S``, with the same code:
what is left (``asyncio.run`` waiting for a handler's task that swallows its cancellation, the
interpreter waiting for a thread blocked in ``asyncio.to_thread``) is not waited for.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Final

from aws_lambda_powertools import Logger

from holdfast.core import settings as S
from holdfast.core import tracing
from holdfast.core.aws import client_config, dynamodb_client, sqs_client
from holdfast.core.exceptions import ConfigError, HoldfastError, MalformedItem, SessionConflict
from holdfast.worker import gcpauses
from holdfast.worker.config import WorkerConfig, load_config
from holdfast.worker.handler import load_handler
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import service_of, worker_logger
from holdfast.worker.protocol import load_protocol
from holdfast.worker.supervisor import Supervisor

__all__ = ["EXIT_WITHIN_S", "build_worker", "main"]

# After the graceful stop (releases written, the session ended or left to expire): the loop's
# and the interpreter's teardown, and tracing's last export, get this long.
EXIT_WITHIN_S: Final = 2.0
EXIT_SESSION_NOT_RESTARTED: Final = 3


def build_worker(config: WorkerConfig) -> Supervisor:
    """A worker wired to real AWS clients (endpoints from the standard AWS variables)."""
    # A DynamoDB call must fail well within the lease's usable window (so a retry still fits
    # before the fence), not after botocore's 60 s.
    read_timeout = min(3.0, max(0.5, config.timing.usable_ms / 2000))
    # ONE DynamoDB client for all the bulk work of the process (checkpoints, claims,
    # releases, sweeps), in adaptive mode: its token bucket is the process's one shared
    # back-off, so a throttled table sees this worker slow down as a whole rather than every
    # caller retrying on its own.
    ddb = dynamodb_client(client_config(read_timeout=read_timeout, retries=2,
                                        retry_mode="adaptive"))
    # The session heartbeat (one call per heartbeat for every stream) must not wait in that
    # bucket: throttled, the bucket drops to half a call a second and the heartbeat would miss
    # its fence. It makes one attempt per call (no botocore retry: its pause, up to a second,
    # is not timed against the fence) and retries itself, jittered and bounded by the fence
    # (worker.session).
    session_ddb = dynamodb_client(client_config(read_timeout=read_timeout, retries=0))
    sqs = sqs_client()
    return Supervisor(config, ddb=ddb, sqs=sqs, handler=load_handler(config.handler),
                      protocol=load_protocol(config.protocol), session_ddb=session_ddb)


def _exit_after(seconds: float, code: int, logger: Logger) -> None:
    """Exit with ``code`` in ``seconds`` unless the process has ended by then (see the module)."""

    def exit_now() -> None:
        logger.warning("process teardown still waiting (a task or thread that would not stop): "
                       "exiting now", waited_s=seconds, exit_code=code)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True  # never what the interpreter waits for
    timer.start()


async def _serve(worker: Supervisor, logger: Logger) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            logger.warning("second signal: exiting at once, leases will expire",
                           signal=sig.name, worker_id=worker.worker_id,
                           streams=len(worker.streams))
            sys.stdout.flush()
            os._exit(1)
        logger.info("signal received: graceful stop", signal=sig.name,
                    worker_id=worker.worker_id)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    # Fail fast on a missing table or refused credentials; an unreachable DynamoDB is retried.
    try:
        await on_io_threads(worker.store.get_raw, "__holdfast_startup_probe__")
    except ConfigError:
        raise
    except HoldfastError as exc:
        logger.warning("DynamoDB not reachable at startup, carrying on", error=str(exc)[:300])
    # The process's own heap policy (not the in-process tests'): see ``worker.gcpauses``.
    frozen = asyncio.create_task(gcpauses.keep_frozen())
    try:
        counts = await worker.run(stop.wait)
    finally:
        frozen.cancel()
    code = EXIT_SESSION_NOT_RESTARTED if counts["session_not_restarted"] else 0
    _exit_after(EXIT_WITHIN_S, code, logger)
    return code


_USAGE = f"""usage: python -m holdfast.worker

{__doc__}
Configured from the environment only (HOLDFAST_TABLE, HOLDFAST_QUEUE_URL, HOLDFAST_HANDLER...):
`holdfast settings` lists every variable with its default and range."""


def main(env: Mapping[str, str] | None = None, argv: list[str] | None = None) -> int:
    args = argv or []
    if args:  # no options: --help (or anything) prints how it is configured instead
        print(_USAGE, file=sys.stdout if args[0] in ("-h", "--help") else sys.stderr)
        return 0 if args[0] in ("-h", "--help") else 2
    try:
        config = load_config(env)
        source = os.environ if env is None else env
        # Off by default; on, every span of this process is "<service>" in the backend.
        tracing.setup(service_of(source), source)
    except (ConfigError, ValueError) as exc:
        print(f"holdfast worker: configuration error: {exc}", file=sys.stderr)
        return 2
    logger = worker_logger(source, level=config.log_level, worker_id=config.worker_id)
    if not config.handler:  # the demo's default; in an app's fleet, a setting left out
        logger.warning(f"{S.HANDLER.name} is not set: each message is only logged at debug "
                       "level, then checkpointed (no code of yours runs)")
    try:
        worker = build_worker(config)
        logger.debug("startup heap frozen", objects=gcpauses.freeze_startup_heap())
        gcpauses.watch(lambda generation, ms, collected: logger.warning(
            "slow garbage collection: every thread stopped meanwhile", generation=generation,
            took_ms=round(ms), collected=collected))
        code = asyncio.run(_serve(worker, logger))
    except ConfigError as exc:
        print(f"holdfast worker: configuration error: {exc}", file=sys.stderr)
        return 2
    except SessionConflict as exc:
        logger.error("refusing to start: worker id in use", error=str(exc))
        print(f"holdfast worker: {exc}", file=sys.stderr)
        return 2
    except MalformedItem as exc:  # our worker id's session item, broken by hand
        logger.error("refusing to start: cannot judge the session item of our worker id",
                     error=str(exc))
        print(f"holdfast worker: {exc}: fix or delete it (a session of this worker id may "
              "still be alive)", file=sys.stderr)
        return 2
    finally:
        tracing.shutdown()  # export what is buffered (otlp) after the graceful stop
    return code


if __name__ == "__main__":
    sys.exit(main(argv=sys.argv[1:]))
