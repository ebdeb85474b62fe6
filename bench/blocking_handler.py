"""The blocked-handler bench's handler: streams named ``block-*`` hold a default-executor
thread for ``HOLDFAST_BENCH_BLOCK_SECONDS`` per message (``asyncio.to_thread(time.sleep)``, the
docs' advice for blocking work, at its worst); every other stream returns at once."""

from __future__ import annotations

import asyncio
import os
import time

from holdfast import Message

__all__ = ["BLOCK_PREFIX", "handle"]

BLOCK_PREFIX = "block-"
_BLOCK_S = float(os.environ.get("HOLDFAST_BENCH_BLOCK_SECONDS", "20"))


async def handle(message: Message) -> None:
    if message.conn_id.startswith(BLOCK_PREFIX):
        await asyncio.to_thread(time.sleep, _BLOCK_S)
