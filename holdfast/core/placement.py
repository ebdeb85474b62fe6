"""Where streams go when they move: one placement authority, deploys included.

Pure functions, no clock and no I/O. The decider (the sweeper's ``Balancer``) calls ``place``
with the live sessions it reads anyway; it returns ``balance.plan``'s targets with two
additions:

- **Successors.** A target names where the streams its worker lets go should go, as
  (owner, how many). The worker names one per release or warm handoff (``worker.handoff``),
  so a move lands on the worker chosen here, never on whoever polls first. Streams are given
  to the least-loaded receivers with room, one at a time (water-filling). Shedders shed at
  once, so what one shedder's list gives is counted before the next list is made.
- **Deploys.** Two versions live at once is a deploy under way. The new version is the one
  whose first live worker started last (an old worker restarted mid-deploy does not make its
  version new). While it lasts:

  - no stream moves for balance (nothing sheds but a draining worker): each old worker's
    streams move once, when it stops, onto new workers. Shedding old workers early to the
    first new one piles everything there and moves it all again (measured: 2 moves per stream
    on average in a one-at-a-time deploy, issue 21);
  - an old worker's successors are new workers only, least loaded first, up to their capacity,
    each list made as if its worker stopped next (a one-at-a-time deploy stops one, then the
    next decision sees where its streams went); when no new worker has room an old one is
    better than none: what is not named goes to whoever has room;
  - an old worker claims no moved stream (its ceiling is its load); a new one takes them up to
    its capacity. A new worker's own successors (it is stopped mid-deploy) are the other new
    workers.

  Once one version is left, ``balance.plan`` decides as before; a one-at-a-time deploy ends
  balanced (each new worker takes one old worker's streams), so nothing moves twice.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from holdfast.core.balance import (
    BalancePolicy,
    Member,
    Plan,
    Target,
    mean_weight,
    plan,
    split_moves,
)

__all__ = ["MAX_SUCCESSORS", "fill", "new_version", "place"]

# Successors one target names at most (its session item stays small; the directive's reader
# keeps no more). Past it, the streams go to the receivers already named, least loaded first:
# a list one stream per receiver over 50 new workers was cut to its first 32 when read back,
# so a third of a deploy's streams went unnamed and the target never read back as written.
MAX_SUCCESSORS = 32


def new_version(members: Sequence[Member]) -> str | None:
    """The version being deployed (None: one version live): the one whose first live member
    started last."""
    first: dict[str, int] = {}
    for m in members:
        first[m.version] = min(first.get(m.version, m.started_at_ms), m.started_at_ms)
    if len(first) < 2:
        return None
    return max(first, key=lambda v: (first[v], v))


def fill(loads: dict[str, float], caps: Mapping[str, float], count: int, *, turn: int = 0,
         most: int = MAX_SUCCESSORS, weight: float = 1.0) -> tuple[tuple[str, int], ...]:
    """Give ``count`` streams of ``weight`` each, one at a time, to the least loaded of
    ``loads`` with room for one below its cap, naming at most ``most`` receivers; ``loads`` is
    updated. Ties go round in owner order starting ``turn`` places on, so lists made from the
    same loads do not all leave their odd streams with the same receivers. Returns (owner,
    how many streams), most first."""
    order = sorted(loads)
    rank = {o: (i - turn) % max(1, len(order)) for i, o in enumerate(order)}
    heap = [(load, rank[o], o) for o, load in loads.items()
            if load + weight <= caps[o] + 1e-9]
    heapq.heapify(heap)
    given: dict[str, int] = {}
    left = count
    while left > 0 and heap:
        load, r, owner = heapq.heappop(heap)
        if owner not in given and len(given) >= most:
            continue  # a list names ``most`` receivers: the rest of it goes to them
        left -= 1
        given[owner] = given.get(owner, 0) + 1
        loads[owner] = load + weight
        if load + 2 * weight <= caps[owner] + 1e-9:
            heapq.heappush(heap, (load + weight, r, owner))
    return tuple(sorted(given.items(), key=lambda kv: (-kv[1], kv[0])))


def place(members: Sequence[Member], *, unowned: int = 0, in_motion: int = 0,
          policy: BalancePolicy | None = None) -> Plan:
    """``balance.plan``, or the deploy's plan while two versions are live; with successors."""
    policy = policy or BalancePolicy()
    version = new_version(members)
    if version is not None:
        return _deploy(members, version, unowned, in_motion, policy)
    decision = plan(members, unowned=unowned, in_motion=in_motion, policy=policy)
    if decision.balanced:
        return decision
    # Receivers: the members below their ceiling, filled up to it; the shedders' excess first.
    # A list names streams, one per release: a shedder's excess is counted in its own streams
    # (its load over their mean weight), each given as that weight to the receivers' load
    # (given one load unit at a time, a weight of 10,000 took seconds a decision).
    by_owner = {m.owner: m for m in members}
    fleet_weight = mean_weight(members)
    receiving = {t.owner: t for t in decision.targets
                 if t.shed_at_once == 0 and not by_owner[t.owner].draining}
    loads = {o: by_owner[o].load for o in receiving}
    caps = {o: t.ceiling for o, t in receiving.items()}
    targets = []
    for t in sorted(decision.targets, key=lambda t: (-t.shed_at_once, t.owner)):
        m = by_owner[t.owner]
        # A draining member sheds whatever the motion budget says (its worker drains on its
        # own pace): its successors are named even when the budget spent gives it 0 at once,
        # or its streams (and a SIGTERM's wait for successors) went to nobody by name.
        weight = m.load / m.held if m.held and m.load > 0 else fleet_weight
        excess = max(0, round((m.load - t.share) / weight)) if (
            t.shed_at_once or m.draining) else 0
        targets.append(Target(t.owner, t.share, t.ceiling, t.shed_at_once,
                              fill(loads, caps, excess, weight=weight) if excess else ()))
    order = {m.owner: i for i, m in enumerate(members)}
    targets.sort(key=lambda t: order[t.owner])
    return Plan(decision.shares, False, tuple(targets), decision.excess, decision.budget)


