"""Holdfast benchmarks on the local fleet: ``python -m bench [--quick]`` (``make bench``).

Scenarios run twice on the same machine in the same run: our design (router + sweeper nudges)
and the seed's polling design (the same worker with no runner, reconciling through the GSI
every 12 s, i.e. 60 s scaled like the lease 20 s -> 4 s). Results: ``bench/results/<date>.json``,
``<date>.md`` and PNG plots.
"""

from __future__ import annotations

__all__: list[str] = []
