"""A warm-up's buffer (``worker.prefetch``): bounded in memory, and nothing lost past the bound."""

from __future__ import annotations

import asyncio
import json
import sys

from websockets.asyncio.server import ServerConnection, serve

from holdfast.core.framebuffers import warm_up_buffer_bytes
from holdfast.core.urls import parse_allow_list
from holdfast.worker.dial import ConnectOptions
from holdfast.worker.prefetch import Prefetch
from holdfast.worker.protocol import QueryParamProtocol

MAX_FRAME = 2**16
FRAME_PAD = "x" * (MAX_FRAME - 100)  # each frame nearly the largest allowed
FRAMES = 200  # 12.5 MiB in all: far past any bound


async def _flood(ws: ServerConnection) -> None:
    """Sends every frame as fast as the socket takes them, then waits for the client to go."""
    for seq in range(1, FRAMES + 1):
        await ws.send(json.dumps({"seq": seq, "pad": FRAME_PAD}))
    await ws.wait_closed()


async def _resolve(host: str, port: int) -> list[str]:
    return [host]


async def test_a_flood_of_large_frames_stops_the_warm_up_reading_and_loses_nothing() -> None:
    """An upstream flooding a warm-up with its largest frames fills the buffer only to
    half a frame's limit (plus the frame that crossed it); the rest stays in the socket and
    comes, in order, after the takeover."""
    async with serve(_flood, "127.0.0.1", 0, max_size=None) as upstream:
        await _warm_up_and_take(upstream.sockets[0].getsockname()[1])


async def _warm_up_and_take(port: int) -> None:
    prefetch = Prefetch("c1", f"ws://127.0.0.1:{port}/feed", None, QueryParamProtocol(),
                        parse_allow_list("127.0.0.0/8"), ConnectOptions(max_size=MAX_FRAME),
                        _resolve, "w1")
    await prefetch.open(timeout_s=5)
    assert await prefetch.first_frame(5) is not None
    await asyncio.sleep(0.3)  # the flood goes on: time to overfill an unbounded buffer
    bound = warm_up_buffer_bytes(MAX_FRAME)
    buffered = sum(sys.getsizeof(frame) for frame in prefetch.frames)
    assert 0 < buffered < bound + MAX_FRAME + 100
    taken = await prefetch.take()
    seqs = [json.loads(frame)["seq"] for frame in taken.frames]
    async for frame in taken.ws:
        seqs.append(json.loads(frame)["seq"])
        if seqs[-1] == FRAMES:
            break
    await taken.ws.close()
    assert seqs == list(range(1, FRAMES + 1))
