"""A handler for runner tests, run in the runner's sandbox processes: it appends each stream's
arrival (wall seconds) to ``$HOLDFAST_TEST_ARRIVALS`` and stays 3 s on a batch that names a
stream called ``slow-...``, as a router held up by a slow downstream would."""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["SLOW_S", "handle"]

SLOW_S = 3.0


def handle(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    conns = [str(r["dynamodb"]["Keys"]["Pk"]["S"]).removeprefix("CONN#")
             for r in event["Records"]]
    now = time.time()
    with open(os.environ["HOLDFAST_TEST_ARRIVALS"], "a") as out:
        out.writelines(f"{c} {now}\n" for c in conns)
    if any(c.startswith("slow-") for c in conns):
        time.sleep(SLOW_S)
    return {"batchItemFailures": []}
