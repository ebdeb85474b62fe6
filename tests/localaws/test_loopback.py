"""DynamoDB Local listens on 127.0.0.1 only, through a launcher built once per jar."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from holdfast.localaws import LocalAws, loopback
from holdfast.localaws.dynamodb_local import find_dynamodb_local
from holdfast.localaws.loopback import LAUNCHER_CLASS, dynamodb_local_command, launcher_dir
from tests.listening import descendants, listening_addresses

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
def test_the_local_aws_listens_on_loopback_only(ddb_local: LocalAws) -> None:
    """DynamoDB Local and moto accept on 127.0.0.1 and nowhere else (DynamoDB Local's own
    command line listened on every interface)."""
    listening = listening_addresses(descendants(os.getpid()))
    for url in (ddb_local.dynamodb_url, ddb_local.sqs_url):
        port = urlsplit(url).port
        assert port is not None
        assert listening.get(port) == {"127.0.0.1"}, (url, listening.get(port))


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    return java


def _jar_dir() -> Path:
    jar_dir = find_dynamodb_local()
    if jar_dir is None:
        pytest.skip("DynamoDB Local is not installed")
    return jar_dir


def test_the_launcher_is_compiled_once_per_jar(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The first command compiles the launcher into the cache; later ones run the cached
    class without javac (a start costs what -jar does)."""
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    java = _java()
    argv = dynamodb_local_command(java, _jar_dir(), 8000, env)
    built = launcher_dir(_jar_dir(), env)
    assert (built / f"{LAUNCHER_CLASS}.class").is_file()
    assert argv[argv.index("-cp") + 1].split(os.pathsep)[0] == str(built)
    assert argv[-6:] == [LAUNCHER_CLASS, "-inMemory", "-sharedDb", "-disableTelemetry",
                         "-port", "8000"]
    monkeypatch.setattr(loopback, "find_javac", lambda _java: pytest.fail("compiled again"))
    assert dynamodb_local_command(java, _jar_dir(), 8000, env) == argv
    assert not [p for p in tmp_path.rglob(".building-*")]


@pytest.mark.parametrize("javac", [None, "/bin/false"])
def test_without_a_launcher_it_says_it_listens_everywhere(
        javac: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """No javac (a JRE), or one that fails: DynamoDB Local runs as shipped, with a warning that
    names why and what to install."""
    monkeypatch.setattr(loopback, "find_javac", lambda _java: javac)
    with caplog.at_level(logging.WARNING, logger=loopback.__name__):
        argv = dynamodb_local_command("java", _jar_dir(), 8000, {"XDG_CACHE_HOME": str(tmp_path)})
    assert argv[argv.index("-jar") + 1].endswith("DynamoDBLocal.jar")
    assert "every interface" in caplog.text and "JDK" in caplog.text
    assert ("a JRE only" if javac is None else "javac failed (exit 1)") in caplog.text


def test_an_unwritable_cache_builds_the_launcher_for_this_start_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache cannot be written (a read-only home): the launcher is built in a temp dir for
    this start, still bound to loopback, not run as shipped on every interface; the temp dir
    is removed when the process exits."""
    at_exit: list[Callable[[], object]] = []
    monkeypatch.setattr(loopback.atexit, "register", at_exit.append)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")  # the cache's parent is a file: nothing can be made under it
    argv = dynamodb_local_command(_java(), _jar_dir(), 8000,
                                  {"XDG_CACHE_HOME": str(blocked)})
    assert LAUNCHER_CLASS in argv and "-jar" not in argv
    classes = Path(argv[argv.index("-cp") + 1].split(os.pathsep)[0])
    assert (classes / f"{LAUNCHER_CLASS}.class").is_file() and blocked not in classes.parents
    assert len(at_exit) == 1
    at_exit[0]()
    assert not classes.parent.exists()
