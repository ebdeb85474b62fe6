"""The Lambda code asset: ``holdfast.lambdas`` and ``holdfast.core`` from the installed package.

A plain directory asset (no Docker, no pip): boto3 comes with the Lambda runtime and Powertools
from the AWS-managed layer, so the only code to ship is ours. It is staged from wherever the
``holdfast`` package is imported from (a checkout, where ``holdfast/lambdas`` is a link to the
repository's ``lambdas/`` folder, or a user's site-packages), copying an allow-list — the
package's ``__init__``, ``core`` and ``lambdas`` — so nothing else (the worker, the CLI, the
construct itself) can leak into the function package. The asset's hash is its content's, so
the same code gives the same asset wherever it is staged.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Final

from aws_cdk import aws_lambda as lambda_

import holdfast

__all__ = ["LAMBDA_ASSET_PARTS", "PACKAGE_ROOT", "lambda_code", "stage_lambda_code"]

PACKAGE_ROOT: Final = Path(holdfast.__file__).resolve().parent

# What the Lambdas import, relative to the package: the handlers are under ``lambdas``.
LAMBDA_ASSET_PARTS: Final = ("__init__.py", "core", "lambdas")
_NEVER: Final = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", "test_*.py")


def stage_lambda_code(into: Path, package: Path = PACKAGE_ROOT) -> Path:
    """Copy the allow-listed parts of ``package`` to ``into/holdfast``; returns ``into``."""
    target = into / "holdfast"
    target.mkdir(parents=True, exist_ok=True)
    for part in LAMBDA_ASSET_PARTS:
        source = (package / part).resolve()  # through the checkout's links
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=_NEVER, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target / part)
    return into


def lambda_code(package: Path = PACKAGE_ROOT) -> lambda_.Code:
    """The asset all Lambdas run from (handlers ``holdfast.lambdas.<name>.handler...``)."""
    staged = stage_lambda_code(Path(tempfile.mkdtemp(prefix="holdfast-lambda-")), package)
    # The synth copies it into the cloud assembly; the staging folder itself is scratch.
    atexit.register(shutil.rmtree, staged, True)
    return lambda_.Code.from_asset(str(staged))
