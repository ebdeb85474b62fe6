"""The type-check's configuration: mypy follows every CDK module our code imports."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cdk_modules_imported() -> set[str]:
    """Every ``aws_cdk`` module imported by the code mypy checks (``from aws_cdk import
    aws_x as y`` names a module; ``from aws_cdk import Duration`` the root)."""
    files = [*(REPO / "infra").glob("*.py"), REPO / "holdfast" / "cdk.py",
             REPO / "examples" / "transcripts" / "app.py",
             *(REPO / "examples" / "transcripts" / "transcripts").glob("*.py")]
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == "aws_cdk"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aws_cdk"):
                module = str(node.module)
                found.add(module)
                found |= {f"{module}.{a.name}" for a in node.names if a.name.startswith("aws_")}
    return found


def test_mypy_follows_every_cdk_module_we_import() -> None:
    """``aws_cdk.*`` is skipped for speed except the modules we use: a module imported and not
    listed would be Any to mypy, its calls unchecked."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    followed: set[str] = set()
    skipped: set[str] = set()
    for override in config["overrides"]:
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        if override.get("follow_imports") == "normal":
            followed |= set(modules)
        elif override.get("follow_imports") == "skip":
            skipped |= set(modules)
    assert "aws_cdk.*" in skipped
    imported = _cdk_modules_imported()
    assert {"aws_cdk", "aws_cdk.aws_ecs", "aws_cdk.aws_dynamodb"} <= imported
    assert imported - followed == set()
