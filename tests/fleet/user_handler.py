"""A stand-in for a user's handler: appends ``conn_id seq`` lines to ``$USER_HANDLER_LOG``.

The fleet runs it wrapped by the recorder, so a test can check both saw the same messages.
"""

from __future__ import annotations

import os

from holdfast import Message

__all__ = ["handle", "not_async"]


async def handle(message: Message) -> None:
    if message.seq is None:
        return
    if message.conn_id.startswith("always-fails"):  # a downstream that is always down
        raise ConnectionError("downstream down")
    # Beside the recorder's folder (which may not exist yet): the fleet's run directory.
    path = os.environ.get("USER_HANDLER_LOG") or os.path.join(
        os.path.dirname(os.environ.get("HOLDFAST_RECORD_DIR", "./x")), "user-handler.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{message.conn_id} {message.seq}\n".encode())
    finally:
        os.close(fd)


def not_async(message: Message) -> None:
    """Not a valid handler: ``holdfast up --handler`` and the fixture must refuse it."""
