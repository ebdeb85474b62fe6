"""Exceptions of ``infra``.

    holdfast.core.exceptions.ConfigError
    └── SettingsError      a CDK context value is missing, malformed or out of range
"""

from __future__ import annotations

from holdfast.core.exceptions import ConfigError

__all__ = ["SettingsError"]


class SettingsError(ConfigError):
    """A context setting is invalid; the message names the key, the value and what is allowed."""
