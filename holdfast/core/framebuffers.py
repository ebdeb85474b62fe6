"""Whether a worker's frame buffers fit its task's memory: the one rule, for the worker (it
refuses to start, ``worker.config``) and for the stack (it refuses to synthesize,
``infra.settings``), so a fleet that would be OOM-killed under load never deploys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from holdfast.core import names
from holdfast.core import settings as S
from holdfast.core.exceptions import ConfigError

__all__ = ["MAX_UNSENT_BYTES", "MEMORY_RESERVE_MIB", "buffer_bytes", "check_buffers_fit",
           "warm_up_buffer_bytes"]

# What the task needs besides frame buffers: the interpreter, boto3, and each connection's
# socket, TLS and parser state.
MEMORY_RESERVE_MIB: Final = 256
# The most a connection keeps unsent before it is aborted (``worker.dial``): we send only
# pongs, pings and a close, so more means a peer that does not read (a ping flood's answers).
MAX_UNSENT_BYTES: Final = 2**16


def warm_up_buffer_bytes(max_frame: int) -> int:
    """Where a successor's warm-up (``worker.prefetch``: a handoff's, or a new stream's connect
    before its claim) stops reading: the rest waits in the socket until the stream is taken
    over. Reading stops once the buffer reaches this, so it holds less than half a frame more
    than it. Without a bound in bytes, an upstream answering a warm-up with a flood of its
    largest frames grew one stream's buffer to gigabytes, and an OOM kill releases nothing."""
    return max_frame // 2


def buffer_bytes(max_connections: int, max_frame: int, max_queue: int) -> int:
    """The most data the worker can hold at once, each connection at its worst.

    Per connection (websockets 17): the queue pauses reading only once it holds more than
    ``max_queue`` frames, so ``max_queue + 1`` queued; one message in the handler's hands; one
    frame half-read in the parser. Each up to ``max_frame`` bytes: ``max_queue + 3``. A stream
    being warmed up has no message in the handler's hands but a buffer of less than
    ``warm_up_buffer_bytes + max_frame`` (the handler's first message comes out of it): half a
    frame more. And up to ``MAX_UNSENT_BYTES`` unsent.
    """
    per_connection = max_frame * (max_queue + 3) + warm_up_buffer_bytes(max_frame)
    return max_connections * (per_connection + MAX_UNSENT_BYTES)


def check_buffers_fit(env: Mapping[str, str]) -> None:
    """``ConfigError`` naming every setting involved if the frame buffers the worker's
    environment allows do not fit its task memory (not checked without one)."""
    task_mib = S.TASK_MEMORY_MIB.get(env)
    if task_mib is None:
        return
    max_connections = S.MAX_CONNECTIONS.read(env)
    max_frame, max_queue = S.MAX_FRAME_BYTES.read(env), S.MAX_QUEUE.read(env)
    # An OOM kill releases nothing: every stream waits out its lease. Refuse to start instead.
    need = buffer_bytes(max_connections, max_frame, max_queue)
    have = (task_mib - MEMORY_RESERVE_MIB) * 2**20
    if need > have:
        raise ConfigError(
            f"{names.ENV_MAX_CONNECTIONS}={max_connections} x ({names.ENV_MAX_FRAME_BYTES}="
            f"{max_frame} x ({names.ENV_MAX_QUEUE}={max_queue} + 3.5) + "
            f"{MAX_UNSENT_BYTES // 1024} KiB unsent) = {need / 2**20:.0f} MiB of buffers does "
            f"not fit {names.ENV_TASK_MEMORY_MIB}={task_mib} minus {MEMORY_RESERVE_MIB} MiB "
            "reserve: lower one of the first three or give the task more memory")
