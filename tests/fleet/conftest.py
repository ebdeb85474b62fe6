"""The fleet tests' ``holdfast_fleet`` runs ``tests.fleet.user_handler:handle``, as a user's
suite would run its own handler (the plugin is the same one users get)."""

from __future__ import annotations

import pytest

from holdfast.fleet.procs import REPO_ROOT
from holdfast.testing import FleetOptions


@pytest.fixture(scope="session")
def holdfast_options() -> FleetOptions:
    """Two workers running the stand-in user handler, imported from the repo root."""
    return FleetOptions(handler="tests.fleet.user_handler:handle", workers=2,
                        pythonpath=(REPO_ROOT,))
