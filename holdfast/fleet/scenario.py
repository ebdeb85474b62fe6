"""The failover scenario ``make demo`` runs: settle, SIGTERM one worker, SIGKILL another, start a
replacement, SIGSTOP a third (then SIGCONT it), add streams, stop a few; each step is an
``Incident`` with measured gaps.

With the platform report on (``holdfast up``'s default) the SIGKILLed worker is reported
stopped as ECS would report its task, so its streams move without waiting out its TTL; with
``--no-platform-report`` they move once the TTL has passed (the sweeper finds the silence).
The SIGSTOPped worker is alive but silent, as in a hang or a network partition: no platform
reports that, so its TTL always finds it. Woken, it must find its session dead.

Last, the fleet must end balanced: the woken worker (a new incarnation) and the replacement
start short of their share, so the sweeper's decider gives targets and the over-loaded worker
sheds streams to them once their cool-down allows. The scenario waits (bounded) until every
live worker is within ±max(1, 10 %) of its share; each move is in the summary and the timeline.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

from holdfast.core.schema import STOPPED
from holdfast.core.table import set_desired_state
from holdfast.fleet.moves import (
    Balance,
    Claim,
    Move,
    balance_of,
    claims_from_logs,
    cut_short_note,
    duplicates_across,
    logged_unowned_s,
    moves_from_logs,
)
from holdfast.fleet.recorder import read_records
from holdfast.fleet.report import Incident
from holdfast.fleet.session import Session

__all__ = ["ScenarioFailed", "balance_now", "failover", "open_connections", "run_moves"]


class ScenarioFailed(Exception):
    """A step did not reach its goal in time; the message says which."""


def open_connections(conn_log: Path) -> dict[str, int]:
    """Stream id -> connections the upstream holds open now (from its JSONL connection log)."""
    opened: dict[int, str] = {}
    try:
        lines = conn_log.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            rec = json.loads(line)
            if rec["event"] == "open":
                opened[int(rec["conn_no"])] = str(rec["stream_id"])
            elif rec["event"] == "close":
                opened.pop(int(rec["conn_no"]), None)
        except (ValueError, KeyError, TypeError):
            continue
    out: dict[str, int] = {}
    for stream in opened.values():
        out[stream] = out.get(stream, 0) + 1
    return out


def _gap_s(s: Session, conn_id: str, victim: str, ev_wall: int,
           logged: list[Claim] | None = None) -> float | None:
    """Seconds ``conn_id`` had no serving owner after the victim was signalled at ``ev_wall``.

    ``logged``: for a graceful stop, the claims as the workers logged them. The holder
    serves until it lets go, so what counts is its new owner's ``unowned_ms`` (release to
    claim; 0 for a warm handoff, which never leaves the stream unowned), not the time since the
    signal: those seconds it was still delivering."""
    claims = [at for owner, at in s.claimed_wall.get(conn_id, []) if owner != victim
              and at >= ev_wall - 1000]
    if not claims:
        return None
    claimed, start = min(claims), ev_wall
    if logged is not None:
        unowned = logged_unowned_s(logged, conn_id, not_by=victim, since_ms=ev_wall - 1000)
        if unowned is not None:
            return unowned
        # Not in the logs: from the last release the table showed.
        releases = [at for at in s.released_wall.get(conn_id, []) if ev_wall <= at <= claimed]
        start = max(releases) if releases else ev_wall
    return max(0.0, (claimed - start) / 1000)


def _disrupt(s: Session, name: str, victim: str, sig: signal.Signals,
             timeout_s: float) -> Incident:
    # Owners are ``<worker>#<incarnation>``: compare worker ids, the victim is a worker.
    affected = sorted(c for c in s.observer.streams if s.observer.worker_of(c) == victim)
    if not affected:  # a disruption that hits nothing proves nothing: say so, don't pass
        raise ScenarioFailed(f"{name}: {victim} holds no stream (loads {s.observer.loads()})")
    s.action(f"{name}: {victim} holds {len(affected)} streams")
    ev_wall = int(time.time() * 1000)
    inc = Incident(name, s.now(), affected,
                   crashed=victim if sig in (signal.SIGKILL, signal.SIGSTOP) else None)
    s.fleet.workers[victim].expected_exit = True
    s.fleet.workers[victim].signal(sig)

    def recovered() -> bool:
        return all((o := s.observer.worker_of(c)) and o != victim for c in affected)

    s.poll_s, saved = 0.1, s.poll_s  # finer observation while streams move
    try:
        s.wait_until(recovered, timeout_s)
    finally:
        s.poll_s = saved
    logged = claims_from_logs(s.fleet.worker_log_lines()) if sig == signal.SIGTERM else None
    inc.recovered = {c: _gap_s(s, c, victim, ev_wall, logged) for c in affected
                     if (o := s.observer.worker_of(c)) and o != victim}
    proc = s.fleet.workers[victim]
    if sig == signal.SIGSTOP:
        inc.note = _wake(s, victim)
    else:
        s.wait_until(lambda: not proc.alive(), timing_budget(s))
        inc.note = f"{victim} exit code {proc.returncode()}"
    gaps = inc.gaps()
    s.say(f"{name}: {len(inc.recovered)}/{len(affected)} streams recovered"
          + (f", max unowned {max(gaps):.2f} s" if gaps else ""),
          "green" if len(inc.recovered) == len(affected) else "red")
    return inc


def _wake(s: Session, victim: str) -> str:
    """SIGCONT a hung worker whose streams moved on: it must find its session dead, handle
    nothing more, and start over as a new incarnation (self-fencing)."""
    proc = s.fleet.workers[victim]

    def starts() -> int:
        try:
            return proc.log_path.read_text(errors="replace").count('"session started"')
        except OSError:
            return 0

    before = starts()
    proc.signal(signal.SIGCONT)
    woke = s.wait_until(lambda: starts() > before, timing_budget(s))
    if woke:  # running again, as a new incarnation: a live worker like the others
        proc.expected_exit = False
    return (f"{victim} woken by SIGCONT: " + ("found its session dead, fenced itself and started "
            "a new incarnation" if woke else "did NOT start a new incarnation"))


def timing_budget(s: Session) -> float:
    return s.fleet.timing.shutdown_s + 3


def _busiest(s: Session) -> str | None:
    """The running worker holding the most streams (the most instructive one to lose)."""
    loads = s.observer.loads()
    live = [w for w, p in s.fleet.workers.items() if p.alive() and not p.expected_exit]
    if len(live) < 2:
        return None
    return max(live, key=lambda w: (loads.get(w, 0), -live.index(w)))


def _claim_latency(s: Session, name: str, new_ids: list[str], add: Callable[[], None],
                   timeout_s: float) -> Incident:
    s.action(name)
    ev_wall = int(time.time() * 1000)
    add()
    inc = Incident(name, s.now(), new_ids)
    s.wait_until(lambda: s.all_owned(new_ids), timeout_s)
    for c in new_ids:
        claims = [at for _, at in s.claimed_wall.get(c, [])]
        if claims:
            inc.recovered[c] = max(0.0, (min(claims) - ev_wall) / 1000)
    owners = sorted({o for c in new_ids if (o := s.observer.worker_of(c))})
    inc.note = f"claimed by {', '.join(owners) or 'nobody'}"
    return inc


def _stop_streams(s: Session, ids: list[str], timeout_s: float) -> Incident:
    s.action(f"holdfast stop {' '.join(ids)}")
    inc = Incident(f"stop {len(ids)} streams", s.now(), ids, expect_owner=False)
    t0 = time.monotonic()
    for c in ids:
        set_desired_state(s.ddb, s.table, c, STOPPED)

    def done() -> bool:
        conns = open_connections(s.fleet.conn_log)
        return all(s.observer.owner_of(c) is None and not conns.get(c) for c in ids)

    ok = s.wait_until(done, timeout_s)
    took = time.monotonic() - t0
    conns = open_connections(s.fleet.conn_log)
    inc.note = (f"leases released and upstream connections closed in {took:.2f} s" if ok else
                f"NOT released: owners {[s.observer.owner_of(c) for c in ids]}, open "
                f"connections {[conns.get(c, 0) for c in ids]}")
    s.say(inc.note, "green" if ok else "red")
    if not ok:
        raise ScenarioFailed(f"stopped streams not released within {timeout_s:g} s")
    return inc


def _live(s: Session) -> list[str]:
    return [w for w, p in s.fleet.workers.items() if p.alive() and not p.expected_exit]


def balance_now(s: Session) -> Balance:
    """The live workers' holdings against their fair share, as the last scan saw them."""
    return balance_of(s.observer.loads(), _live(s), unowned=len(s.unowned_started()))


