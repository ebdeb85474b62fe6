"""Chaos soak for the local fleet: faults, hostile input and an independent invariant checker.

``python -m holdfast.chaos --minutes N`` runs it; ``holdfast.chaos.proxy.FaultProxy`` (a loopback
HTTP proxy in front of DynamoDB Local / moto) is shared with the benchmarks, which use it to
count API calls at the client.
"""

from __future__ import annotations

__all__: list[str] = []
