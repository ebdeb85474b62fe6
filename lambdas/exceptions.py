"""Exceptions of ``lambdas``; configuration problems use ``holdfast.core``'s ``ConfigError``.

    HoldfastError (holdfast.core)
    └── LambdaError
        └── NudgeNotSent   a record's nudge (or its normalisation) failed after retries;
                           BatchProcessor reports the record so Lambda retries it
"""

from __future__ import annotations

from holdfast.core.exceptions import HoldfastError

__all__ = ["LambdaError", "NudgeNotSent"]


class LambdaError(HoldfastError):
    """Base class of errors raised inside Holdfast's Lambda functions."""


class NudgeNotSent(LambdaError):
    """The nudge of one stream record could not be delivered (or its item not normalised)."""

    def __init__(self, conn_id: str, detail: str) -> None:
        super().__init__(f"nudge for {conn_id!r} not sent: {detail}")
        self.conn_id = conn_id
        self.detail = detail
