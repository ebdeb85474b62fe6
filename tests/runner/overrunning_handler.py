"""A handler for runner tests that takes ``event["sleep_s"]`` seconds (a handler overrunning
its deadline); any event is an empty batch."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["handle"]


def handle(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    time.sleep(float(event.get("sleep_s", 0)))
    return {"batchItemFailures": []}