def _deploy(members: Sequence[Member], version: str, unowned: int, in_motion: int,
            policy: BalancePolicy) -> Plan:
    new = [m for m in members if m.version == version and not m.draining]
    # In streams, as the capacity is (and each list, ``m.held``).
    loads = {m.owner: float(m.held) for m in new}
    caps = {m.owner: float(m.capacity) for m in new}
    total = sum(m.held for m in members) + unowned
    budget = max(0, policy.motion_bound(total) - in_motion)
    draining = {m.owner: m.load for m in members if m.draining and m.load > 0}
    at_once = split_moves(budget, draining) if draining else {}
    shares: dict[str, float] = {}
    targets: dict[str, Target] = {}
    # Each old worker's list is made from the new workers' loads as they are, as if it were
    # the next to stop: a one-at-a-time deploy stops one of them at a time (which one, the
    # decider cannot know), and the next decision sees where its streams went. Workers that
    # stop together each spread theirs over the least loaded, ties taking turns.
    for turn, m in enumerate(sorted(members, key=lambda m: (m.version == version,
                                                            m.started_at_ms, m.owner))):
        if m.version != version:
            successors = fill(dict(loads), caps, m.held, turn=turn)
            share = 0.0 if m.draining else m.load
            ceiling = share
        else:
            others = {o: x for o, x in loads.items() if o != m.owner}
            successors = fill(others, caps, m.held)
            share = 0.0 if m.draining else m.load
            ceiling = share if m.draining else float(m.capacity)
        shares[m.owner] = share
        targets[m.owner] = Target(m.owner, share, ceiling, at_once.get(m.owner, 0), successors)
    excess = sum(draining.values())
    return Plan(shares, False, tuple(targets[m.owner] for m in members), excess, budget,
                deploying=version)
