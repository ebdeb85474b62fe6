"""The ``deploy`` scenario: replace every worker with a new version, as ECS does, and measure
what it cost each stream (``holdfast.fleet.deploy`` does the arithmetic).

- ``one-at-a-time``: per old worker, start a new-version worker, wait until its session is live
  plus ``settle_s`` (ECS's gap between a healthy new task and the old one's stop), SIGTERM the
  old one, and wait until it exited and every stream is owned again; then the next.
- ``new-first``: start every new worker, wait until all are live plus ``settle_s``, then SIGTERM
  every old one at once.

The window runs from the first new worker's start until, after the last old worker's exit, the
fleet is balanced again (bounded: moves among the new workers that the deploy caused count)
and every stream delivered from its final owner.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from holdfast.core import names
from holdfast.fleet.deploy import (
    STYLES,
    DeployReport,
    deploy_report,
    last_deliverers,
)
from holdfast.fleet.moves import claims_from_logs
from holdfast.fleet.recorder import read_records
from holdfast.fleet.scenario import ScenarioFailed, balance_now
from holdfast.fleet.session import Session

__all__ = ["NEW_VERSION", "OLD_VERSION", "run_deploy"]

OLD_VERSION = "v1"
NEW_VERSION = "v2"
READY_S = 30.0  # a new worker's session must be live within this
TAIL_S = 10.0  # at most this long for every stream to deliver from its final owner
# No owner change for this long before the deploy begins: a balancing shed still landing in
# the deploy's window counted as a stream moved onto an old worker, and moved twice (one run:
# the shed's last transfers 0.3 s into the window).
QUIET_S = 3.0
# The observer's poll during the deploy: each is a scan of the whole table. At 0.1 s, under a
# 300-stream deploy, the scenario's process took 25-35 % of a core of the bench's two and
# DynamoDB Local served ten scans a second beside the transfers (the gap p50 0.25 s; 0.20 s in
# a run polling every 1 s). The figures come from the workers' logs and the handled records,
# not from these scans; a slower poll only starts the next step up to that much later.
DEPLOY_POLL_S = 0.5


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _live(s: Session) -> list[str]:
    return [w for w, p in s.fleet.workers.items() if p.alive() and not p.expected_exit]


def _start(s: Session, start_worker: Callable[[str], str], count: int) -> list[str]:
    """Start ``count`` new-version workers and wait until their sessions are live."""
    new = [start_worker(NEW_VERSION) for _ in range(count)]
    s.action(f"deploy: {', '.join(new)} ({NEW_VERSION}) started")
    if not s.wait_workers_ready(READY_S):
        raise ScenarioFailed(f"new workers {new} not started within {READY_S:g} s")
    return new


def _stop(s: Session, old: list[str], ids: list[str]) -> bool:
    """SIGTERM ``old`` at once; True once they exited and every stream is owned by another."""
    s.action(f"deploy: SIGTERM {', '.join(old)} ({OLD_VERSION})")
    for w in old:
        s.fleet.workers[w].expected_exit = True
        s.fleet.workers[w].signal(signal.SIGTERM)
    timing = s.fleet.timing
    exited = s.wait_until(lambda: not any(s.fleet.workers[w].alive() for w in old),
                          timing.shutdown_s + 3)

    def owned() -> bool:
        return all((o := s.observer.worker_of(c)) and o not in old for c in ids)

    ok = s.wait_until(owned, timing.lease_s + timing.skew_ms / 1000 + 15)
    codes = ", ".join(f"{w} exit {s.fleet.workers[w].returncode()}" for w in old)
    s.say(f"deploy: {codes}; " + ("every stream owned again" if ok else
          f"NOT owned again: {[c for c in ids if not s.observer.worker_of(c)]}"),
          "green" if ok and exited else "red")
    return ok and exited


def _settled(s: Session, ids: list[str]) -> None:
    """Every stream owned and the fleet balanced (bounded) before the deploy begins."""
    s.action(f"settling: waiting until all {len(ids)} streams are owned and balanced")
    if not s.wait_until(lambda: s.all_owned(ids), 40):
        raise ScenarioFailed(f"fleet did not settle: unowned {s.unowned_started(ids)}")
    timing = s.fleet.timing
    if not s.wait_until(lambda: balance_now(s).balanced, timing.cooldown_s + timing.lease_s):
        s.say(f"not balanced before the deploy: {balance_now(s).describe()}", "yellow")
    # Also: messages flow on every stream before the first new worker starts.
    if not s.wait_until(_quiet(s, ids), timing.cooldown_s + timing.lease_s):
        s.say("streams still moving before the deploy", "yellow")


def _quiet(s: Session, ids: list[str]) -> Callable[[], bool]:
    """A predicate: no stream of ``ids`` has changed owner for ``QUIET_S``."""
    seen: dict[str, str | None] = {}
    since = time.monotonic()

    def quiet() -> bool:
        nonlocal seen, since
        now = {c: s.observer.worker_of(c) for c in ids}
        if now != seen:
            seen, since = now, time.monotonic()
        return time.monotonic() - since >= QUIET_S

    return quiet


def _delivered_by_owner(s: Session, ids: list[str]) -> bool:
    """Every stream's latest delivery is by its current owner (its move's gap is measurable)."""
    last = last_deliverers(read_records(s.fleet.record_dir))
    return all((o := s.observer.worker_of(c)) and last.get(c) == o for c in ids)


def run_deploy(s: Session, ids: list[str], start_worker: Callable[[str], str], *,
               style: str = "one-at-a-time", settle_s: float = 5.0,
               balance_s: float | None = None) -> DeployReport:
    """Replace every live worker (running ``OLD_VERSION``) by one running ``NEW_VERSION``;
    ``start_worker(version)`` starts one and returns its id. The figures of the window.

    ``balance_s``: how long, after the last old worker's exit, to wait for balance among the
    new workers (default: the move cool-down plus a lease plus 10 s)."""
    if style not in STYLES:
        raise ValueError(f"deploy style {style!r}: one of {', '.join(STYLES)}")
    _settled(s, ids)
    old = _live(s)
    if not old:
        raise ScenarioFailed("no live worker to replace")
    s.poll_s, saved = DEPLOY_POLL_S, s.poll_s
    try:
        start_ms = _wall_ms()
        s.action(f"deploy ({style}): replacing {', '.join(old)} ({OLD_VERSION}) by "
                 f"{len(old)} workers running {NEW_VERSION}")
        all_ok = True
        if style == "one-at-a-time":
            for w in old:
                _start(s, start_worker, 1)
                s.sleep(settle_s)
                all_ok = _stop(s, [w], ids) and all_ok
        else:
            _start(s, start_worker, len(old))
            s.sleep(settle_s)
            all_ok = _stop(s, old, ids)
        last_stop_ms = _wall_ms()
        timing = s.fleet.timing
        wait_s = timing.cooldown_s + timing.lease_s + 10 if balance_s is None else balance_s
        balanced = s.wait_until(lambda: balance_now(s).balanced, wait_s)
        balanced_after_s = (_wall_ms() - last_stop_ms) / 1000
        s.wait_until(lambda: _delivered_by_owner(s, ids), TAIL_S)
        end_ms = _wall_ms()
    finally:
        s.poll_s = saved
    versions = {w: p.env.get(names.ENV_WORKER_VERSION, "") for w, p in s.fleet.workers.items()}
    note = ((f"balanced {balanced_after_s:.1f} s after the last stop" if balanced else
             f"NOT balanced within {wait_s:g} s of the last stop")
            + f": {balance_now(s).describe()}" + ("" if all_ok else "; a step timed out"))
    report = deploy_report(
        style=style, conn_ids=ids, versions=versions, old_version=OLD_VERSION,
        claims=claims_from_logs(s.fleet.worker_log_lines()),
        records=list(read_records(s.fleet.record_dir)),
        start_ms=start_ms, end_ms=end_ms, last_stop_ms=last_stop_ms,
        unowned_at_end=[c for c in ids if (o := s.observer.worker_of(c)) is None or o in old],
        note=note)
    s.say(f"deploy done: {report.moves} moves (mean {report.moves_mean:.2f}, max "
          f"{report.moves_max} per stream), {report.moves_onto_old} onto an old worker; {note}",
          "green" if not report.failures() else "red")
    return report