def run_moves(s: Session) -> list[Move]:
    """Every rebalancing move so far (the workers' logs), with seqs handled twice across it
    (the handler's records) and its time on the run's clock."""
    moves = moves_from_logs(s.fleet.worker_log_lines())
    records = list(read_records(s.fleet.record_dir))
    wall_now = time.time() * 1000
    for m in moves:
        m.duplicates = duplicates_across(m, records)
        m.t = max(0.0, s.now() - (wall_now - m.claimed_ms) / 1000)
    return moves


def _rebalance(s: Session, timeout_s: float) -> Incident:
    """Wait (at most ``timeout_s``) until every live worker holds its fair share; the moves of
    the run and the holdings at the end."""
    s.action("rebalancing: waiting until every live worker is within ±max(1, 10 %) of its "
             "share")
    t0 = time.monotonic()
    inc = Incident("rebalancing", s.now(), [], expect_owner=False)
    ok = s.wait_until(lambda: balance_now(s).balanced, timeout_s)
    took = time.monotonic() - t0
    if ok:
        s.sleep(1)  # messages flow on the moved streams before the fleet stops
    inc.balance = balance = balance_now(s)
    inc.moves = moves = run_moves(s)
    inc.affected = sorted({m.conn_id for m in moves})
    inc.note = (f"balanced after {took:.1f} s: {balance.describe()}" if balance.balanced
                else f"NOT balanced within {timeout_s:g} s: {balance.describe()}")
    if cut := cut_short_note(moves):
        inc.note += f"; {cut}"
    s.say(f"rebalancing: {sum(1 for m in moves if m.completed)} moves; {inc.note}",
          "green" if balance.balanced else "red")
    return inc


