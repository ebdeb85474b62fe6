"""``python -m holdfast.chaos.launch``: run ``python -m worker`` with a skewed lease clock.

``HOLDFAST_CHAOS_CLOCK_OFFSET_MS=N`` shifts the wall clock the worker's lease store uses (and only
that one: the recorder and logs keep the real time, so the checker compares like with like). It
patches ``holdfast.core.store.wall_clock_ms`` before the worker imports it, so no worker code
changes for a test-only fault. Without the variable it is exactly ``python -m worker``.
"""

from __future__ import annotations

import os
import runpy
import time

__all__ = ["OFFSET_ENV", "main"]

OFFSET_ENV = "HOLDFAST_CHAOS_CLOCK_OFFSET_MS"


def main() -> None:
    offset = int(os.environ.get(OFFSET_ENV) or 0)
    if offset:
        from holdfast.core import store

        def skewed_ms() -> int:
            return time.time_ns() // 1_000_000 + offset

        store.wall_clock_ms = skewed_ms
    runpy.run_module("worker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
