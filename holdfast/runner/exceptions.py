"""Exceptions of ``holdfast.runner``.

    HoldfastError (holdfast.core)
    └── RunnerError
        ├── PatternError     a filter pattern uses syntax the local matcher does not implement
        └── StreamNotFound   the table has no enabled stream to read
"""

from __future__ import annotations

from holdfast.core.exceptions import HoldfastError

__all__ = ["PatternError", "RunnerError", "StreamNotFound"]


class RunnerError(HoldfastError):
    """Base class of the local runner's errors."""


class PatternError(RunnerError):
    """A filter pattern is invalid, or uses an operator the local matcher does not know."""


class StreamNotFound(RunnerError):
    """The table has no stream (or it is disabled); the message names the table."""