def failover(s: Session, ids: list[str], base_url: str, next_worker: Callable[[], str],
             *, platform_report: bool = False) -> list[Incident]:
    """Run the failover scenario on a started fleet; the incidents, in order.

    ``platform_report``: a reporter watches the workers (the crash is reported stopped), which
    only changes how the crash incident is named; the scenario waits for recovery either way.
    """
    timing = s.fleet.timing
    recover_s = timing.lease_s + timing.skew_ms / 1000 + 15
    s.action(f"settling: waiting until all {len(ids)} streams are owned")
    if not s.wait_until(lambda: s.all_owned(ids), 40):
        raise ScenarioFailed(f"fleet did not settle: unowned {s.unowned_started(ids)}")
    s.sleep(3)  # let messages flow and checkpoints move
    incidents: list[Incident] = []
    victim = _busiest(s)
    if victim:
        incidents.append(_disrupt(s, f"SIGTERM {victim} (graceful stop)", victim,
                                  signal.SIGTERM, recover_s))
        s.sleep(2)
    victim = _busiest(s)
    if victim:
        how = "reported stopped" if platform_report else "found by its TTL"
        incidents.append(_disrupt(s, f"SIGKILL {victim} (crash, {how})", victim,
                                  signal.SIGKILL, recover_s))
        s.sleep(1)
    wid = next_worker()
    s.action(f"replacement worker {wid} started")
    s.wait_workers_ready(15)  # its session is up: the hang below has somewhere to move to
    s.sleep(1)
    victim = _busiest(s)
    if victim:
        # Alive but silent (a hang, a partition): no platform reports it, so its session's
        # TTL is what finds it, beside the reported crash above.
        incidents.append(_disrupt(s, f"SIGSTOP {victim} (hung, found by its TTL)", victim,
                                  signal.SIGSTOP, recover_s))
    extra = [f"demo-{i:02d}" for i in range(len(ids) + 1, len(ids) + 3)]

    def add() -> None:
        s.create_streams_named(extra, base_url)

    s.sleep(2)
    incidents.append(_claim_latency(s, f"start {len(extra)} new streams", extra, add, 20))
    s.sleep(2)
    incidents.append(_stop_streams(s, ids[:2], 20))
    s.action("final check: every STARTED stream owned")
    if not s.wait_until(lambda: not s.unowned_started(), recover_s):
        raise ScenarioFailed(f"streams left unowned: {s.unowned_started()}")
    # The moves wait out the cool-down of the streams the failovers just moved.
    incidents.append(_rebalance(s, timing.cooldown_s + timing.lease_s + 10))
    return incidents
