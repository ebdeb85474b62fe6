"""``python -m bench [--quick] [--no-density]``: run the benchmarks, write the report.

Full run: about 80 minutes, 20 of them the deploy and 5 the scale-in (about 25 with
--no-crash-production --no-density-cpu --no-fast-paths --no-deploy --no-scale-in);
``--quick``: a few minutes more than before, with fewer repetitions (the same figures, wider
error bars), density at 1,000 connections only and the deploy one at a time only. Parts alone
(each merged into ``--merge``'s report if given, else written as ``<date>-<part>``):

    --capacity-only   DynamoDB units per operation on DynamoDB Local, and the model (~20 s)
    --model-only      the hot-key model from bench/results/capacity.json (instant)
    --cost-only       consumed capacity at production timings, each mode (~3 min per mode
                      with the default --cost-seconds 120)
    --crash-production-only
                      SIGKILL failover at production defaults, N = 20: ours --crash-rounds
                      rounds (3), the seed 1 round (~6 min)
    --density-cpu-only SIZES
                      CPU on liveness and checkpoints at production defaults, e.g. 5000 or
                      2000,5000: two worker runs per size (~6 min each at 5,000)
    --fast-paths-only the fast paths at production defaults: stop latency (order queue,
                      heartbeat only, the seed) and SIGKILL failover with and without the
                      platform report (~6 min)
    --forced-release-only
                      a forced release (expiry 0, owner kept) of 20 held streams, ours and the
                      seed: when the holder lets go, unowned, handled again, overlap (~2 min)
    --start-burst-only
                      start latency of 30, then 300 streams inserted at once into 3 workers:
                      insert -> first message handled, split at the router (~2 min)
    --throttle-only   the throttling scenario at production defaults, 5 runs of one worker:
                      self-fences, owners kept, call rate against normal (~4 min)
    --deploy-only     a deploy of 3 workers x 100 streams at production defaults, one at a
                      time and new first, ours (make-before-break, one connection at a time)
                      and the seed: moves per stream, moves onto old workers, delivery gap
                      per move, duplicates (~20 min)
    --scale-in-only   one of 3 workers x 100 streams SIGTERMed with no replacement, production
                      defaults, ours and the seed: gap per move, warm handoffs, duplicates
                      (~5 min)
    --rebalance-only  scale-out from 2 to 4 workers at N = 100: time until balanced, moves,
                      unowned time, a quiet period (~9 min at production defaults; ~3 min
                      with --quick: scaled timings, 60 s quiet)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import capacity
from bench.blocked import blocked_handler
from bench.cost import PRICES, monthly_cost
from bench.cost_scenario import production_cost
from bench.crash_production import crash_production
from bench.density import run_density
from bench.density_cpu import density_cpu
from bench.deploy import deploy_bench
from bench.fastpaths import crash_reported, stop_production
from bench.forced import forced_release
from bench.harness import BASELINE_RECONCILE_S, BenchFleet
from bench.rebalance import scale_out
from bench.report import write_report
from bench.report_rebalance import rebalance_md, write_rebalance
from bench.report_sections import model_summary
from bench.scale_in import scale_in_bench
from bench.scenarios import handover, start_latency, steady_cost, stop_latency
from bench.start_burst import start_burst
from bench.throttle import throttle_production
from holdfast.fleet.deploy import STYLES
from holdfast.fleet.procs import REPO_ROOT
from holdfast.fleet.timing import FleetTiming

__all__ = ["main"]

RESULTS = REPO_ROOT / "bench" / "results"


def run_mode(mode: str, run_dir: Path, quick: bool, say: Any) -> dict[str, Any]:
    timing = FleetTiming()
    bf = BenchFleet(run_dir, mode, timing).start()
    out: dict[str, Any] = {}
    slow = mode == "baseline"
    budget = 2 * BASELINE_RECONCILE_S + 20 if slow else 30
    try:
        plan = [("graceful_n10", 10, signal.SIGTERM, 1 if quick else 3),
                ("graceful_n100", 100, signal.SIGTERM, 1 if quick else 2),
                ("crash_n10", 10, signal.SIGKILL, 1 if quick else 3),
                ("crash_n100", 100, signal.SIGKILL, 0 if quick else 1)]
        for name, n, sig, rounds in plan:
            if rounds:
                say(f"[{mode}] {name}: {rounds} round(s)")
                out[name] = handover(bf, n, sig, rounds=rounds, timeout_s=budget + 60,
                                     tag=name.replace("_", "-"))
                say(f"[{mode}] {name}: {out[name]['latency_s']}, gap {out[name]['seq_gap']}")
        bf.worker(f"{mode}-a")
        bf.worker(f"{mode}-b")
        say(f"[{mode}] start latency")
        out["start"] = start_latency(bf, 8 if quick else 20, 0.4, budget)
        say(f"[{mode}] start: {out['start']['latency_s']}")
        if mode == "ours":
            out["stop"] = stop_latency(bf, 8 if quick else 20, 30)
            say(f"[{mode}] stop: {out['stop']['latency_s']}")
        out["steady"] = steady_cost(bf, 20 if quick else 50, 15 if quick else 60, budget)
        say(f"[{mode}] steady: {json.dumps(out['steady'])}")
    finally:
        lines = bf.close()
        runner_log = bf.pf.fleet.run_dir / "runner.log"
        if runner_log.exists():
            stopped = [ln for ln in runner_log.read_text(errors="replace").splitlines()
                       if "runner stopped" in ln]
            out["runner_summary"] = stopped[-1][-300:] if stopped else None
        out["close"] = lines
    out["cost"] = monthly_cost(out.get("steady", {}), bench_heartbeat_s=timing.heartbeat_s,
                               mode=mode)
    out["timing"] = {"lease_s": timing.lease_s, "heartbeat_s": timing.heartbeat_s,
                     "skew_ms": timing.skew_ms, "sweep_interval_ms": timing.sweep_interval_ms,
                     "reconcile_s": BASELINE_RECONCILE_S if slow else 15.0}
    return out


def renew_cost() -> dict[str, Any] | None:
    """Client CPU per renewal (single UpdateItem vs PartiQL batch) from ``bench/renew_cost.py``."""
    out = Path(tempfile.mkdtemp()) / "renew.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "renew_cost.py"),
                           "--leases", "500", "--rounds", "2", "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    if proc.returncode != 0 or not out.exists():
        return {"error": proc.stderr[-500:]}
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def capacity_and_model(measure: bool) -> dict[str, Any]:
    """Per-operation units (measured now, or the last measurement) and the model on them."""
    cap: dict[str, Any] | None = None
    if measure:
        cap = capacity.run_local(capacity.OUT)
    elif capacity.OUT.exists():
        cap = json.loads(capacity.OUT.read_text())
    return {"capacity": cap, "model": model_summary(cap)}


def cost_scenarios(modes: list[str], run_dir: Path, streams: int, seconds: float,
                   say: Any) -> dict[str, Any]:
    """``production_cost`` for each mode, one after the other (each its own fleet)."""
    out: dict[str, Any] = {}
    for mode in modes:
        say(f"[{mode}] consumed capacity at production timings")
        try:
            out[mode] = production_cost(run_dir, mode, streams=streams, seconds=seconds, say=say)
        except Exception as exc:  # report what failed, keep the other figures
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"}
        say(f"[{mode}] monthly: {[c['monthly_usd_total'] for c in out[mode].get('monthly', [])]}")
    return out


def fast_paths(run_dir: Path, quick: bool, say: Any) -> dict[str, Any]:
    """Stop at production defaults, and crash failover with and without the platform report."""
    from holdfast.lambdas.taskstopped.handler import report_stopped

    def report(bf: BenchFleet, proc: Any) -> None:
        report_stopped(proc.name, bf.pf.direct_env, reason="bench: SIGKILL")

    return {"stop": stop_production(run_dir, streams=10 if quick else 20, say=say),
            "crash": crash_reported(run_dir, report, rounds=1 if quick else 3, say=say)}


def rebalance(run_dir: Path, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    """The scale-out at production defaults (``--quick``: scaled timings), and its command."""
    argv = " ".join(sys.argv[1:]) or "(full run)"
    entry = scale_out(run_dir, production=not args.quick, quiet_s=args.rebalance_quiet, say=say)
    entry["command"] = f"python -m bench {argv}"
    return {"scaled" if args.quick else "production": entry}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def density_cpu_sizes(sizes: list[int], run_dir: Path, seconds: float,
                      say: Any) -> list[dict[str, Any]]:
    """``density_cpu`` at each size, with one fresh per-write client CPU measurement."""
    say("client CPU per write (renew_cost)")
    renew = renew_cost()
    return [density_cpu(n, work=run_dir, renew=renew, measure_s=seconds, say=say)
            for n in sizes]


def _partial(args: argparse.Namespace, part: str, figures: dict[str, Any], say: Any) -> int:
    base: dict[str, Any] = json.loads(args.merge.read_text()) if args.merge else {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "prices_usd": PRICES}
    if "load_average" in figures:
        figures["load_average"] = {**base.get("load_average", {}), **figures["load_average"]}
    if "density_cpu" in figures:
        sizes = {d["streams"] for d in figures["density_cpu"]}
        figures["density_cpu"] = sorted(
            [d for d in base.get("density_cpu", []) if d.get("streams") not in sizes]
            + figures["density_cpu"], key=lambda d: int(d["streams"]))
    base.update(figures)
    stem = args.merge.stem if args.merge else (
        dt.datetime.now(dt.UTC).strftime("%Y-%m-%d") + f"-{part}")
    say("wrote " + ", ".join(str(p) for p in write_report(base, args.out_dir, stem)))
    return 0


# The parts with an ``--X-only`` and a ``--no-X`` flag, and what each measures.
_PARTS = {
    "blocked-handler": "claims, releases and heartbeats while handlers block their threads",
    "crash-production": "the SIGKILL failover at production defaults, ours and the seed",
    "deploy": "the deploy of 3 workers x 100 streams in both styles, ours and the seed",
    "fast-paths": "the fast paths at production defaults (stop, reported crash)",
    "forced-release": "the forced release of held streams, ours and the seed",
    "scale-in": "a scale-in (one of 3 workers x 100 streams SIGTERMed), ours and the seed",
    "start-burst": "the start latency of 30 and 300 streams inserted at once (production "
                   "defaults)",
    "throttle": "the throttling scenario at production defaults (self-fences, call rate)",
}


def _runners(args: argparse.Namespace, run_dir: Path, say: Any, *,
             full: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    """Each part of ``_PARTS`` as a call, in a full run's order (``full``: with ``--quick``'s
    fewer rounds and deploy styles)."""
    quick = full and args.quick
    modes = args.modes.split(",")
    return {
        "start-burst": lambda: start_burst(run_dir, say),
        "blocked-handler": lambda: blocked_handler(run_dir, say),
        "throttle": lambda: throttle_production(run_dir, runs=3 if args.quick else 5,
                                                checkpoint_s=args.throttle_checkpoint_s,
                                                say=say),
        "crash-production": lambda: crash_production(
            run_dir, streams=args.crash_streams, rounds=1 if quick else args.crash_rounds,
            modes=tuple(modes), say=say),
        "fast-paths": lambda: fast_paths(run_dir, args.quick, say),
        "forced-release": lambda: forced_release(run_dir, say=say),
        "deploy": lambda: deploy_bench(run_dir, modes=modes,
                                       styles=STYLES[:1] if quick else STYLES, say=say),
        "scale-in": lambda: scale_in_bench(run_dir, modes=modes, say=say),
    }


def _one_part(args: argparse.Namespace, part: str, run_dir: Path, say: Any) -> int:
    """One part alone, with the load average around it (``_partial`` writes the report)."""
    load0 = _load()
    run = _runners(args, run_dir, say, full=False)
    name = part.replace("-", " ")
    figures = {part.replace("-", "_"): run[part](), "logs": str(run_dir),
               "load_average": {f"{name} start": load0, f"{name} end": _load()}}
    return _partial(args, part, figures, say)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a few minutes)")
    p.add_argument("--no-density", action="store_true")
    p.add_argument("--modes", default="ours,baseline")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--density-only", type=int, metavar="N",
                   help="only the density run at N connections; merged into --merge's report")
    p.add_argument("--merge", type=Path, help="an earlier report JSON to add the figures to")
    p.add_argument("--capacity-only", action="store_true",
                   help="only measure DynamoDB units per operation (and run the model)")
    p.add_argument("--model-only", action="store_true",
                   help="only the hot-key model, from the last capacity measurement")
    p.add_argument("--cost-only", action="store_true",
                   help="only the consumed-capacity scenario at production timings")
    p.add_argument("--no-cost-scenario", action="store_true",
                   help="skip the production-timing cost scenario in a full run")
    p.add_argument("--cost-seconds", type=float, default=120.0,
                   help="metered window of the cost scenario, per mode (default 120)")
    p.add_argument("--cost-streams", type=int, default=100,
                   help="streams held by the cost scenario's 2 workers (default 100)")
    p.add_argument("--crash-rounds", type=int, default=3,
                   help="rounds of ours in the production crash failover (the seed: 1)")
    p.add_argument("--crash-streams", type=int, default=20,
                   help="streams the killed worker holds in the production crash failover "
                        "(default 20; 150: the issue's 2 workers x 150)")
    p.add_argument("--throttle-checkpoint-seconds", dest="throttle_checkpoint_s", type=float,
                   default=2.0, metavar="S",
                   help="the throttle scenario's checkpoint period (default 2: calls besides "
                        "the heartbeat to throttle; 20: the production default)")
    p.add_argument("--density-cpu-only", metavar="SIZES",
                   help="only the liveness/checkpoint CPU at these sizes (comma-separated)")
    p.add_argument("--density-cpu-seconds", type=float, default=60.0,
                   help="CPU window of each density-CPU run (default 60: 3 checkpoint cycles)")
    for part, what in _PARTS.items():
        p.add_argument(f"--{part}-only", action="store_true", help=f"only {what}")
        p.add_argument(f"--no-{part}", action="store_true", help=f"skip {what} in a full run")
    p.add_argument("--rebalance-only", action="store_true",
                   help="only the rebalancing scale-out (production; --quick: scaled)")
    p.add_argument("--no-rebalance", action="store_true",
                   help="skip the rebalancing scale-out in a full run")
    p.add_argument("--rebalance-quiet", type=float, metavar="S",
                   help="the quiet period after balancing (default 300 s; --quick 60 s)")
    p.add_argument("--no-density-cpu", action="store_true",
                   help="skip the liveness/checkpoint CPU in a full run")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def say(text: str) -> None:
        print(text, flush=True)

    run_dir = Path(tempfile.mkdtemp(prefix="holdfast-bench-"))
    if args.capacity_only or args.model_only:
        figures = capacity_and_model(measure=args.capacity_only)
        say(json.dumps(figures["model"]["designs"], indent=1))
        return _partial(args, "capacity" if args.capacity_only else "model", figures, say)
    if args.cost_only:
        figures = {"production_cost": cost_scenarios(args.modes.split(","), run_dir,
                                                     args.cost_streams, args.cost_seconds, say),
                   "logs": str(run_dir)}
        return _partial(args, "cost", figures, say)
    for part in _PARTS:
        if getattr(args, f"{part.replace('-', '_')}_only"):
            return _one_part(args, part, run_dir, say)
    if args.rebalance_only:  # --merge: an earlier run's other variant is kept
        load0 = _load()
        figures = json.loads(args.merge.read_text()) if args.merge else {}
        figures.update(date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                       logs=str(run_dir))
        figures["rebalance"] = {**figures.get("rebalance", {}), **rebalance(run_dir, args, say)}
        tag = "scaled" if args.quick else "production"
        figures["load_average"] = {**figures.get("load_average", {}),
                                   f"rebalance {tag} start": load0,
                                   f"rebalance {tag} end": _load()}
        stem = args.merge.stem if args.merge else (
            dt.datetime.now(dt.UTC).strftime("%Y-%m-%d") + "-rebalance")
        say("wrote " + ", ".join(str(p) for p in write_rebalance(figures, args.out_dir, stem)))
        return 0
    if args.density_cpu_only:
        load0 = _load()
        figures = {"density_cpu": density_cpu_sizes(
            [int(x) for x in args.density_cpu_only.split(",")], run_dir,
            args.density_cpu_seconds, say), "logs": str(run_dir)}
        figures["load_average"] = {f"density CPU {args.density_cpu_only} start": load0,
                                   f"density CPU {args.density_cpu_only} end": _load()}
        return _partial(args, "density-cpu", figures, say)
    if args.density_only:
        base: dict[str, Any] = json.loads(args.merge.read_text()) if args.merge else {}
        hb, lease = (5.0, 20.0) if args.density_only <= 1000 else (20.0, 80.0)
        entry = run_density(args.density_only, heartbeat_s=hb, lease_s=lease,
                            work=run_dir / f"density-{args.density_only}")
        say(f"density {args.density_only}: {entry}")
        base["density"] = [d for d in base.get("density", [])
                           if d.get("streams") != args.density_only] + [entry]
        base["density"].sort(key=lambda d: d["streams"])
        stem = args.merge.stem if args.merge else dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        say("wrote " + ", ".join(str(p) for p in write_report(base, args.out_dir, stem)))
        return 0
    return full_run(args, run_dir, say)


def full_run(args: argparse.Namespace, run_dir: Path, say: Any) -> int:
    """Every part, one report ``<date>.md/.json``."""
    started = time.monotonic()
    result: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              "quick": args.quick, "prices_usd": PRICES, "logs": str(run_dir),
                              "load_average": {"start": _load()}}
    for mode in args.modes.split(","):
        result[mode] = run_mode(mode, run_dir, args.quick, say)
    say("renewal client CPU")
    result["renew_cost"] = renew_cost()
    say("DynamoDB units per operation, and the hot-key model")
    result.update(capacity_and_model(measure=True))
    if not args.no_cost_scenario:
        result["production_cost"] = cost_scenarios(
            args.modes.split(","), run_dir, args.cost_streams,
            min(args.cost_seconds, 60.0) if args.quick else args.cost_seconds, say)
    for part, run in _runners(args, run_dir, say, full=True).items():
        if not getattr(args, "no_" + part.replace("-", "_")):
            say(_PARTS[part])
            result[part.replace("-", "_")] = run()
    if not args.no_rebalance:
        say("rebalancing: scale-out from 2 to 4 workers")
        result["rebalance"] = rebalance(run_dir, args, say)
    if not args.no_density_cpu:
        result["density_cpu"] = density_cpu_sizes(
            [1000 if args.quick else 5000], run_dir,
            min(args.density_cpu_seconds, 40.0) if args.quick else args.density_cpu_seconds, say)
    if not args.no_density:
        sizes = [(1000, 5.0, 20.0)] if args.quick else [(1000, 5.0, 20.0), (5000, 20.0, 80.0)]
        result["density"] = []
        for n, hb, lease in sizes:
            say(f"density {n}")
            try:
                result["density"].append(run_density(n, heartbeat_s=hb, lease_s=lease,
                                                      work=run_dir / f"density-{n}"))
            except Exception as exc:  # report what failed, keep the other figures
                result["density"].append({"streams": n, "error": f"{type(exc).__name__}: {exc}"})
            say(f"density {n}: {result['density'][-1]}")
    result["load_average"]["end"] = _load()
    result["runtime_s"] = round(time.monotonic() - started, 1)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    paths = write_report(result, args.out_dir, stem)
    if result.get("rebalance"):  # bench.report does not render this section (yet)
        md = next(p for p in paths if p.suffix == ".md")
        md.write_text(md.read_text() + "\n" + "\n".join(rebalance_md(result["rebalance"])))
    say("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
