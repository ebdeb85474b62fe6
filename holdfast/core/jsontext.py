"""Text from outside (a queue's message body, an upstream frame) read as JSON: one ``loads``.

``json.loads`` refuses nesting deeper than the interpreter's recursion limit (~1000 levels)
with ``RecursionError``, a ``RuntimeError``: readers that caught ``ValueError`` for "not JSON"
let a 1 KB body of ``[`` fail a whole batch of nudges, and stop the order inbox's loop.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads"]


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads``; ``ValueError`` for any text that is not JSON, nested too deeply too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
