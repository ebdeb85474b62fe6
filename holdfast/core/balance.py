"""Rebalancing decisions: fair shares, when to move streams, how many may move at once.

Pure functions and dataclasses, no clock and no I/O. The sweeper (the one decider, see the
README's "Rebalancing") feeds ``plan`` the live sessions it reads anyway; each worker feeds
``pick_sheds`` what it holds. The rules:

- **Fair share.** The fleet's load (streams, or the sum of their ``weight``) is shared out by
  water-filling: every member gets the same, except that no member gets more than its
  capacity (``HOLDFAST_MAX_CONNECTIONS`` times the mean weight). A draining member gets 0.
  With unit weights the shares are whole numbers that add up to the load exactly (the
  rounding goes to the members that hold more now, so it never costs a move).
- **Hysteresis, absolute.** Nothing moves while every member is within ``band(share)`` =
  max(``band_min``, ``band_fraction`` x share) of its share. Once one is out, every member is
  aimed at its exact share, so a rebalance ends well inside the band and a balanced fleet
  stays quiet: noise of a stream or two never moves anything.
- **Bounded motion.** At most ``motion_bound(streams)`` streams are in motion at once, the
  ones already unowned (a failover, an earlier move) included: a mass failover leaves no
  budget for moves until its streams are claimed again.
- **Targets, not orders per stream.** A member above its share gets ``Target(share, ceiling
  = share, shed_at_once)``: it sheds down to its share, ``shed_at_once`` at a time, and claims
  no moved stream while at or above it, so a shed stream never goes straight back. A member
  at or below its share gets ``ceiling = share + band``: it takes moved streams up to there,
  so two under-loaded members cannot split the moves so unevenly that one must shed again.
  The ceiling holds back moved streams only (the worker tells them by the router's reason):
  a failover's or a new stream's are claimed by whoever has room, so none waits for a
  decision. Targets are absolute, so a decision repeated from a stale view (a heartbeat
  behind) moves nothing more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "BalancePolicy",
    "HeldView",
    "Member",
    "Plan",
    "Target",
    "fair_shares",
    "mean_weight",
    "pick_sheds",
    "plan",
    "split_moves",
]

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Member:
    """One live worker session as the decider sees it: ``load`` is the sum of its streams'
    weights (= ``held`` by default), ``capacity`` its connection limit."""

    owner: str
    load: float
    held: int
    capacity: int
    draining: bool = False
    version: str = ""  # HOLDFAST_WORKER_VERSION ("": not known)
    started_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class BalancePolicy:
    """The thresholds. Defaults: ±max(1, 10 %) of a share; 10 % of the streams in motion."""

    band_fraction: float = 0.10
    band_min: float = 1.0
    motion_fraction: float = 0.10
    motion_min: int = 1

    def band(self, share: float) -> float:
        """How far from ``share`` a member may be and still count as balanced."""
        return max(self.band_min, self.band_fraction * share)

    def motion_bound(self, streams: int) -> int:
        """How many of ``streams`` may be in motion (shedding or unowned) at once."""
        return max(self.motion_min, math.floor(self.motion_fraction * streams))


@dataclass(frozen=True, slots=True)
class Target:
    """What one member is told: shed down to ``share`` (``shed_at_once`` at a time, 0: not
    now) and claim only while its load is below ``ceiling``."""

    owner: str
    share: float
    ceiling: float
    shed_at_once: int
    # Where the streams it lets go should go, (owner, how many) (``holdfast.core.placement``).
    successors: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """One decision. ``targets`` is empty when ``balanced``; ``excess`` is the load above the
    shares (the least that must move); ``budget`` what may start moving now."""

    shares: Mapping[str, float]
    balanced: bool
    targets: tuple[Target, ...]
    excess: float
    budget: int
    deploying: str | None = None  # the version being rolled out (``holdfast.core.placement``)


def mean_weight(members: Sequence[Member]) -> float:
    """The load of one stream on average (1.0 with no stream held): what turns a capacity
    (streams) into load, and load into streams."""
    streams = sum(m.held for m in members)
    load = sum(m.load for m in members)
    return load / streams if streams and load > 0 else 1.0


def fair_shares(members: Sequence[Member], total: float) -> dict[str, float]:
    """Each member's fair share of ``total`` load, capped by its capacity (see the module)."""
    weight = mean_weight(members)
    caps = {m.owner: 0.0 if m.draining else max(0.0, m.capacity * weight)
            for m in members}
    shares = {m.owner: 0.0 for m in members}
    left, open_ = float(total), sorted((o for o in caps if caps[o] > 0), key=lambda o: caps[o])
    while open_:
        level = left / len(open_)
        if caps[open_[0]] <= level + _EPS:  # the smallest cap binds: fill it, share the rest
            owner = open_.pop(0)
            shares[owner] = caps[owner]
            left -= caps[owner]
            continue
        for owner in open_:
            shares[owner] = level
        break
    if _whole(total) and all(_whole(m.load) for m in members) and all(
            _whole(c) for c in caps.values()):
        return _rounded(members, shares, caps, round(total))
    return shares


