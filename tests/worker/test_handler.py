"""Handler plug-in loading, and what one call of it counts as."""

from __future__ import annotations

import asyncio

import pytest

from holdfast.worker.handler import (
    HandlerLoadError,
    Message,
    call_once,
    default_handler,
    load_handler,
)


async def test_default_handler_logs_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    """The default handler writes one debug line per message."""
    caplog.set_level("DEBUG", logger="holdfast-worker.holdfast.worker.handler")
    await default_handler(Message("c1", 4, "data", "w1"))
    assert any(r.message == "message" for r in caplog.records)


def test_loads_a_named_async_function() -> None:
    """package.module:function resolves to the function."""
    from tests.worker.recording_handler import record

    assert load_handler("tests.worker.recording_handler:record") is record
    assert load_handler(None) is default_handler


async def test_a_decorated_async_handler_loads_and_its_calls_succeed() -> None:
    """A handler behind a decorator whose wrapper is sync (functools.wraps) is an async handler."""
    handler = load_handler("tests.worker.recording_handler:decorated")
    assert await call_once(handler, MSG, 1.0) is None


@pytest.mark.parametrize(("spec", "why"), [
    ("tests.worker.recording_handler:not_async", "async function"),
    ("tests.worker.recording_handler:lambda_style", "must take one argument, the message"),
    ("tests.worker.recording_handler:missing", "cannot be loaded"),
    ("no_such_module_xyz:f", "cannot be loaded"),
    ("tests.worker.recording_handler", "must be 'package.module:function'"),  # no function
])
def test_bad_handlers_are_refused(spec: str, why: str) -> None:
    """Missing, synchronous or wrongly shaped handlers (a Lambda's ``event, context``) are a
    HandlerLoadError naming HOLDFAST_HANDLER."""
    with pytest.raises(HandlerLoadError, match=f"HOLDFAST_HANDLER.*{why}"):
        load_handler(spec)


MSG = Message("c1", 4, "data", "w1")


async def test_a_returned_awaitable_is_a_failed_call_not_a_handled_message() -> None:
    """``return store(m)`` with the await forgotten: the call fails, saying so, and the
    coroutine is closed (never run, no warning far from the cause)."""
    ran: list[int] = []

    async def store(m: Message) -> None:
        ran.append(m.seq or 0)

    async def forgot(m: Message) -> object:
        return store(m)

    failed = await call_once(forgot, MSG, 1.0)
    assert failed is not None and "missing `await`" in failed.error and not ran


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()])
async def test_a_handlers_own_exit_or_cancellation_is_its_calls_failure(
        exc: BaseException) -> None:
    """SystemExit, KeyboardInterrupt or a CancelledError the handler raises itself fail its
    call (to retry, then park) instead of ending the worker or passing for a stop."""
    async def leaves(_m: Message) -> None:
        raise exc

    failed = await call_once(leaves, MSG, 1.0)
    assert failed is not None and not failed.timed_out and failed.exc is exc
    assert type(exc).__name__ in failed.error


class _Unprintable(Exception):
    def __str__(self) -> str:
        return str(self.detail)  # type: ignore[attr-defined]  # never set: its own bug


class _UnprintableCancel(asyncio.CancelledError):
    __str__ = _Unprintable.__str__


@pytest.mark.parametrize("exc", [_Unprintable(), _UnprintableCancel()])
async def test_an_exception_whose_message_fails_is_still_the_calls_failure(
        exc: BaseException) -> None:
    """A handler's exception whose ``__str__`` raises fails its call, saying so (retried,
    then skipped or parked), instead of ending the stream as the worker's own error."""
    async def raises(_m: Message) -> None:
        raise exc

    failed = await call_once(raises, MSG, 1.0)
    assert failed is not None and failed.exc is exc
    assert "could not be formatted: AttributeError" in failed.error


async def test_a_cancellation_from_outside_still_stops_the_call() -> None:
    """A stop's cancellation of the stream's task is not swallowed as a failed call."""
    async def slow(_m: Message) -> None:
        await asyncio.sleep(30)

    task = asyncio.ensure_future(call_once(slow, MSG, 60.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
