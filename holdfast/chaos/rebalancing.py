"""Rebalancing in the soak: scale-out and drain events, and their invariants.

Events (``Rebalancing`` drives them for the soak):

- ``scaleout``: start one more worker (up to the soak's worker count + 2): the decider gives
  the over-loaded workers targets and they shed streams to it;
- ``drain``: set the drain flag on a live worker's session (``SessionStore.set_draining``,
  what ``holdfast drain`` writes, and the same message to its order queue): it must shed
  everything and claim nothing while it keeps running. A while later the drain ends with
  ``undrain`` (the flag cleared: it claims again) or a graceful ``sigterm`` (a replacement
  starts). The chaos phase's end cancels any drain left.

Invariants (``check_rebalancing``, from evidence only):

- ``drain-claimed``: a draining session took a stream it did not hold when the flag landed
  (allowed: what it claimed within a heartbeat + a scan + 1 s of the write, a claim already
  under way when it read the flag);
- ``drain-not-empty``: a draining session still held a stream ``drain_ms`` after the flag
  (the flag, a heartbeat late at worst, then the sheds), unless a DynamoDB fault overlapped;
  each other worker killed or paused from a session TTL before the drain on adds the
  warm-up wait (``WARM_TIMEOUT_MS``): the decider may name it successor while its session
  still looks live, and a shed offered to it waits that long for READY, delivering all the
  while, before it falls back to a release (measured: two such successors, 7.8 s);
- ``not-balanced``: at the end (the ``balance`` action, after the scale-outs and the settle),
  a live worker outside ±max(1, 10 %) of its share, or a wanted stream unowned.
"""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from holdfast.chaos.evidence import Action, Evidence, Sample
from holdfast.chaos.timeliness import fault_extension
from holdfast.chaos.verdict import Limits, Verdict, Violation
from holdfast.core.directives import drain_body
from holdfast.core.handoff import WARM_TIMEOUT_MS
from holdfast.core.schema import STARTED
from holdfast.core.sessions import SessionStore
from holdfast.fleet.moves import Balance, balance_of

if TYPE_CHECKING:
    from holdfast.chaos.soak import Soak

__all__ = ["DRAIN_EMPTY_MS", "Rebalancing", "check_rebalancing", "scan_balance"]

DRAIN_EMPTY_MS = 4000  # after the flag's grace: the sheds (all at once, each a release write)
_ENDS = ("sigkill", "sigterm", "sigstop", "crash", "shutdown")


def _worker(owner: str | None) -> str:
    return (owner or "").partition("#")[0]


def scan_balance(scan: list[Sample], live: list[str], bad: set[str]) -> Balance:
    """The balance of the ``live`` workers in one table scan (a hostile item counts for its
    holder, as in the decider's view; a wanted stream no one holds is ``unowned``)."""
    loads: dict[str, int] = defaultdict(int)
    unowned = 0
    for s in scan:
        owner = s.live_owner()
        if owner:
            loads[_worker(owner)] += 1
        elif s.state == STARTED and s.conn_id not in bad and not s.waiting():
            unowned += 1
    return balance_of(loads, live, unowned)


class Rebalancing:
    """The soak's scale-out and drain events (see the module docstring)."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak
        self.draining: dict[str, tuple[str, float]] = {}  # worker -> (owner, monotonic end)
        env = soak.pf.direct_env
        self.store = SessionStore(soak.ddb, env["HOLDFAST_SESSION_TABLE"], "", ttl_ms=0,
                                  skew_ms=0)

    def forced(self, live: list[str]) -> str | None:
        """The first scale-out, then the first drain: even the shortest soak has both."""
        done = {a.kind for a in self.soak.actions}
        if "scaleout" not in done:
            return "scaleout"
        if "drain" not in done and len(live) >= 3:
            return "drain"
        return None

    def act(self, kind: str, live: list[str]) -> None:
        soak = self.soak
        if kind == "scaleout" and len(live) < soak.cfg.workers + 2:
            soak.act("scaleout", soak.pf.start_worker().name)
        elif kind == "drain" and not self.draining and len(live) >= 3:
            worker = soak.rng.choice(live)
            item = self.store.get(worker)
            if item is None or not self.store.set_draining(item.owner, True):
                return
            at = int(time.time() * 1000)
            self._queue(item.owner, True)
            hold = soak.cfg.timing.lease_s + 4
            self.draining[worker] = (item.owner, time.monotonic() + hold)
            soak.act("drain", worker, item.owner, at=at)

    def _queue(self, owner: str, draining: bool) -> None:
        """Also on the worker's order queue, as ``holdfast drain`` sends it (best effort)."""
        from holdfast.lambdas.orderqueues import send_body

        env = self.soak.pf.direct_env
        prefix, url = env.get("HOLDFAST_ORDERS_QUEUE_PREFIX"), env.get("HOLDFAST_QUEUE_URL")
        if prefix and url:
            try:
                send_body(self.soak.pf.client("sqs"), url, prefix, owner,
                          drain_body(owner, draining))
            except Exception as exc:  # the session item is what counts
                self.soak.say(f"drain message not queued: {exc}")

    def housekeeping(self, *, end_all: bool = False) -> None:
        """End each drain that is due (all of them: ``end_all``): undrain or a graceful stop."""
        soak = self.soak
        for worker, (owner, until) in list(self.draining.items()):
            proc = soak.pf.fleet.workers.get(worker)
            if proc is None or not proc.alive() or proc.expected_exit:
                del self.draining[worker]  # ended by another event (a kill, a stop)
                continue
            if not end_all and time.monotonic() < until:
                continue
            del self.draining[worker]
            if end_all or soak.rng.random() < 0.5:
                at = int(time.time() * 1000)
                self.store.set_draining(owner, False)
                self._queue(owner, False)
                soak.act("undrain", worker, owner, at=at)
            else:
                proc.expected_exit = True
                proc.signal(signal.SIGTERM)
                soak.act("sigterm", worker, "after its drain")
                soak.restarts.append(time.monotonic())

    def balance(self) -> Balance:
        return scan_balance(list(self.soak.sampler.latest.values()), self.soak.live(),
                            self.soak.bad)

    def wait_balanced(self, timeout_s: float) -> bool:
        """Until the fleet is balanced (bounded); records a ``balance`` action either way."""
        t0 = time.monotonic()
        ok = self.soak._wait(lambda: self.balance().balanced, timeout_s)
        b = self.balance()
        self.soak.act("balance", "fleet", json.dumps({
            "live": sorted(b.holdings), "balanced": b.balanced, "holdings": b.holdings,
            "took_s": round(time.monotonic() - t0, 2)}))
        return ok


