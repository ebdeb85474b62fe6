"""The fleet's processes: local AWS, runner, upstream and workers, started and stopped in order.

Every child runs in a session of its own, so a Ctrl-C in the terminal reaches only ``holdfast
up``, which then stops the children itself in order: workers first (gracefully, so they release
their leases), then the runner, the upstream, and the local AWS. Output goes to log files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from holdfast.core import names
from holdfast.core.boto import new_session
from holdfast.fleet.recorder import RECORD_DIR_ENV, RECORD_WRAPS_ENV, RECORDER_SPEC
from holdfast.fleet.timing import FleetTiming
from holdfast.localaws import LocalAws
from holdfast.localaws.processes import _die_with_parent, listen_on_free_port
from holdfast.localaws.stack import write_env_file

__all__ = ["REPO_ROOT", "Fleet", "Proc", "client_for_env"]

REPO_ROOT = Path(__file__).resolve().parents[2]
# The children import holdfast from wherever this process did; a checkout's root also goes on
# their path (its tests/ and bench/ hold handlers), a site-packages folder does not.
_CHECKOUT_PATH: tuple[str, ...] = (str(REPO_ROOT),) if (REPO_ROOT / "pyproject.toml").is_file() \
    else ()


@dataclass
class Proc:
    """One child process with its log file; ``expected_exit`` is set when we stop it."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    expected_exit: bool = False
    reported: bool = False
    termed: bool = False  # a second SIGTERM makes a worker exit at once: send only one
    paused: bool = False  # SIGSTOPped and not yet SIGCONTed: alive but silent, not stopping
    die_with_parent: bool = False  # Linux: SIGTERMed if the parent dies, even by SIGKILL
    started_at: float = field(default_factory=time.monotonic)
    _log: IO[bytes] | None = None

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env,
                                     start_new_session=True,
                                     # Only a prctl call runs between fork and exec.
                                     preexec_fn=_die_with_parent  # noqa: PLW1509
                                     if self.die_with_parent else None)
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if sig == signal.SIGTERM:
            if self.termed:
                return
            self.termed = True
        if sig in (signal.SIGSTOP, signal.SIGCONT):
            self.paused = sig == signal.SIGSTOP
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM, wait ``timeout_s``, then SIGKILL; the exit code (negative: a signal)."""
        self.expected_exit = True
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()
        if self._log:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def tail(self, lines: int = 8) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def worker_started(self) -> bool:
        """A worker: True once its log holds its "worker started" line (False: no log yet)."""
        try:
            return b'"worker started"' in self.log_path.read_bytes()
        except OSError:
            return False

    def crash_line(self) -> str:
        """A child that exited on its own: its name, exit code, log file and the log's tail."""
        return (f"{self.name} exited on its own with code {self.returncode()} (log "
                f"{self.log_path}):\n{self.tail()}")


def client_for_env(env: Mapping[str, str], service: str, *, read_timeout: float = 5,
                   retries: int = 3) -> Any:
    """A boto3 client on the local AWS that ``env`` names (its endpoints and credentials),
    not this process's environment, which may point elsewhere."""
    from holdfast.core.aws import client_config

    key = "AWS_ENDPOINT_URL_SQS" if service == "sqs" else "AWS_ENDPOINT_URL_DYNAMODB"
    session: Any = new_session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"])
    return session.client(service, endpoint_url=env[key],
                          config=client_config(read_timeout=read_timeout,
                                               retries=retries))


class FleetError(RuntimeError):
    """A part of the fleet did not start; the message names it and its log."""


