"""Exceptions of the chaos package.

    ChaosError
     └── SoakAborted   the fleet could not start or settle: no verdict possible
"""

from __future__ import annotations

__all__ = ["ChaosError", "SoakAborted"]


class ChaosError(Exception):
    """Base of the chaos package's errors."""


class SoakAborted(ChaosError):
    """The soak could not run far enough to judge the invariants; the message says why."""
