"""The Lambda code asset: ``lambdas/`` and ``holdfast/core`` from this repository, nothing else.

A plain directory asset (no Docker, no pip): boto3 comes with the Lambda runtime and Powertools
from the AWS-managed layer, so the only code to ship is ours. The excludes are an allow-list —
ignore everything, then re-include the two trees — so a new top-level folder (a virtualenv, a
benchmark dump) can never leak into the function package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from aws_cdk import IgnoreMode
from aws_cdk import aws_lambda as lambda_

__all__ = ["LAMBDA_ASSET_EXCLUDES", "REPO_ROOT", "lambda_code"]

REPO_ROOT: Final = Path(__file__).resolve().parent.parent

# Glob semantics (later patterns win; ``*`` matches a name at any depth).
LAMBDA_ASSET_EXCLUDES: Final = (
    "*",
    ".*",  # ``*`` does not match dot-files and dot-folders (.git, .venv, caches)
    "!lambdas",
    "!lambdas/**",
    "!holdfast",
    "!holdfast/__init__.py",
    "!holdfast/core",
    "!holdfast/core/**",
    # Never ship bytecode or tests that happen to live next to the code.
    "**/__pycache__",
    "**/*.pyc",
    "**/tests",
    "**/test_*.py",
)


def lambda_code(root: Path = REPO_ROOT) -> lambda_.Code:
    """The asset both Lambdas run from (handlers ``lambdas.<name>.handler.lambda_handler``)."""
    return lambda_.Code.from_asset(str(root), exclude=list(LAMBDA_ASSET_EXCLUDES),
                                   ignore_mode=IgnoreMode.GLOB)
