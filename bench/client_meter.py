"""Consumed capacity of the real code's calls, metered at its boto3 client.

``ClientMeter(client, lease, session)`` registers two botocore event hooks on ``client``:
``provide-client-params`` adds ``ReturnConsumedCapacity="INDEXES"`` to every call that accepts
it, and ``after-call`` books what each answer reports (``holdfast.chaos.consumed``'s parser,
``bench.meter``'s role names) into the ``Tally`` of the ``measure()`` block in progress. So
whatever a method of ``holdfast.core`` sends (one write, a read then a write, a batch, many
calls from a thread pool) is counted as it is sent, never from a copy of its expressions.

A call that asked and got no ``ConsumedCapacity`` back is listed in ``Tally.unreported``:
DynamoDB Local reports nothing for PartiQL nor for a write refused by its condition.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.meter import role_of
from holdfast.chaos.consumed import CAPACITY_OPS, Kind, reported_units

__all__ = ["ClientMeter", "Tally"]

_READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})


@dataclass
class Tally:
    """What the calls of one ``measure()`` block consumed."""

    calls: list[str] = field(default_factory=list)  # API operations, in the order sent
    units: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> role -> units
    unreported: list[str] = field(default_factory=list)
    returned: int = 0  # items returned by reads (``Count``)

    def of(self, kind: str) -> dict[str, float]:
        return dict(self.units.get(kind, {}))

    @property
    def form(self) -> str:
        """The distinct API operations, in the order first sent: ``GetItem + UpdateItem``."""
        return " + ".join(dict.fromkeys(self.calls))


class ClientMeter:
    """Meters every DynamoDB call of ``client``; ``lease`` / ``session`` name the tables."""

    def __init__(self, client: Any, lease: str, session: str) -> None:
        self.lease, self.session = lease, session
        self._tally: Tally | None = None
        self._lock = threading.Lock()  # a reaper releases from a thread pool
        client.meta.events.register("provide-client-params.dynamodb.*", self._ask)
        client.meta.events.register("after-call.dynamodb.*", self._book)

    @contextlib.contextmanager
    def measure(self) -> Iterator[Tally]:
        """Book every call made inside the block (from any thread) into the yielded tally."""
        tally = Tally()
        self._tally = tally
        try:
            yield tally
        finally:
            self._tally = None

    def _ask(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in CAPACITY_OPS:
            params["ReturnConsumedCapacity"] = "INDEXES"

    def _book(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        tally = self._tally
        if tally is None or model.name not in CAPACITY_OPS:
            return
        kind: Kind = "read" if model.name in _READS else "write"
        consumed = parsed.get("ConsumedCapacity")
        entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        with self._lock:
            tally.calls.append(model.name)
            tally.returned += int(parsed.get("Count", 0) or 0)
            if not entries:
                tally.unreported.append(model.name)
            for key, units in reported_units(model.name, kind, entries):
                roles = tally.units.setdefault(key.kind, {})
                role = role_of(key.table, key.part, self.lease, self.session)
                roles[role] = roles.get(role, 0.0) + units
