"""A deploy (issue 21) on the bench's local fleet: 3 workers x 100 streams replaced by 3 workers
of a new version, in both styles, for our design and for the seed's (``--deploy-only``). Ours
runs twice: as configured by default (make-before-break handoffs) and with
``HOLDFAST_SINGLE_CONNECTION=true`` (``ours-single``: one connection per stream at a time, the
handoff break-before-make to the named successor).

Each design and style runs on a fleet of its own (``BenchFleet``: DynamoDB Local, moto SQS,
the demo upstream at 10 msgs/s per stream; ours with the local runner, the seed without) and
goes through ``holdfast.fleet.deploy_scenario.run_deploy``, the code of ``holdfast up
--scenario deploy``: the old workers run ``v1`` (``HOLDFAST_WORKER_VERSION``), each new one
``v2``; ``one-at-a-time`` starts one new worker, waits until it is live plus 5 s (ECS's
settle), SIGTERMs one old worker and waits until every stream is owned again, then the next;
``new-first`` starts every new worker, settles, then SIGTERMs every old one at once.

Timings are the production defaults of ``bench.crash_production.plan_for``: ours at
``FleetTiming.production()`` (session TTL 4 s, heartbeat 1 s, checkpoint 20 s, cool-down 60 s)
with the production worker settings; the seed at lease 20 s, heartbeat 5 s, reconcile 60 s.
Both stop within the budget the CDK stack gives a worker (``HOLDFAST_SHUTDOWN_SECONDS``:
max(25, lease + heartbeat) = 25 s at the production lease), not the bench's 8 s.

Placement before the deploy: ours, three workers and the 300 streams inserted 0.15 s apart
(each nudge wakes another poller), then ``run_deploy`` waits until the fleet is balanced; the
seed, which has no router and no rebalancing, takes 100 streams into each worker by inserting
them before the worker starts (its first reconcile, at start-up, acquires what is free).

The seed is read with two differences, both outside ``run_deploy``: it has no sessions, so a
stream is held while its lease is unexpired (``BenchSession``); and its owner changes are
recomputed from its own log lines (``bench.deploy_figures``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path
from typing import Any

from bench.crash_production import RECONCILE_JITTER, RECONCILE_S, CrashPlan, plan_for
from bench.deploy_figures import compact, deploy_window, handoff_figures, seed_claims
from bench.harness import BenchFleet, now_ms
from bench.rebalance import LogEvent, parse_log
from holdfast.core import names
from holdfast.core.sessions import SessionItem
from holdfast.fleet.deploy import STYLES, DeployReport, delivery_gaps, deploy_report
from holdfast.fleet.deploy_scenario import NEW_VERSION, OLD_VERSION, run_deploy
from holdfast.fleet.moves import Claim
from holdfast.fleet.recorder import read_records
from holdfast.fleet.session import Session
from holdfast.fleet.view import Snapshot

__all__ = ["CONNECTIONS", "GAP_TARGET_MBB_S", "GAP_TARGET_ONE_CONN_S", "PER_WORKER", "SETTLE_S",
           "SHUTDOWN_S", "WORKERS", "BenchRun", "BenchSession", "bench_run", "deploy_bench"]

WORKERS = 3
PER_WORKER = 100
SETTLE_S = 5.0  # ECS: a new task healthy -> the old one stopped
SPREAD_S = 0.15  # ours: inserts this far apart, as ``holdfast up`` does
GAP_TARGET_MBB_S = 0.1  # issue 21: delivery gap per move p99, make-before-break
GAP_TARGET_ONE_CONN_S = 0.5  # ... where one connection at a time is required
SHUTDOWN_S = 25.0  # infra/settings.py ``shutdown_seconds`` at the production lease and heartbeat
# The workers and the runner talk straight to DynamoDB Local and moto: the figures come from
# logs and records, nothing is metered, and the counting proxies only added a hop to every
# call and CPU to the bench's own process (proxies and the scenario's observer together: 19-29 %
# of a core in the stops' seconds). Gap p99 in the same session, with / without them, two runs
# each of new first, alternating: 1.54, 1.23 / 1.26, 3.68 s, within the machine's noise.
PROXIED = False
SEED_MODULE = "bench.seed_worker"
# Per design: how a stream moves, and what our workers are told for it.
CONNECTIONS = {"ours": ("make-before-break", {}),
               "ours-single": ("one connection at a time",
                               {"HOLDFAST_SINGLE_CONNECTION": "true"}),
               "baseline": ("one connection at a time", {})}
SAID = ("==>", "deploy", "not balanced", "placed")  # the lines also said (not the streams')


class BenchSession(Session):
    """``Session`` reading the table straight from DynamoDB Local, not through the workers'
    counting proxy; for the seed (``seed=True``), which has no sessions, a stream is held while
    its lease is unexpired (the observer's expiry rule)."""

    def __init__(self, bf: BenchFleet, view: _Lines, *, seed: bool) -> None:
        super().__init__(bf.pf.fleet, view, threading.Event(), title=view.tag)
        self._direct = bf.ddb
        self.seed = seed

    @property
    def ddb(self) -> Any:
        return self._direct

    def _sessions(self) -> dict[str, SessionItem] | None:
        return None if self.seed else super()._sessions()


class _Lines:
    """The session's view: every line with its wall ms (to ``scenario.log``: wall ms, seconds
    since the session began, text), the scenario's steps, crashes and failures also to
    ``say``."""

    def __init__(self, say: Callable[[str], None], tag: str, path: Path) -> None:
        self.say, self.tag, self.path = say, tag, path
        self.said: list[tuple[int, str]] = []

    def line(self, t: float, text: str, style: str = "") -> None:
        self.said.append((now_ms(), text))
        with self.path.open("a") as f:
            f.write(f"{self.said[-1][0]} {t:8.2f} {text}\n")
        if text.startswith(SAID) or style == "bold red" or "failed" in text:
            self.say(f"{self.tag} +{t:.1f}s {text[:300]}")

    def refresh(self, snap: Snapshot) -> None:
        pass

    def close(self) -> None:
        pass


def _timing(plan: CrashPlan) -> dict[str, Any]:
    t, env = plan.timing, plan.worker_env
    return {"lease_s": t.lease_s, "heartbeat_s": t.heartbeat_s, "checkpoint_s": t.checkpoint_s,
            "skew_ms": t.skew_ms, "shutdown_s": t.shutdown_s, "rate_per_stream": t.rate,
            "reconcile_s": float(env.get("HOLDFAST_RECONCILE_SECONDS", RECONCILE_S)),
            **({"cooldown_s": t.cooldown_s, "balance_interval_ms": t.balance_interval_ms,
                "sweep_interval_ms": t.sweep_interval_ms, "liveness": "session"}
               if plan.mode == "ours" else {"liveness": "lease"})}


def _plan(mode: str) -> CrashPlan:
    """``plan_for``'s production plan of the design, with the stack's stop budget and the
    design's connection setting."""
    plan = plan_for("baseline" if mode == "baseline" else "ours", 1)
    return replace(plan, timing=replace(plan.timing, shutdown_s=SHUTDOWN_S),
                   worker_env={**plan.worker_env, **CONNECTIONS[mode][1]})


def _holds(s: Session, worker: str, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(s.observer.worker_of(c) == worker for c in ids)


def _place(s: BenchSession, bf: BenchFleet, ids: list[str],
           start: Callable[[str], str]) -> None:
    """The old workers and their streams (see the module's docstring)."""
    if not s.seed:
        for _ in range(WORKERS):
            start(OLD_VERSION)
        s.wait_workers_ready()
        s.create_streams_named(ids, bf.pf.base_url, spread_s=SPREAD_S)
        return
    for i in range(WORKERS):
        batch = ids[i * PER_WORKER:(i + 1) * PER_WORKER]
        s.create_streams_named(batch, bf.pf.base_url)
        s.wait_until(_holds(s, start(OLD_VERSION), batch), 30)
    s.say(f"placed: {s.observer.loads()}")


def _seed_report(s: BenchSession, view: _Lines, ids: list[str], style: str,
                 report: DeployReport) -> DeployReport:
    """The seed's figures over ``run_deploy``'s window, its owner changes from its
    ``acquired`` lines."""
    window = deploy_window(view.said, report.window_s)
    if window is None:
        raise RuntimeError("the deploy's window is not in the scenario's lines")
    claims: list[Claim] = []
    for wid, proc in s.fleet.workers.items():
        claims += seed_claims(proc.log_path.read_text(errors="replace").splitlines(), wid)
    versions = {w: p.env.get(names.ENV_WORKER_VERSION, "") for w, p in s.fleet.workers.items()}
    start_ms, end_ms, last_stop_ms = window
    return deploy_report(style=style, conn_ids=ids, versions=versions, old_version=OLD_VERSION,
                         claims=claims, records=list(read_records(s.fleet.record_dir)),
                         start_ms=start_ms, end_ms=end_ms, last_stop_ms=last_stop_ms,
                         unowned_at_end=report.unowned_at_end, note=report.note)


def _handoffs(s: BenchSession, view: _Lines, report: DeployReport) -> dict[str, Any]:
    window = deploy_window(view.said, report.window_s)
    events: list[LogEvent] = []
    for proc in s.fleet.workers.values():
        events += parse_log(proc.log_path.read_text(errors="replace").splitlines())
    old = [w for w, p in s.fleet.workers.items()
           if p.env.get(names.ENV_WORKER_VERSION) == OLD_VERSION]
    if window is None:
        return {}
    gaps = delivery_gaps(list(read_records(s.fleet.record_dir)), window[0], window[1])
    return handoff_figures(events, old, window[0], window[1], gaps)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass
class BenchRun:
    """One design's run on a fleet of its own (``bench_run``): the fleet, the session reading
    it, its lines, ``start(version)`` for a worker, and the figures so far (``out``)."""

    bf: BenchFleet
    s: BenchSession
    view: _Lines
    start: Callable[[str], str]
    out: dict[str, Any]

    @property
    def seed(self) -> bool:
        return self.s.seed


@contextlib.contextmanager
def bench_run(run_dir: Path, part: str, mode: str, say: Callable[[str], None], *,
              detail: str = "") -> Iterator[BenchRun]:
    """A fleet of ``mode``'s production plan (``_plan``) for one run of ``part`` (its fleet
    named ``part-mode-detail``, its lines tagged ``[part design detail]``); an error in the
    block is reported in ``out`` (the other runs' figures are kept), and the fleet is closed
    after it."""
    plan = _plan(mode)
    seed = plan.mode == "baseline"
    tag = f"[{part} {'seed' if seed else mode}{f' {detail}' if detail else ''}]"
    bf = BenchFleet(run_dir, plan.mode, plan.timing, worker_env=plan.worker_env,
                    runner_env=plan.runner_env, name="-".join(filter(None, (part, mode, detail))),
                    proxied=PROXIED).start()
    out: dict[str, Any] = {"load_average_start": _load(), "logs": str(bf.pf.fleet.run_dir)}
    view = _Lines(say, tag, bf.pf.fleet.run_dir / "scenario.log")
    numbers = count(1)

    def start(version: str) -> str:
        wid = f"w{next(numbers)}"
        if seed:  # BenchFleet.worker's program for the seed, with the version in its env
            bf.pf.start_worker(wid, module=SEED_MODULE, HOLDFAST_WORKER_VERSION=version)
        else:
            bf.pf.start_worker(wid, HOLDFAST_WORKER_VERSION=version)
        return wid

    t0 = time.monotonic()
    try:
        yield BenchRun(bf, BenchSession(bf, view, seed=seed), view, start, out)
    except Exception as exc:  # report what failed, keep the other runs' figures
        out["error"] = f"{type(exc).__name__}: {exc}"
        say(f"{tag} failed: {out['error']}")
    finally:
        out["runtime_s"] = round(time.monotonic() - t0, 1)
        out["close"] = bf.close()
        out["load_average_end"] = _load()


def _one(run_dir: Path, mode: str, style: str, say: Callable[[str], None]) -> dict[str, Any]:
    """One deploy of ``style`` on a fleet of its own: the figures, or the error."""
    ids = [f"dep-{i:03d}" for i in range(WORKERS * PER_WORKER)]
    with bench_run(run_dir, "deploy", mode, say, detail=style) as run:
        s, out = run.s, run.out
        _place(s, run.bf, ids, run.start)
        # The seed never balances: wait out its slowest reconcile for streams still unowned.
        report = run_deploy(s, ids, run.start, style=style, settle_s=SETTLE_S, balance_s=(
            RECONCILE_S * (1 + RECONCILE_JITTER) + 5 if run.seed else None))
        if run.seed:
            report = _seed_report(s, run.view, ids, style, report)
        else:
            out["handoff"] = _handoffs(s, run.view, report)
        out.update(compact(report))
        say(f"{run.view.tag} moves mean {report.moves_mean:.2f} max {report.moves_max}, onto old "
            f"{report.moves_onto_old}, gap p50/p99/max {out['gap_p50_s']} / "
            f"{out['gap_p99_s']} / {out['gap_max_s']} s, dups {report.duplicates}, lost "
            f"{report.lost}")
    return run.out


def deploy_bench(run_dir: Path, *, modes: Iterable[str] = ("ours", "baseline"),
                 styles: Iterable[str] = STYLES,
                 say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every style for each design (``ours``: both connection settings, ``baseline``: the
    seed); the report section's figures."""
    out: dict[str, Any] = {"workers": WORKERS, "streams_per_worker": PER_WORKER,
                           "settle_s": SETTLE_S, "old_version": OLD_VERSION,
                           "new_version": NEW_VERSION,
                           "target_gap_p99_s": {"make_before_break": GAP_TARGET_MBB_S,
                                                "one_connection": GAP_TARGET_ONE_CONN_S}}
    for mode in [v for m in modes for v in (("ours", "ours-single") if m == "ours" else (m,))]:
        entry: dict[str, Any] = {"timing": _timing(_plan(mode)),
                                 "connection": CONNECTIONS[mode][0]}
        for style in styles:
            say(f"[deploy] {mode}, {style}: {WORKERS} workers x {PER_WORKER} streams")
            entry[style] = _one(run_dir, mode, style, say)
        out[mode] = entry
    return out
