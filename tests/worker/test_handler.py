"""Handler plug-in loading."""

from __future__ import annotations

import pytest

from holdfast.worker.handler import HandlerLoadError, Message, default_handler, load_handler


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


@pytest.mark.parametrize(("spec", "why"), [
    ("tests.worker.recording_handler:not_async", "async function"),
    ("tests.worker.recording_handler:missing", "cannot be loaded"),
    ("no_such_module_xyz:f", "cannot be loaded"),
])
def test_bad_handlers_are_refused(spec: str, why: str) -> None:
    """Missing or synchronous handlers are a HandlerLoadError naming HOLDFAST_HANDLER."""
    with pytest.raises(HandlerLoadError, match=f"HOLDFAST_HANDLER.*{why}"):
        load_handler(spec)
