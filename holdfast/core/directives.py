"""Directives to one worker session: a rebalancing target, and draining.

Both live in the worker's session item, which the worker reads back with every heartbeat
(``ReturnValues=ALL_NEW``: no extra read), and both are also sent to the worker's order queue
(``holdfast.core.orders``) so it acts within milliseconds instead of a heartbeat later.

- **Target** (written by the decider, the sweeper, while the fleet is out of balance, and
  lapsed by it, one write each, once the fleet is balanced again):
  shed down to ``share`` at most ``shed_at_once`` at a time, and claim only while below
  ``ceiling`` (``holdfast.core.balance``). It holds until ``until_ms``: a decider that stops
  (slow, down, redeployed) leaves nothing behind but targets that lapse, and a worker with no
  live target claims and holds as it did before rebalancing existed. ``fleet`` is the number of
  live workers the decider saw (each worker's share of the fleet-wide reconnect budget).
  ``successors``: where the streams this worker lets go should go, as (owner, how many): its
  sheds, its drain, its SIGTERM. Each release names one (a handoff, ``store.release``), so a
  move lands on the worker the decider chose, not on whoever polls first.
- **Draining** (written by ``holdfast drain``): shed everything gracefully, claim nothing, keep
  running. It stays until ``holdfast drain --cancel`` or the end of the session.

Each write is conditional on the incarnation and ALIVE, so it never lands on a successor.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holdfast.core import jsontext
from holdfast.core.aws import ConditionFailed, call
from holdfast.core.handoff import STEPS, HandoffStep, parse_step
from holdfast.core.liveness import session_owner
from holdfast.core.nudge import Nudge, parse_nudge
from holdfast.core.orders import Order, parse_order
from holdfast.core.placement import MAX_SUCCESSORS
from holdfast.core.schema import SESSION, SESSION_IS_LIVE, session_guard_terms, session_pk_for

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["MAX_SUCCESSORS", "Directing", "Directive", "drain_body", "float_attr",
           "parse_inbox_body"]

_MAX = 10**9
# Each field of a directive and its session-item attribute (its queue message uses the fields).
_ITEM_NAMES = (("share", SESSION.target_share), ("ceiling", SESSION.target_ceiling),
               ("shed_at_once", SESSION.shed_at_once), ("until_ms", SESSION.target_until_ms),
               ("fleet", SESSION.fleet_size), ("issued_ms", SESSION.target_issued_ms))


@dataclass(frozen=True, slots=True)
class Directive:
    """A rebalancing target for one session (see the module docstring)."""

    share: float
    ceiling: float
    shed_at_once: int
    until_ms: int
    fleet: int = 0
    # When the decider decided it: a worker keeps the latest decision, whichever way (session
    # item or queue) it came first. A lapse (until_ms = issued_ms) ends a target early.
    issued_ms: int = 0
    successors: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def number(x: float) -> dict[str, str]:
        """``x`` as a DynamoDB number: whole numbers without a fraction."""
        return {"N": str(int(x)) if float(x).is_integer() else f"{x:.6g}"}

    def live(self, now_ms: int) -> bool:
        return now_ms < self.until_ms

    def attributes(self) -> dict[str, Any]:
        """The session-item attributes (DynamoDB JSON) of this directive."""
        return {**{name: Directive.number(getattr(self, f)) for f, name in _ITEM_NAMES},
                SESSION.target_successors: {"S": json.dumps(
                    [list(s) for s in self.successors], separators=(",", ":"))}}

    @classmethod
    def from_item(cls, raw: Mapping[str, Any]) -> Directive | None:
        """The directive in a session item; None if there is none or it does not parse."""
        share, ceiling, at_once, until = [float_attr(raw.get(name)) for _, name in _ITEM_NAMES[:4]]
        if share is None or ceiling is None or at_once is None or until is None:
            return None
        succ = raw.get(SESSION.target_successors)
        return cls(share, ceiling, int(at_once), int(until),
                   int(float_attr(raw.get(SESSION.fleet_size)) or 0),
                   int(float_attr(raw.get(SESSION.target_issued_ms)) or 0),
                   _successors(succ.get("S") if isinstance(succ, Mapping) else None))

    def body(self, owner: str) -> str:
        """The order-queue message of this directive for ``owner``."""
        fields: dict[str, Any] = {f: getattr(self, f) for f, _ in _ITEM_NAMES}
        if self.successors:
            fields["successors"] = [list(s) for s in self.successors]
        return json.dumps({"owner": owner, "directive": fields}, separators=(",", ":"))


def _successors(text: object) -> tuple[tuple[str, int], ...]:
    """The successors in a JSON ``[[owner, count], ...]``; what is not a sane entry is left
    out (a worker then lets that share go to whoever has room, as before handoffs)."""
    try:
        data = jsontext.loads(text) if isinstance(text, str) else None
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    out: list[tuple[str, int]] = []
    for entry in data[:MAX_SUCCESSORS]:
        if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and session_owner(entry[0]) is not None and isinstance(entry[1], int)
                and not isinstance(entry[1], bool) and 0 < entry[1] <= _MAX):
            out.append((entry[0], entry[1]))
    return tuple(out)


def drain_body(owner: str, draining: bool) -> str:
    """The order-queue message that starts (or cancels) draining ``owner``."""
    return json.dumps({"owner": owner, "drain": draining}, separators=(",", ":"))


def parse_inbox_body(body: str, owner: str,
                     ) -> Order | Directive | Nudge | HandoffStep | bool | None:
    """What an order-queue message for ``owner`` says, the one parser of that queue: an
    ``Order`` (stop, release), a ``Directive``, a handoff ``Nudge`` (a stream released to
    us), a ``HandoffStep`` (make-before-break, ``holdfast.core.handoff``), a drain flag (bool),
    or None (none of these, foreign, or malformed). A message must name its owner: a reused
    queue name, or a forged message, cannot mislead."""
    try:
        data = jsontext.loads(body)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("owner") != owner:
        return None
    order = data.get("order")
    if isinstance(order, str):
        return parse_order(order)
    if "conn_id" in data:
        try:
            return parse_nudge(body)
        except ValueError:
            return None
    if any(k in data for k in STEPS):
        return parse_step(data)
    if isinstance(data.get("drain"), bool):
        return bool(data["drain"])
    d = data.get("directive")
    if not isinstance(d, dict):
        return None
    item: dict[str, Any] = {name: {"N": str(d[f])} for f, name in _ITEM_NAMES
                            if isinstance(d.get(f), int | float)
                            and not isinstance(d.get(f), bool)}
    if isinstance(d.get("successors"), list):
        item[SESSION.target_successors] = {"S": json.dumps(d["successors"])}
    return Directive.from_item(item)


def float_attr(value: object) -> float | None:
    """The number in a DynamoDB JSON value (``{"N": ...}``); None if absent or not a sane one."""
    n = value.get("N") if isinstance(value, Mapping) else None
    try:
        x = float(n) if isinstance(n, str) else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) and 0 <= x <= _MAX * 10**4 else None


class Directing:
    """The directive writes of ``SessionStore`` (its base class; not used alone)."""

    client: DynamoDBClient
    table: str

    def set_directive(self, owner: str, directive: Directive) -> bool:
        """Give the live session ``owner`` a target; False if it is not live (any more)."""
        attrs = directive.attributes()
        names = {f"#a{i}": k for i, k in enumerate(attrs)}
        values = {f":a{i}": v for i, v in enumerate(attrs.values())}
        update = "SET " + ", ".join(f"#a{i} = :a{i}" for i in range(len(attrs)))
        return self._conditional(owner, update, names, values)

    def set_draining(self, owner: str, draining: bool) -> bool:
        """Start (or cancel) draining the live session ``owner``; False if it is not live."""
        if draining:
            return self._conditional(owner, "SET #d = :t", {"#d": SESSION.draining},
                                     {":t": {"BOOL": True}})
        return self._conditional(owner, "REMOVE #d", {"#d": SESSION.draining}, {})

    def _conditional(self, owner: str, update: str, names: dict[str, str],
                     values: dict[str, Any], *, op: str = "set_directive") -> bool:
        """``update`` on the session ``owner`` names, if it is that incarnation and ALIVE."""
        parsed = session_owner(owner)
        if parsed is None:
            return False
        worker_id, incarnation = parsed
        guard_names, guard_values = session_guard_terms(incarnation)
        try:
            call(op, self.client.update_item, TableName=self.table,
                 Key={SESSION.pk: {"S": session_pk_for(worker_id)}}, UpdateExpression=update,
                 ConditionExpression=SESSION_IS_LIVE,
                 ExpressionAttributeNames={**names, **guard_names},
                 ExpressionAttributeValues={**values, **guard_values})
        except (ConditionFailed, ValueError):
            return False
        return True
