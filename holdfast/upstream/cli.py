"""``holdfast upstream``: run the demo upstream until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import sys
from pathlib import Path

from holdfast.upstream.server import UpstreamServer

__all__ = ["COMMAND", "add_arguments", "run"]


def _port(text: str) -> int:
    """A TCP port, 0-65535 (argparse's ``type``: out of range is a usage error, exit 2)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a port (0-65535)")
    return port


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=_port, default=8765, help="TCP port, 0 for any free one")
    p.add_argument("--rate", type=float, default=10.0, help="messages per second per stream")
    p.add_argument("--conn-log", type=Path, help="append connection opens/closes to this JSONL")
    p.add_argument("--compression", action="store_true", help="offer permessage-deflate")


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with UpstreamServer(host=args.host, port=args.port, rate=args.rate,
                              conn_log=args.conn_log, compression=args.compression) as server:
        # Scripts read this line to learn the port when --port 0 is used.
        print(f"upstream listening on ws://{args.host}:{server.port} "
              f"(paths /s/<id>, /garbage/<id>, /huge/<id>, /drop/<id>, /reject/<id>; "
              f"{args.rate:g} msg/s per stream)", flush=True)
        await stop.wait()


def run(args: argparse.Namespace) -> int:
    if not (args.rate > 0 and math.isfinite(args.rate)):  # nan passed "<= 0" and sent nothing
        print("holdfast upstream: --rate must be a positive number", file=sys.stderr)
        return 2
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args))
    except OSError as exc:  # the port in use, an address not on this host: one line, not a trace
        print(f"holdfast upstream: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


COMMAND = ("run the demo upstream WebSocket server (sequenced, resumable streams)",
           add_arguments, run)