def _whole(x: float) -> bool:
    return abs(x - round(x)) < _EPS


def _rounded(members: Sequence[Member], shares: dict[str, float], caps: dict[str, float],
             total: int) -> dict[str, float]:
    """Whole shares summing to ``total`` (when the caps allow); ties go to who holds more."""
    load = {m.owner: m.load for m in members}
    out = {o: float(math.floor(s + _EPS)) for o, s in shares.items()}
    left = total - int(sum(out.values()))
    order = sorted(shares, key=lambda o: (-(shares[o] - out[o]), -load[o], o))
    for owner in order:
        if left <= 0:
            break
        if out[owner] + 1 <= caps[owner] + _EPS and shares[owner] - out[owner] > _EPS:
            out[owner] += 1
            left -= 1
    return out


def plan(members: Sequence[Member], *, unowned: int = 0, in_motion: int = 0,
         policy: BalancePolicy | None = None) -> Plan:
    """Decide: balanced (nothing to do) or a ``Target`` per member.

    ``unowned``: wanted streams that no member holds now (their load counts in the shares);
    ``in_motion``: streams already moving (unowned, or being shed), charged to the budget.
    """
    policy = policy or BalancePolicy()
    total = sum(m.load for m in members) + unowned
    shares = fair_shares(members, total)
    excess = sum(max(0.0, m.load - shares[m.owner]) for m in members)
    budget = max(0, policy.motion_bound(sum(m.held for m in members) + unowned) - in_motion)
    out_of_band = [m for m in members if (m.draining and m.load > _EPS) or (
        abs(m.load - shares[m.owner]) > policy.band(shares[m.owner]) + _EPS)]
    if not out_of_band:
        return Plan(shares, True, (), excess, budget)
    over = {m.owner: m.load - shares[m.owner] for m in members
            if m.load - shares[m.owner] > _EPS}
    at_once = split_moves(budget, over)
    targets = tuple(Target(
        m.owner, shares[m.owner],
        shares[m.owner] if m.owner in over or m.draining
        else shares[m.owner] + policy.band(shares[m.owner]),
        at_once.get(m.owner, 0)) for m in members)
    return Plan(shares, False, targets, excess, budget)


def split_moves(budget: int, over: Mapping[str, float]) -> dict[str, int]:
    """Share ``budget`` moves among the members ``over`` their share, the most over first;
    no member gets more than it must shed, and the total never exceeds ``budget``."""
    need = {o: max(1, math.ceil(x - _EPS)) for o, x in over.items()}
    total_need = sum(need.values())
    out: dict[str, int] = {}
    left = budget
    for owner in sorted(need, key=lambda o: (-need[o], o)):
        if left <= 0:
            break
        give = min(need[owner], left, max(1, math.floor(budget * need[owner] / total_need)))
        out[owner] = give
        left -= give
    for owner in sorted(out, key=lambda o: (-need[o], o)):  # what rounding left over
        extra = min(left, need[owner] - out[owner])
        out[owner] += extra
        left -= extra
    return out


@dataclass(frozen=True, slots=True)
class HeldView:
    """A stream a worker holds, as ``pick_sheds`` needs it: its weight and when its owner
    last changed (wall ms: the later of its last move and our claim)."""

    conn_id: str
    weight: float
    changed_at_ms: int


def pick_sheds(held: Sequence[HeldView], *, share: float, shed_at_once: int, shedding: int,
               now_ms: int, cooldown_ms: int, draining: bool = False) -> list[str]:
    """The streams to shed now to come down to ``share``.

    At most ``shed_at_once - shedding`` of them (``shedding``: already on their way out);
    none that changed owner within ``cooldown_ms`` (unless ``draining``: everything goes); the
    longest-held first, and none whose removal would leave us further below ``share`` than
    half its weight.
    """
    room = shed_at_once - shedding
    if room <= 0:
        return []
    load = sum(h.weight for h in held)
    goal = 0.0 if draining else share
    picked: list[str] = []
    for h in sorted(held, key=lambda h: (h.changed_at_ms, h.conn_id)):
        if len(picked) >= room or load - goal <= _EPS:
            break
        if not draining and now_ms - h.changed_at_ms < cooldown_ms:
            continue
        if load - h.weight < goal - h.weight / 2 - _EPS:
            continue
        picked.append(h.conn_id)
        load -= h.weight
    return picked
