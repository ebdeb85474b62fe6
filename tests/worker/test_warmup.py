"""One warm-up's record: a reservation or an open socket, what its take hands over, and how it
is dropped (a fake warm-up connection: no upstream, no DynamoDB)."""

from __future__ import annotations

from typing import Any, cast

from holdfast.core.model import StoredItem
from holdfast.worker.prefetch import Prefetch
from holdfast.worker.warmup import WarmUp


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _Socket:
    def __init__(self) -> None:
        self.transport = _Transport()


class _Prefetch:
    """What a warm-up uses of ``Prefetch``: its socket (None once closed), take and close."""

    def __init__(self) -> None:
        self.ws: _Socket | None = _Socket()
        self.closed = False

    async def take(self) -> Any:
        return ("taken", self.ws)

    async def close(self) -> None:
        self.closed = True
        self.ws = None


def _warm_up(prefetch: _Prefetch | None) -> WarmUp:
    return WarmUp(cast(Prefetch | None, prefetch), "holder#1", 3, 10_000,
                  cast(StoredItem, None), "me#1")


async def test_a_reservation_is_usable_and_hands_over_no_socket() -> None:
    """A reservation (no warm-up connection) is usable; its take is None, closing it is a no-op."""
    warm = _warm_up(None)
    assert warm.usable
    assert await warm.taken() is None
    await warm.close()
    warm.abort()


async def test_a_warm_up_is_usable_while_its_socket_is_open() -> None:
    """An open socket is usable and its take is the connection's; once closed it is not."""
    prefetch = _Prefetch()
    warm = _warm_up(prefetch)
    assert warm.usable
    assert await warm.taken() == ("taken", prefetch.ws)
    await warm.close()
    assert prefetch.closed and not warm.usable


async def test_abort_drops_the_socket_without_a_closing_handshake() -> None:
    """Abort cuts the transport at once (no close); after a close there is nothing to abort."""
    prefetch = _Prefetch()
    socket = prefetch.ws
    assert socket is not None
    warm = _warm_up(prefetch)
    warm.abort()
    assert socket.transport.aborted and not prefetch.closed
    await warm.close()
    warm.abort()  # the socket is gone: nothing to do
