"""The command that runs DynamoDB Local listening on 127.0.0.1 only.

DynamoDB Local's own command line (``java -jar DynamoDBLocal.jar``) has no host option: it
listens on every interface, so a local fleet's tables (and a test run's) would be open to the
machine's network. ``LoopbackDynamoDBLocal.java`` beside this module starts the same server
bound to 127.0.0.1. It is compiled once with the JDK's ``javac`` into the per-user cache, keyed
by its source and the jar's folder, so a start costs what ``-jar`` does (source-file launching
would compile it on every start, ~0.65 s more). Without a ``javac`` (a JRE only) the launcher
cannot be built: DynamoDB Local then runs as Amazon ships it, with a warning that says so.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from holdfast.localaws.dynamodb_local import JAVA_MIN, cache_dir

__all__ = ["LAUNCHER_CLASS", "LAUNCHER_SOURCE", "dynamodb_local_command", "find_javac",
           "launcher_dir"]

log = logging.getLogger(__name__)
LAUNCHER_CLASS: Final = "LoopbackDynamoDBLocal"
LAUNCHER_SOURCE: Final = Path(__file__).with_name(f"{LAUNCHER_CLASS}.java")


class _Unwritable(OSError):
    """The launcher's folder cannot be made (a read-only home): build it elsewhere."""


def find_javac(java: str) -> str | None:
    """The ``javac`` of the JDK ``java`` belongs to, else the one on PATH, else None."""
    beside = Path(os.path.realpath(java)).with_name("javac")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("javac")


def launcher_dir(jar_dir: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """Where the compiled launcher for this jar folder lives (its name changes with the
    launcher's source and the jar's folder, so a stale class is never run)."""
    key = hashlib.sha256(LAUNCHER_SOURCE.read_bytes()
                         + str(jar_dir.resolve()).encode()).hexdigest()[:16]
    return cache_dir(environ).parent / f"loopback-launcher-{key}"


def _compile(javac: str, jar: Path, target: Path) -> str | None:
    """Compile the launcher into ``target``; None, or why it could not be. ``_Unwritable``
    if ``target``'s folder cannot be made."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    except OSError as exc:
        raise _Unwritable(f"cannot write {target.parent}: {exc}") from exc
    try:
        proc = subprocess.run(
            # The jar's manifest names its libraries (Jetty among them): javac follows it.
            [javac, "--release", str(JAVA_MIN), "-cp", str(jar), "-d", str(building),
             str(LAUNCHER_SOURCE)],
            capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            return f"javac failed (exit {proc.returncode}): {proc.stderr.strip()[-1000:]}"
        try:
            building.rename(target)  # whole or not at all: a concurrent start may race us
        except OSError:
            if not (target / f"{LAUNCHER_CLASS}.class").is_file():
                raise
        return None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"javac could not run: {exc}"
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(building)


@functools.cache  # once a process: a server started again on another port reuses it
def _build(javac: str, jar: Path, cached: Path) -> tuple[Path, str | None]:
    """Build the launcher in the cache (``cached``) or, with no usable cache (a read-only
    home), for this start alone in a temp dir removed when this process exits (DynamoDB
    Local, its child, with it): where it was built, and None or why it could not be."""
    try:
        return cached, _compile(javac, jar, cached)
    except _Unwritable:
        pass
    try:
        scratch = tempfile.mkdtemp(prefix="holdfast-launcher-")
        atexit.register(functools.partial(shutil.rmtree, scratch, ignore_errors=True))
        built = Path(scratch) / "classes"
        return built, _compile(javac, jar, built)
    except OSError as exc:  # no temp dir either (``_Unwritable`` is one)
        return cached, f"cannot write a temp dir: {exc}"


def dynamodb_local_command(java: str, jar_dir: Path, port: int,
                           environ: Mapping[str, str] = os.environ) -> list[str]:
    """The argv that runs DynamoDB Local (in memory, one shared database, no telemetry) on
    ``port``: on 127.0.0.1 only when the launcher is or can be built."""
    jar = jar_dir / "DynamoDBLocal.jar"
    # -disableTelemetry: without it DynamoDB Local tries to reach the internet.
    # -sharedDb: otherwise it keeps one database per access key and region, and a client
    # with other (dummy) credentials would find no table.
    options = ["-inMemory", "-sharedDb", "-disableTelemetry", "-port", str(port)]
    # The JVM's default compilers, though the optimising one's threads take CPU for the first
    # minutes of a fleet (a young fleet's 30-stream start burst: claims 90-160 ms p50 with
    # -XX:TieredStopAtLevel=1, 210-280 ms without): once compiled, a checkpoint of 600 leases
    # in PartiQL batches takes 376 ms, against 627 ms with the client compiler only. (The test
    # suite's short-lived instances take the client compiler only: tests/conftest.py.)
    jvm = [java, "-Xms64m", f"-Djava.library.path={jar_dir / 'DynamoDBLocal_lib'}"]
    built, problem = launcher_dir(jar_dir, environ), None
    if not (built / f"{LAUNCHER_CLASS}.class").is_file():
        javac = find_javac(java)
        if javac is None:
            problem = "no javac beside java or on PATH (a JRE only)"
        else:
            built, problem = _build(javac, jar, built)
    if problem is None:
        return [*jvm, "-cp", os.pathsep.join((str(built), str(jar))), LAUNCHER_CLASS, *options]
    log.warning("DynamoDB Local will listen on every interface, not only 127.0.0.1: its loopback "
                "launcher could not be built (%s); install a JDK 17+ to keep it local", problem)
    return [*jvm, "-jar", str(jar), *options]
