"""Exceptions of the worker. Lease outcomes come from ``holdfast.core.exceptions``.

    HoldfastError (holdfast.core)
    ├── ConfigError (holdfast.core)   a setting is missing or out of range
    │   └── HandlerLoadError          HOLDFAST_HANDLER / HOLDFAST_PROTOCOL cannot be loaded
    └── WorkerError
        ├── UpstreamError             one connection attempt failed (retried with back-off)
        └── StreamFenced              the lease could not be renewed in time: stop now
"""

from __future__ import annotations

from holdfast.core.exceptions import ConfigError, HoldfastError

__all__ = ["HandlerLoadError", "StreamFenced", "UpstreamError", "WorkerError"]


class HandlerLoadError(ConfigError):
    """A plug-in named in the environment cannot be imported or is not usable."""


class WorkerError(HoldfastError):
    """Base class of errors raised inside the worker."""


class UpstreamError(WorkerError):
    """One attempt to connect to or read from the upstream failed; the message is log-safe."""


class StreamFenced(WorkerError):
    """The lease passed its fence deadline without a renewal: the stream must stop at once."""
