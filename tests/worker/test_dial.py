"""Dialling an upstream (``worker.dial``) against hostile servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
import threading
import time
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from holdfast.core.framebuffers import MAX_UNSENT_BYTES
from holdfast.worker import dial as dial_module
from holdfast.worker.dial import ConnectOptions, dial, getaddrinfo
from holdfast.worker.iothreads import IO_THREADS, on_io_threads

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    key = next(line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
               if line.lower().startswith(b"sec-websocket-key"))
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())  # the protocol says SHA-1
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")


async def test_a_ping_flood_from_a_peer_that_never_reads_aborts_the_connection() -> None:
    """The upstream floods pings and never reads our pongs: the connection is aborted once
    ``MAX_UNSENT_BYTES`` wait unsent, in about a second, not after the keepalive's 40 s with
    the worker's memory growing meanwhile; the error says why."""
    flooding = asyncio.Event()

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await _handshake(reader, writer)
        ping = (bytes([0x89, 125]) + b"p" * 125) * 500
        flooding.set()
        try:
            while True:  # never reads: the client's pongs pile up on its side
                writer.write(ping)
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    server = await asyncio.start_server(flood, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        async with dial(f"ws://127.0.0.1:{port}/x", "127.0.0.1", port, {}, ConnectOptions(),
                        worker_id="w1") as ws:
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(15):
                    async for _ in ws:
                        pass
                    await ws.recv()  # closed cleanly instead: raises the close
            unsent = ws.transport.get_write_buffer_size()
    finally:
        server.close()
    assert flooding.is_set()
    assert time.monotonic() - started < 10
    assert unsent <= MAX_UNSENT_BYTES + 2**16  # stopped at the bound, not at the keepalive
    assert "not reading" in str(closed.value.__cause__)


async def test_a_frame_that_fails_the_connection_ends_it_within_the_close_timeout() -> None:
    """The upstream announces a 2 GiB frame, then stays silent with its socket open: the
    connection fails (1009) and ends within ``close_timeout``, not at the keepalive's next
    ping (20 s), so the stream reconnects at once."""
    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _handshake(reader, writer)
        writer.write(bytes([0x82, 127]) + (2**31).to_bytes(8, "big"))  # binary, 2 GiB
        await asyncio.sleep(60)

    server = await asyncio.start_server(huge, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    opts = ConnectOptions()
    started = time.monotonic()
    try:
        async with dial(f"ws://127.0.0.1:{port}/x", "127.0.0.1", port, {}, opts,
                        worker_id="w1") as ws:
            with pytest.raises(ConnectionClosed):
                async with asyncio.timeout(15):
                    await ws.recv()
    finally:
        server.close()
    assert time.monotonic() - started < opts.close_timeout_s + 1.5


async def test_names_that_do_not_resolve_hold_no_io_thread_and_time_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Lookups blocked in the OS resolver (a name whose servers never answer), more of them
    than there are I/O threads, leave the worker's I/O threads free for claims and releases,
    and each fails within the resolve timeout."""
    real = socket.getaddrinfo
    release = threading.Event()

    def stalled(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "stalled.example":
            release.wait(10)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stalled)
    monkeypatch.setattr(dial_module, "RESOLVE_TIMEOUT_S", 0.5, raising=False)
    lookups = [asyncio.create_task(getaddrinfo("stalled.example", 443))
               for _ in range(IO_THREADS + 4)]
    try:
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        assert await on_io_threads(lambda: 42) == 42
        assert time.monotonic() - t0 < 0.4
        results = await asyncio.wait_for(asyncio.gather(*lookups, return_exceptions=True), 3)
        assert all(isinstance(r, OSError) and "no answer within 0.5 s" in str(r)
                   for r in results), results
    finally:
        release.set()


async def test_names_that_never_answer_do_not_hold_up_other_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten names whose servers never answer, each asked again and again (streams on their
    back-off), are looked up once each at a time: another name still resolves at once (with
    a pool of 8 threads it queued behind them and timed out)."""
    real = socket.getaddrinfo
    release = threading.Event()
    calls: list[str] = []

    def stalled(host: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(host)
        if host.startswith("stalled"):
            release.wait(10)
        return real("localhost" if host.startswith("stalled") else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stalled)
    monkeypatch.setattr(dial_module, "RESOLVE_TIMEOUT_S", 0.3, raising=False)
    try:
        for _ in range(3):  # three rounds of retries of every stalled name
            tries = [asyncio.create_task(getaddrinfo(f"stalled-{i}.example", 443))
                     for i in range(10) for _ in range(2)]
            await asyncio.gather(*tries, return_exceptions=True)
        t0 = time.monotonic()
        assert await getaddrinfo("localhost", 443)
        assert time.monotonic() - t0 < 0.25
        assert sorted(c for c in calls if c.startswith("stalled")) == sorted(
            f"stalled-{i}.example" for i in range(10))
    finally:
        release.set()
