"""Exceptions of the worker. Lease outcomes come from ``holdfast.core.exceptions``.

    HoldfastError (holdfast.core)
    └── ConfigError (holdfast.core)   a setting is missing or out of range
        └── HandlerLoadError          HOLDFAST_HANDLER / HOLDFAST_PROTOCOL cannot be loaded

Upstream failures are the ``websockets`` and ``OSError`` exceptions themselves: the stream task
turns them into reconnects and, after too many, into a give-up recorded on the lease item.
"""

from __future__ import annotations

from holdfast.core.exceptions import ConfigError

__all__ = ["HandlerLoadError"]


class HandlerLoadError(ConfigError):
    """A plug-in named in the environment cannot be imported or is not usable."""
