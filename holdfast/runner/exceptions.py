"""Exceptions of ``holdfast.runner``.

    HoldfastError (holdfast.core)
    └── RunnerError
        ├── PatternError     a filter pattern uses syntax the local matcher does not implement
        └── ChangesNotFound  the table has no enabled DynamoDB Streams to read
"""

from __future__ import annotations

from holdfast.core.exceptions import HoldfastError

__all__ = ["ChangesNotFound", "PatternError", "RunnerError"]


class RunnerError(HoldfastError):
    """Base class of the local runner's errors."""


class PatternError(RunnerError):
    """A filter pattern is invalid, or uses an operator the local matcher does not know."""


class ChangesNotFound(RunnerError):
    """The table has no DynamoDB Streams (or they are disabled); the message names the table."""