class Fleet:
    """Owns every process of one ``holdfast up`` run; ``close()`` stops them in order."""

    def __init__(self, run_dir: Path, timing: FleetTiming, *, backend: str = "auto",
                 handler: str | None = None, pythonpath: Sequence[Path] = (),
                 worker_env: Mapping[str, str] | None = None,
                 die_with_parent: bool = False, trace_file: Path | None = None) -> None:
        self.run_dir = run_dir
        # Every child (workers, and the runner for the router's spans) appends its spans here.
        self.trace_file = trace_file
        self.timing = timing
        self.backend = backend
        # The user's handler (``package.module:function``), wrapped by the recorder; None: the
        # recorder alone. ``pythonpath``: where children import it from (after our own code).
        self.handler = handler
        self.pythonpath = [Path(p).resolve() for p in pythonpath]
        self.worker_env = dict(worker_env or {})
        self.die_with_parent = die_with_parent
        self.aws: LocalAws | None = None
        self.runner: Proc | None = None
        self.upstream: Proc | None = None
        self.upstream_port = 0
        self.workers: dict[str, Proc] = {}
        self.env: dict[str, str] = {}
        self.record_dir = run_dir / "handled"
        self.conn_log = run_dir / "upstream-connections.jsonl"

    def _child_env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {**os.environ, **self.env, **extra}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (*_CHECKOUT_PATH, *map(str, self.pythonpath),
                        os.environ.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        if self.trace_file is not None:
            env[names.ENV_TRACING] = "file"
            env[names.ENV_TRACE_FILE] = str(self.trace_file)
        return env

    def start_aws(self) -> None:
        self.aws = LocalAws(backend=self.backend,  # type: ignore[arg-type]
                            workdir=self.run_dir / "localaws")
        self.aws.start()
        self.env = {**self.aws.env(), **self.timing.runner_env(), **self.timing.worker_env()}

    def check_handler(self) -> str | None:
        """Why ``handler`` cannot be loaded in a worker (None: it can), tried in a child with
        the workers' import path and the worker's own loader, before anything starts."""
        if not self.handler:
            return None
        code = ("import sys\nfrom holdfast.worker.handler import load_handler\n"
                "try:\n    load_handler(sys.argv[1])\n"
                "except Exception as exc:\n    print(exc)\n    sys.exit(1)\n")
        # A worker imports the handler with the local AWS's settings: a module that makes a
        # client at import needs its region. Before the local AWS runs, its placeholders (no
        # call made at import reaches real AWS from here either).
        env = self._child_env({**(self.env or LocalAws.placeholder_env()), **self.worker_env})
        proc = subprocess.run([sys.executable, "-c", code, self.handler], env=env,
                              capture_output=True, text=True, timeout=60,
                              check=False)
        if proc.returncode == 0:
            return None
        why = (proc.stdout.strip() or proc.stderr.strip()[-2000:]).splitlines()[-1:] or ["?"]
        if "ModuleNotFoundError" not in why[0]:  # found, and its import or lookup failed
            return why[0]
        where = ", ".join(str(p) for p in self.pythonpath) or "-"
        return (f"{why[0]} (searched: {where}, then the environment of {sys.executable}; "
                f"run from the directory that holds the package, or install it there)")

    def start_runner(self) -> None:
        self.runner = self._proc("runner", [sys.executable, "-m", "holdfast.runner"],
                                 self.run_dir / "runner.log", {}).start()

    def _proc(self, name: str, argv: list[str], log_path: Path, extra: dict[str, str]) -> Proc:
        return Proc(name, argv, log_path, self._child_env(extra),
                    die_with_parent=self.die_with_parent)

    def start_upstream(self) -> str:
        def start(port: int) -> Proc:
            if self.upstream is not None:  # an earlier try, dead: its log closed
                self.upstream.stop(0)
            self.upstream = self._proc("upstream", [
                sys.executable, "-m", "holdfast.cli.main", "upstream", "--port", str(port),
                "--rate", f"{self.timing.rate:g}", "--conn-log", str(self.conn_log)],
                self.run_dir / "upstream.log", {}).start()
            return self.upstream

        upstream, self.upstream_port, up = listen_on_free_port(start, lambda p: p.proc, 20)
        if not up:
            raise FleetError(f"the demo upstream did not start; see {upstream.log_path}:\n"
                             f"{upstream.tail()}")
        return f"ws://127.0.0.1:{self.upstream_port}"

    def start_worker(self, worker_id: str, *, version: str | None = None) -> Proc:
        """Start a worker; ``version``: its ``HOLDFAST_WORKER_VERSION`` (a deploy's old or new)."""
        # The recorder always runs, wrapping the user's handler if there is one: the missed-seq
        # check sees every message the user's code saw.
        proc = self._proc(worker_id, [sys.executable, "-m", "holdfast.worker"],
                          self.run_dir / f"worker-{worker_id}.log", {
                              **self.worker_env, "HOLDFAST_WORKER_ID": worker_id,
                              "HOLDFAST_HANDLER": RECORDER_SPEC,
                              RECORD_WRAPS_ENV: self.handler or "",
                              RECORD_DIR_ENV: str(self.record_dir),
                              **({names.ENV_WORKER_VERSION: version} if version else {})}).start()
        self.workers[worker_id] = proc
        return proc

    def write_env(self, path: Path) -> None:
        """The environment a worker (or the CLI) needs, as a shell-sourceable file."""
        write_env_file(path, self.env)

    def worker_log_lines(self) -> list[str]:
        """Every line every worker of the run has logged so far (unreadable logs left out)."""
        lines: list[str] = []
        for proc in self.workers.values():
            try:
                lines += proc.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
        return lines

    def crashed(self) -> list[Proc]:
        """Children that exited on their own since the last call (each reported once)."""
        out = []
        for proc in [*self.workers.values(), self.runner, self.upstream]:
            if proc and not proc.expected_exit and not proc.reported and not proc.alive():
                proc.reported = True
                out.append(proc)
        return out

    def stop_workers(self) -> list[str]:
        """SIGTERM every live worker at once (graceful stops run in parallel), then reap."""
        lines: list[str] = []
        live = [w for w in self.workers.values() if w.alive()]
        for w in live:  # all at once: graceful stops run in parallel
            w.expected_exit = True
            w.signal(signal.SIGTERM)
        for w in live:
            code = w.stop(self.timing.shutdown_s + 3)
            lines.append(f"worker {w.name} stopped (exit {code})")
        for w in self.workers.values():
            w.stop(0)  # already exited ones: close their log files
        return lines

    def close(self) -> list[str]:
        """Stop everything, workers first; one line per child saying how it ended."""
        lines = self.stop_workers()
        for proc in (self.runner, self.upstream):
            if proc is not None and proc.proc is not None:
                was_alive = proc.alive()
                code = proc.stop(10)
                lines.append(f"{proc.name} stopped (exit {code})" if was_alive else
                             f"{proc.name} had already exited (code {code})")
        if self.aws is not None:
            self.aws.stop()
            lines.append("local AWS stopped")
        return lines