def _scans(samples: list[Sample]) -> tuple[list[int], dict[int, list[Sample]]]:
    by: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        by[s.wall_ms].append(s)
    return sorted(by), by


def _drain_end(ev: Evidence, drain: Action, until_ms: int) -> int:
    worker, owner = drain.target, drain.detail
    ends = [a.wall_ms for a in ev.actions if a.wall_ms > drain.wall_ms and (
        (a.kind == "undrain" and a.detail == owner) or (a.kind in _ENDS and a.target in (
            worker, "fleet")))]
    return min([*ends, until_ms])


def check_drains(ev: Evidence, limits: Limits, until_ms: int, verdict: Verdict) -> None:
    walls, scans = _scans(ev.samples)
    grace = limits.heartbeat_ms + limits.scan_ms + limits.slack_ms
    emptied: list[int] = []
    for drain in (a for a in ev.actions if a.kind == "drain"):
        owner, end = drain.detail, _drain_end(ev, drain, until_ms)
        held = {s.conn_id for w in walls if drain.wall_ms - limits.scan_ms <= w
                <= drain.wall_ms + grace for s in scans[w] if s.live_owner() == owner}
        deadline = drain.wall_ms + grace + DRAIN_EMPTY_MS
        deadline += fault_extension(ev.faults, drain.wall_ms, deadline - drain.wall_ms, 0)
        deadline += WARM_TIMEOUT_MS * len({a.target for a in ev.actions if (
            a.kind in ("sigkill", "sigstop") and a.target != _worker(owner)
            and drain.wall_ms - limits.lease_ms - limits.skew_ms <= a.wall_ms <= deadline)})
        empty_at: int | None = None
        for w in (w for w in walls if drain.wall_ms <= w < end):
            mine = [s for s in scans[w] if s.live_owner() == owner]
            taken = [s.conn_id for s in mine if s.conn_id not in held]
            if taken and w > drain.wall_ms + grace:
                verdict.violations.append(Violation(
                    "drain-claimed", taken[0], w, f"{owner} (draining since {drain.wall_ms}) "
                    f"holds {', '.join(sorted(taken))}, which it did not hold when drained"))
                held.update(taken)
            if not mine and empty_at is None:
                empty_at = w
        if empty_at is not None:
            emptied.append(empty_at - drain.wall_ms)
        stop = empty_at if empty_at is not None else end
        if stop > deadline:
            what = (f"held streams until {empty_at - drain.wall_ms} ms later"
                    if empty_at is not None else
                    f"still held streams {end - drain.wall_ms} ms later")
            verdict.violations.append(Violation(
                "drain-not-empty", None, drain.wall_ms,
                f"{owner}: drained at {drain.wall_ms}, {what} (allowed "
                f"{deadline - drain.wall_ms} ms)"))
    verdict.stats["drain_empty_ms"] = {"count": len(emptied), "max": max(emptied, default=None),
                                       "drains": sum(1 for a in ev.actions if a.kind == "drain")}


def check_balance(ev: Evidence, verdict: Verdict) -> None:
    walls, scans = _scans(ev.samples)
    for a in (a for a in ev.actions if a.kind == "balance"):
        try:
            live = list(json.loads(a.detail)["live"])
        except (ValueError, KeyError, TypeError):
            continue
        seen = [w for w in walls if w <= a.wall_ms]
        if not seen:
            continue
        b = scan_balance(scans[seen[-1]], live, ev.expected_bad)
        verdict.stats["final_balance"] = b.describe()
        if not b.balanced:
            verdict.violations.append(Violation(
                "not-balanced", None, a.wall_ms, f"the fleet ended out of balance: "
                f"{b.describe()}"))


def check_rebalancing(ev: Evidence, limits: Limits, until_ms: int, verdict: Verdict) -> None:
    """Every rebalancing invariant (see the module docstring)."""
    check_drains(ev, limits, until_ms, verdict)
    check_balance(ev, verdict)
