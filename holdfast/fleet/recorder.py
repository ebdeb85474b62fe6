"""A handler plug-in that records every handled message, for the "no missed seq" check.

``HOLDFAST_HANDLER=holdfast.fleet.recorder:handle`` with ``HOLDFAST_RECORD_DIR=<dir>``: each
worker appends ``conn_id seq worker_id wall_ms`` lines to ``<dir>/<worker_id>.seqs`` (and
`` raised`` at the end of a call that raised).

With ``HOLDFAST_RECORD_WRAPS=package.module:function`` it wraps that (the user's) handler
instead of replacing it: each message is first awaited by the wrapped handler, then recorded.
A message the wrapped handler raised on is recorded all the same (it was delivered) and the
exception is re-raised: the worker retries it, so each attempt is one more record.

Each line is one ``os.write`` on an ``O_APPEND`` descriptor, not a buffered file: the worker
checkpoints a seq once this call returns, so the line must reach the kernel before that, or a
SIGKILLed worker would lose lines for seqs it had checkpointed (a false "missed seq").
"""

from __future__ import annotations

import inspect
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["RECORDER_SPEC", "RECORD_DIR_ENV", "RECORD_WRAPS_ENV", "Handled", "handle",
           "read_records"]

RECORDER_SPEC = "holdfast.fleet.recorder:handle"
RECORD_DIR_ENV = "HOLDFAST_RECORD_DIR"
RECORD_WRAPS_ENV = "HOLDFAST_RECORD_WRAPS"
_fds: dict[str, int] = {}  # worker id -> descriptor (one per process in practice)
# The wrapped handler, loaded on first use (spec -> callable); None: nothing to wrap.
_wrapped: dict[str, Callable[[Any], Awaitable[object]] | None] = {}


class _Message(Protocol):
    @property
    def conn_id(self) -> str: ...
    @property
    def seq(self) -> int | None: ...
    @property
    def worker_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Handled:
    """One recorded handler call."""

    conn_id: str
    seq: int
    worker_id: str
    wall_ms: int
    raised: bool = False  # the wrapped handler raised on it (delivered, not done)


def _open(worker_id: str) -> int:
    fd = _fds.get(worker_id)
    if fd is None:
        folder = Path(os.environ.get(RECORD_DIR_ENV) or ".")
        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", worker_id) or "worker"
        fd = _fds[worker_id] = os.open(folder / f"{name}.seqs",
                                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return fd


def _inner() -> Callable[[Any], Awaitable[object]] | None:
    spec = os.environ.get(RECORD_WRAPS_ENV, "")
    if spec not in _wrapped:
        if not spec or spec == RECORDER_SPEC:
            _wrapped[spec] = None
        else:  # the worker's own loader: the same import rules and errors as HOLDFAST_HANDLER
            from holdfast.worker.handler import load_handler
            _wrapped[spec] = load_handler(spec)
    return _wrapped[spec]


async def handle(message: _Message) -> object:
    """Await the wrapped handler (if any), then record (conn_id, seq, worker, time); messages
    without a seq are not sequenced: not recorded. What the wrapped handler returned is
    returned: one that returns an awaitable (a missing ``await``) fails the call as it does
    in production (``worker.handler.call_once``), recorded as a raise."""
    inner = _inner()
    if inner is None:
        _record(message)
        return None
    try:
        result = await inner(message)
    except BaseException:
        _record(message, raised=True)
        raise
    _record(message, raised=inspect.isawaitable(result))
    return result


def _record(message: _Message, *, raised: bool = False) -> None:
    if message.seq is None:
        return
    line = (f"{message.conn_id} {message.seq} {message.worker_id} {time.time_ns() // 10**6}"
            f"{' raised' if raised else ''}\n")
    os.write(_open(message.worker_id), line.encode())


def read_records(folder: Path) -> Iterator[Handled]:
    """Every record of every ``*.seqs`` file in ``folder``; torn or foreign lines are skipped."""
    for path in sorted(folder.glob("*.seqs")):
        yield from _parse(path.read_text(errors="replace").splitlines())


def _parse(lines: Iterable[str]) -> Iterator[Handled]:
    for line in lines:
        parts = line.split()
        if (len(parts) not in (4, 5) or not parts[1].isdigit() or not parts[3].isdigit()
                or parts[4:] not in ([], ["raised"])):
            continue
        yield Handled(parts[0], int(parts[1]), parts[2], int(parts[3]), raised=len(parts) == 5)


if os.environ.get(RECORD_WRAPS_ENV):
    # Inside a worker: load the wrapped handler now, so a bad spec fails the worker's start-up
    # (as a bad HOLDFAST_HANDLER does) instead of every message.
    _inner()
