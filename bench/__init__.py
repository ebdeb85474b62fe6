"""Holdfast benchmarks on the local fleet: ``python -m bench [--quick]`` (``make bench``).

Scenarios run twice on the same machine in the same run: our design (router + sweeper nudges)
and the seed's polling design (its own program, ``bench.seed_worker``, with no runner,
reconciling through the GSI every 12 s, i.e. 60 s scaled like the lease 20 s -> 4 s).
Results: ``bench/results/<date>.json``, ``<date>.md`` and PNG plots.

DynamoDB capacity: ``bench.capacity`` measures the write and read units of every operation
of the session design and the seed's on DynamoDB Local, by calling the real code
(``holdfast.core`` and ``bench.seed_worker``) through a metered client (``bench.client_meter``);
``bench.hotkeys`` models the busiest partition keys at 100,000 streams; the bench's proxies add
up the units every call consumed (``bench.meter``), and ``bench.cost_scenario`` meters each
mode at production timings for ``bench.cost`` to price. Parts run alone with
``--capacity-only``, ``--model-only`` and ``--cost-only``.
"""

from __future__ import annotations

__all__: list[str] = []
