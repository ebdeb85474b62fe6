"""``holdfast upstream``: run the demo upstream until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from holdfast.upstream.server import UpstreamServer

__all__ = ["COMMAND", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8765, help="TCP port, 0 for any free one")
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
    if args.rate <= 0:
        print("error: --rate must be positive")
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


COMMAND = ("run the demo upstream WebSocket server (sequenced, resumable streams)",
           add_arguments, run)
