"""Dialling an upstream: the checked address to connect to, no redirects, and what a drop means.

Split from ``worker.connection`` (the connection task) to keep that module to the task itself.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError
from websockets.frames import CloseCode

from holdfast.core.urls import CheckedUrl, UrlPolicy, check_address

__all__ = ["NoRedirects", "Resolver", "describe", "getaddrinfo", "killed_by_a_frame",
           "resolve_checked"]

Resolver = Callable[[str, int], Awaitable[list[str]]]


class NoRedirects(connect):
    """``connect`` that never follows a redirect: the target was not checked by the policy."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


async def getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve_checked(checked: CheckedUrl, policy: UrlPolicy, resolve: Resolver) -> str:
    """The address to connect to; ``UnsafeUrl`` if the host resolves anywhere it must not."""
    if checked.address is not None:
        return str(checked.address)
    try:
        addresses = await resolve(checked.host, checked.port)
    except OSError as exc:
        raise OSError(f"cannot resolve {checked.host}: {exc}") from None
    if not addresses:
        raise OSError(f"{checked.host} resolves to no address")
    # Any forbidden address refuses the host: a name that also points at the metadata
    # service is hostile, whichever address the OS would pick.
    for address in addresses:
        check_address(address.split("%", 1)[0], policy, url=checked.url,
                      name_allowed=checked.name_allowed)
    return addresses[0]


def killed_by_a_frame(exc: BaseException) -> bool:
    """We closed the connection over a frame: too big (1009) or not UTF-8 text (1007)."""
    sent = exc.sent if isinstance(exc, ConnectionClosedError) else None
    return sent is not None and sent.code in (CloseCode.MESSAGE_TOO_BIG,
                                              CloseCode.INVALID_DATA)


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]
