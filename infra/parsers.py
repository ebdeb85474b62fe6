"""Parsers of CDK context values: each takes the key (for its message) and the raw value, which
is typed JSON from ``cdk.json`` or a string from ``cdk deploy -c key=value``, and returns the
value or raises ``SettingsError`` naming the key and what is allowed.

No ``aws_cdk`` import here: settings are tested in milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import field
from typing import Any, Final

from holdfast.infra.exceptions import SettingsError

__all__ = ["MAX_PORTS", "boolean", "choice", "int_in", "matching", "setting", "tcp_ports", "text",
           "tracing_mode"]

# Upstream ports the workers may dial: each is one egress rule of a security group (60 max).
MAX_PORTS: Final = 20


def int_in(lo: int, hi: int) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        if isinstance(raw, bool):
            raise SettingsError(f"{key}={raw!r}: expected an integer in [{lo}, {hi}]")
        try:
            value = raw if isinstance(raw, int) else int(str(raw).strip(), 10)
        except ValueError:
            raise SettingsError(f"{key}={raw!r}: expected an integer in [{lo}, {hi}]") from None
        if not lo <= value <= hi:
            raise SettingsError(f"{key}={value}: must be between {lo} and {hi}")
        return value
    return parse


def boolean(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SettingsError(f"{key}={raw!r}: expected true or false")


def tracing_mode(key: str, raw: Any) -> str:
    """``off`` or ``xray``; the old boolean values still work: true = xray, false = off."""
    text = str(raw).strip().lower()
    if isinstance(raw, bool) or text in ("true", "false", "1", "0", "yes", "no"):
        return "xray" if boolean(key, raw) else "off"
    if text not in ("off", "xray"):
        raise SettingsError(f"{key}={raw!r}: expected off or xray (true/false also accepted)")
    return text


def choice(*allowed: str) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in allowed:
            raise SettingsError(f"{key}={raw!r}: expected one of {', '.join(allowed)}")
        return value
    return parse


def matching(pattern: re.Pattern[str], what: str) -> Callable[[str, Any], str | None]:
    def parse(key: str, raw: Any) -> str | None:
        value = str(raw).strip()
        if value == "":
            return None  # `-c key=` clears an optional setting
        if not pattern.match(value):
            raise SettingsError(f"{key}={raw!r}: expected {what}")
        return value
    return parse


def tcp_ports(key: str, raw: Any) -> tuple[int, ...]:
    """``443``, ``"443,8443"`` or ``[443, 8443]``: distinct TCP ports, at most ``MAX_PORTS``."""
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    ports: list[int] = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not text.isdigit() or not 1 <= int(text) <= 65535:
            raise SettingsError(f"{key}={raw!r}: expected TCP ports 1-65535, comma-separated")
        if int(text) not in ports:
            ports.append(int(text))
    if not 1 <= len(ports) <= MAX_PORTS:
        raise SettingsError(f"{key}={raw!r}: expected 1 to {MAX_PORTS} ports")
    return tuple(ports)


def text(key: str, raw: Any) -> str | None:
    value = str(raw).strip()
    return value or None


def setting(default: Any, parse: Callable[[str, Any], Any], doc: str) -> Any:
    return field(default=default, metadata={"parse": parse, "doc": doc})
