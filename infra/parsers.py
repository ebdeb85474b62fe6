"""Parsers of CDK context values: each takes the key (for its message) and the raw value, which
is typed JSON from ``cdk.json`` or a string from ``cdk deploy -c key=value``, and returns the
value or raises ``SettingsError`` naming the key and what is allowed. Also the check of the
context's keys themselves (``check_key_spelling``).

No ``aws_cdk`` import here: settings are tested in milliseconds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import field
from typing import Any, Final

from holdfast.core.exceptions import ConfigError
from holdfast.infra.exceptions import SettingsError

__all__ = ["IMAGE_URI_RE", "LAYER_ARN_RE", "MAX_PORTS", "boolean", "check_key_spelling", "choice",
           "context_keys", "image_uri", "int_in", "layer_arn", "matching", "setting", "tcp_ports",
           "tracing_mode", "worker_check"]

# Upstream ports the workers may dial: each is one egress rule of a security group (60 max).
MAX_PORTS: Final = 20
# A CDK token (``Token.as_string(...)``, an ECR repository's URI given as a prop) is resolved
# only at deploy: ``matching(..., tokens=True)`` passes a value holding one on unchecked.
_TOKEN: Final = "${Token["
# An image reference as Docker reads it, at most 255 characters (ECS's limit):
# [registry[:port]/]path/repository[:tag][@algorithm:digest], the path in lowercase.
_LABEL: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PART: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_URI_RE: Final = re.compile(
    rf"^(?=.{{1,255}}\Z)(?:(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?/)?"
    rf"{_PART}(?:/{_PART})*(?::\w[\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?\Z", re.ASCII)
# A Lambda layer version ARN, as the Lambda API's pattern has it (at most 140 characters).
LAYER_ARN_RE: Final = re.compile(
    r"^(?=.{1,140}\Z)arn:[a-zA-Z0-9-]+:lambda:[a-zA-Z0-9-]+:\d{12}:layer:[a-zA-Z0-9_-]+:\d+\Z",
    re.ASCII)


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


def matching(pattern: re.Pattern[str], what: str, *,
             tokens: bool = False) -> Callable[[str, Any], str | None]:
    """A value ``pattern`` matches (``what`` says it in words); with ``tokens``, also any
    value holding a CDK token (a prop resolved at deploy)."""
    def parse(key: str, raw: Any) -> str | None:
        value = str(raw).strip()
        if value == "":
            return None  # `-c key=` clears an optional setting
        if not pattern.match(value) and not (tokens and _TOKEN in value):
            raise SettingsError(f"{key}={raw!r}: expected {what}")
        return value
    return parse


image_uri: Final = matching(
    IMAGE_URI_RE, "an image URI, [registry[:port]/]repository[:tag][@sha256:digest], the "
    "repository in lowercase, at most 255 characters", tokens=True)
layer_arn: Final = matching(
    LAYER_ARN_RE, "a Lambda layer version ARN, "
    "arn:aws:lambda:<region>:<12-digit account>:layer:<name>:<version>", tokens=True)


def worker_check(variable: str, check: Callable[[Mapping[str, str]], object],
                 shape: str) -> Callable[[str, Any], str | None]:
    """Text the stack gives the worker as ``variable``, checked at synth by ``check``, the
    worker's own reading of it from its environment (``ConfigError`` or ``ValueError``): a
    value it refuses would otherwise surface as tasks failing at start, at deploy."""
    def parse(key: str, raw: Any) -> str | None:
        value = str(raw).strip()
        if value and _TOKEN not in value:
            try:
                check({variable: value})
            except (ConfigError, ValueError) as exc:
                raise SettingsError(f"{key}={raw!r}: expected {shape}; the worker would refuse "
                                    f"it at start ({exc})") from None
        return value or None
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


def context_keys(lookup: Callable[[str], Any]) -> list[str]:
    """The keys of the context ``lookup`` reads: a CDK node's ``try_get_context`` (the node's
    ``get_all_context``) or a mapping's ``get``; none known for any other callable."""
    owner = getattr(lookup, "__self__", None)
    if isinstance(owner, Mapping):
        return [str(key) for key in owner]
    every = getattr(owner, "get_all_context", None)
    return [str(key) for key in every() or {}] if callable(every) else []


def check_key_spelling(given: Iterable[str], known: Collection[str]) -> None:
    """Refuse each key of ``given`` not in ``known`` but close to one of them (case aside:
    ``minTask``, ``MinTasks``, ``min_tasks``): CDK would pass it on unread, and the setting
    meant would silently keep its default. Any other key is the app's own; keys with ``:`` or
    ``@`` (CDK's feature flags and lookups) are never considered."""
    ours = {key.lower(): key for key in known}
    wrong: list[str] = []
    for key in given:
        if key in known or ":" in key or "@" in key:
            continue
        close = difflib.get_close_matches(key.lower(), ours, n=1, cutoff=0.8)
        if close:
            wrong.append(f"unknown context key {key!r}: did you mean {ours[close[0]]!r}?")
    if wrong:
        raise SettingsError("; ".join(wrong))


def setting(default: Any, parse: Callable[[str, Any], Any], doc: str) -> Any:
    return field(default=default, metadata={"parse": parse, "doc": doc})
