"""``holdfast up`` (the local fleet, optionally a scenario) and ``holdfast runner``.

Exit codes of ``up``: 0 clean (scenario passed, or stopped by Ctrl-C/SIGTERM without a
scenario), 1 the scenario failed (a stream left unowned, a missed seq, a crashed child; for
``deploy`` also a seq lost or delivered twice across the deploy, never its moves alone),
2 bad arguments or a ``--handler`` that cannot be loaded, 3 the local AWS or a part of the
fleet could not start, 130 interrupted during a scenario.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from holdfast.fleet.deploy import STYLES, DeployReport
from holdfast.fleet.deploy_scenario import NEW_VERSION, OLD_VERSION, run_deploy
from holdfast.fleet.platform import PlatformReporter, Report
from holdfast.fleet.procs import Fleet, FleetError
from holdfast.fleet.report import Incident
from holdfast.fleet.scenario import ScenarioFailed, failover
from holdfast.fleet.session import Interrupted, Session
from holdfast.fleet.timing import FleetTiming
from holdfast.fleet.verdict import SPANS_FILE, verdict
from holdfast.fleet.view import View, make_view
from holdfast.localaws import LocalAwsError

__all__ = ["FLEET_COMMANDS"]


def _add_up(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    p.add_argument("--streams", type=int, default=12, help="demo streams (default 12)")
    p.add_argument("--scenario", choices=["failover", "deploy"],
                   help="run a scenario, then exit (deploy: replace every worker with a new "
                        f"version, {OLD_VERSION} -> {NEW_VERSION}, and report what it cost "
                        "each stream)")
    p.add_argument("--deploy-style", choices=STYLES, default=STYLES[0],
                   help="deploy: one new worker before each old one's stop (as ECS does), or "
                        "every new one first, then every old one stopped at once "
                        "(default %(default)s)")
    p.add_argument("--settle", type=float, default=5.0, metavar="SECONDS",
                   help="deploy: seconds from a new worker's start-up to the old one's "
                        "SIGTERM (default %(default)s)")
    p.add_argument("--env-file", type=Path, help="write the environment a worker needs here")
    p.add_argument("--run-dir", type=Path, help="logs and results (default: a new temp dir)")
    p.add_argument("--rate", type=float, default=10.0, help="upstream msgs/s per stream")
    p.add_argument("--backend", choices=["auto", "dynamodb-local", "moto"], default="auto")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    p.add_argument("--handler", metavar="MODULE:FUNCTION",
                   help="your async handler (importable from the current directory or the "
                        "active environment); the recorder wraps it")
    p.add_argument("--no-platform-report", dest="platform_report", action="store_false",
                   help="do not report a worker that exits unexpectedly (crash, SIGKILL) "
                        "stopped, as ECS reports a stopped task: its streams then wait for its "
                        "session's TTL (the path a hung worker always takes)")
    p.add_argument("--url", metavar="TEMPLATE",
                   help="your upstream for the streams, {id} replaced by the stream id "
                        "(e.g. ws://127.0.0.1:9000/feed/{id}); the demo upstream is not "
                        "started")


def _install_signals(stop: threading.Event) -> None:
    def handler(signum: int, _frame: object) -> None:
        stop.set()
    # A closed terminal or a dropped SSH session (SIGHUP) and Ctrl-\ (SIGQUIT) stop the fleet
    # too: the children run in sessions of their own, so nothing else reaches them, and they
    # went on streaming for good.
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"):
        if (sig := getattr(signal, name, None)) is not None:
            signal.signal(sig, handler)


def _env_only(console: Console, fleet: Fleet, stop: threading.Event) -> int:
    console.print("local AWS and runner up (no workers, no streams); Ctrl-C to stop",
                  highlight=False)
    while not stop.wait(0.5):
        for proc in fleet.crashed():
            console.print(f"[red]{proc.name} exited with code {proc.returncode()}; log: "
                          f"{escape(str(proc.log_path))}[/]\n{escape(proc.tail())}",
                          highlight=False)
            return 1
    return 0


def _start_base(console: Console, fleet: Fleet, args: argparse.Namespace) -> None:
    """Local AWS, runner, and the env file: what even ``--workers 0 --streams 0`` runs."""
    if args.env_file:
        # An earlier run's file names endpoints nothing serves: gone until this run's is
        # written (at once, whole), so a script can wait for it to exist.
        args.env_file.unlink(missing_ok=True)
    fleet.start_aws()
    assert fleet.aws is not None
    console.print(f"local AWS: DynamoDB ({fleet.aws.backend}) {fleet.aws.dynamodb_url}, "
                  f"SQS {fleet.aws.sqs_url}")
    fleet.start_runner()
    console.print(f"runner (router + sweeper) pid {fleet.runner.pid if fleet.runner else '-'}"
                  f"; log {escape(str(fleet.run_dir / 'runner.log'))}")
    if args.env_file:
        fleet.write_env(args.env_file)
        console.print(f"environment written to {escape(str(args.env_file))}")


def _shutdown(run: _Run, rc: int) -> int:
    """Workers first (gracefully), the verdict from their final checkpoints, then the rest."""
    console, fleet, session = run.console, run.fleet, run.session
    if run.reporter is not None:  # the exits of the shutdown are ours, not crashes
        run.reporter.stop()
    if fleet.workers:  # a fleet that failed to start has nothing of the kind to stop
        console.print("stopping: workers first (graceful), then runner, upstream, local AWS")
    t0 = time.monotonic()
    for line in fleet.stop_workers():
        console.print(f"  {escape(line)}")
    if session is not None and run.scenario and rc in (0, 1):
        try:
            session.tick_final()
        except Exception as exc:
            console.print(f"[yellow]final scan failed: {escape(str(exc))}[/]")
        rc = rc or verdict(console, session, run.incidents or [], fleet.run_dir, run.deploy)
    for line in fleet.close():
        console.print(f"  {escape(line)}")
    if run.env_file is not None:  # it names endpoints nothing serves any more
        run.env_file.unlink(missing_ok=True)
    console.print(f"stopped in {time.monotonic() - t0:.1f} s; logs in "
                  f"{escape(str(fleet.run_dir))}")
    return rc


@dataclass
class _Run:
    """What the shutdown needs to know about a run, whatever point it reached."""

    console: Console
    fleet: Fleet
    stop: threading.Event
    scenario: bool
    view: View | None = None
    session: Session | None = None
    incidents: list[Incident] | None = None
    reporter: PlatformReporter | None = None
    deploy: DeployReport | None = None
    env_file: Path | None = None  # --env-file: removed at the end, as the servers it names

    def reported(self, report: Report) -> None:
        """Say what the platform report did (from the reporter's thread)."""
        text = (f"platform: {report.worker_id} exited (code {report.exit_code}), reported "
                f"stopped in {report.took_s * 1000:.0f} ms: {report.text}")
        if self.session is not None:
            self.session.say(text, "cyan" if report.ok else "red")
        else:
            self.console.print(text)


def _drive(run: _Run, args: argparse.Namespace) -> None:
    """Upstream, workers, streams; then the scenario, or watch until Ctrl-C/SIGTERM."""
    fleet, console = run.fleet, run.console
    if args.url:
        base = args.url
        console.print(f"streams use your upstream: {escape(base)}")
    else:
        base = fleet.start_upstream()
        console.print(f"demo upstream {base} ({args.rate:g} msgs/s per stream)")
    version = OLD_VERSION if args.scenario == "deploy" else None
    for i in range(1, args.workers + 1):
        fleet.start_worker(f"w{i}", version=version)
    if args.platform_report:
        run.reporter = PlatformReporter(fleet, on_report=run.reported).start()
    console.print(f"{args.workers} workers (handler "
                  f"{escape(fleet.handler or 'the recorder alone')}); logs "
                  f"{escape(str(fleet.run_dir))}/worker-*.log")
    run.view = make_view(console, console.is_terminal and not args.plain)
    run.session = session = Session(fleet, run.view, run.stop,
                                    title=f"holdfast up ({fleet.run_dir})")
    if not session.wait_workers_ready():
        session.say("not every worker reported started within 30 s", "yellow")
    ids = session.create_streams(args.streams, base, spread_s=0.15)
    session.say(f"inserted {len(ids)} STARTED streams")
    if args.scenario not in ("failover", "deploy"):
        while True:
            session.sleep(1)
    counter = iter(range(args.workers + 1, 10_000))

    def start_worker(version: str | None = None) -> str:
        wid = f"w{next(counter)}"
        fleet.start_worker(wid, version=version)
        return wid

    if args.scenario == "deploy":
        run.deploy = run_deploy(session, ids, start_worker, style=args.deploy_style,
                                settle_s=args.settle)
        return
    run.incidents = failover(session, ids, base, start_worker,
                             platform_report=run.reporter is not None)


def _run_up(args: argparse.Namespace) -> int:
    if args.workers < 0 or args.streams < 0 or args.settle < 0 or not (
            args.rate > 0 and math.isfinite(args.rate)):  # nan passed "<= 0"
        print("holdfast up: --workers/--streams/--settle must be >= 0 and --rate > 0",
              file=sys.stderr)
        return 2
    if args.scenario and args.workers < 1:
        print("holdfast up: a scenario needs at least one worker", file=sys.stderr)
        return 2
    if args.url and not args.url.startswith(("ws://", "wss://")):
        print("holdfast up: --url must be a ws:// or wss:// URL template", file=sys.stderr)
        return 2
    if args.run_dir is not None and args.run_dir.exists() and any(args.run_dir.iterdir()):
        # Every log is appended to: an old run's lines would pass this run's readiness waits
        # and mix its seqs and connections into this verdict.
        print(f"holdfast up: --run-dir {args.run_dir} is not empty: give a new or empty folder",
              file=sys.stderr)
        return 2
    # The user's package: importable from where they run `holdfast up` (as `python -m` would).
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="holdfast-up-"))
    # Spans for a scenario's acquisition path only: a watch runs until Ctrl-C, and the
    # runner's polls alone wrote ~40 KB of spans a second (3 GB a day, often on a RAM /tmp).
    # Every child dies with this process (Linux): a SIGKILL or a crash of it left them all.
    fleet = Fleet(run_dir, FleetTiming(rate=args.rate), backend=args.backend,
                  handler=args.handler, pythonpath=[Path.cwd()] if args.handler else [],
                  trace_file=run_dir / SPANS_FILE if args.scenario else None,
                  die_with_parent=True)
    why = fleet.check_handler()
    if why:
        print(f"holdfast up: --handler {args.handler}: {why}", file=sys.stderr)
        return 2
    stop = threading.Event()
    _install_signals(stop)
    run_dir = fleet.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False)
    if not console.is_terminal:  # CI logs and pipes: wide enough for the summary table
        console = Console(highlight=False, width=120)
    console.print(f"run directory (logs, results): {escape(str(run_dir))}")
    run = _Run(console, fleet, stop, bool(args.scenario), env_file=args.env_file)
    rc = 0
    try:
        _start_base(console, run.fleet, args)
        if args.workers == 0 and args.streams == 0:
            rc = _env_only(console, run.fleet, stop)
        else:
            _drive(run, args)
    except Interrupted:
        rc = 130 if args.scenario else 0
    except ScenarioFailed as exc:
        console.print(f"[red]scenario failed: {escape(str(exc))}[/]")
        rc = 1
    except (LocalAwsError, FleetError) as exc:
        # Escaped: the message names extras (``".[local]"``), which markup would eat.
        console.print(f"[red]cannot start the fleet: {escape(str(exc))}[/]")
        rc = 3
    finally:
        if run.view is not None:
            run.view.close()
        rc = _shutdown(run, rc)
    if run.session is not None and run.session.crashes and rc == 0:
        rc = 1
    return rc


def _add_runner(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="passed to python -m holdfast.runner (try: holdfast runner --help)")


def _run_runner(args: argparse.Namespace) -> int:
    from holdfast.runner.__main__ import main as runner_main
    return runner_main(list(args.args))


FLEET_COMMANDS = {
    "up": ("run the local fleet: local AWS, runner, upstream, workers, demo streams",
           _add_up, _run_up),
    "runner": ("run the local router runner and sweeper (env from `holdfast localaws`)",
               _add_runner, _run_runner),
}
