"""The kinds of setting the schema (``holdfast.core.settings``) is made of: how each parses,
checks and describes one ``HOLDFAST_*`` variable. Standard library only (see the schema)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from holdfast.core.exceptions import ConfigError

__all__ = ["Choice", "Flag", "Integer", "Number", "Setting", "Text"]

_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off")


def _number(value: float) -> str:
    """Whole numbers in full (2**63 is not 9.22337e+18), others as short as exact."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One variable: what every kind shares."""

    kind: ClassVar[str] = "text"
    name: str
    doc: str
    readers: tuple[str, ...]
    unit: str = ""
    required_by: tuple[str, ...] = ()  # components that refuse to start without it
    default_doc: str = ""  # a default worked out from other values, in words

    def raw(self, env: Mapping[str, str]) -> str | None:
        """The value stripped; None if unset or blank."""
        return (env.get(self.name) or "").strip() or None

    def shown_default(self) -> str:
        return self.default_doc or "-"

    def limits(self) -> str:
        return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Number(Setting):
    kind: ClassVar[str] = "number"
    default: float | None = None
    lo: float
    hi: float

    def get(self, env: Mapping[str, str]) -> float | None:
        """The value, the default if unset; ``ConfigError`` if not a number in [lo, hi]."""
        text = self.raw(env)
        if text is None:
            return self.default
        try:
            value = float(int(text)) if self.kind == "integer" else float(text)
        except ValueError:
            what = "an integer" if self.kind == "integer" else "a number"
            raise ConfigError(f"{self.name}={text[:40]!r} is not {what}") from None
        if math.isnan(value) or not self.lo <= value <= self.hi:
            raise ConfigError(f"{self.name}={text[:40]} is out of range: allowed {self.limits()}")
        return value

    def read(self, env: Mapping[str, str]) -> float:
        value = self.get(env)
        if value is None:
            raise ConfigError(f"{self.name} is not set")
        return value

    def shown_default(self) -> str:
        return self.default_doc or ("-" if self.default is None else _number(self.default))

    def limits(self) -> str:
        return f"{_number(self.lo)} to {_number(self.hi)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Integer(Number):
    kind: ClassVar[str] = "integer"

    def get(self, env: Mapping[str, str]) -> int | None:
        value = Number.get(self, env)  # no zero-argument super() in a slots dataclass
        return None if value is None else int(value)

    def read(self, env: Mapping[str, str]) -> int:
        return int(Number.read(self, env))


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag(Setting):
    kind: ClassVar[str] = "on/off"
    default: bool = False

    def read(self, env: Mapping[str, str]) -> bool:
        """One set of words for every component: 1/0, true/false, yes/no, on/off."""
        text = (self.raw(env) or "").lower()
        if not text:
            return self.default
        if text not in _TRUE + _FALSE:
            raise ConfigError(f"{self.name}={text[:20]!r} must be on or off "
                              "(true/false, yes/no, 1/0)")
        return text in _TRUE

    def shown_default(self) -> str:
        return "on" if self.default else "off"


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice(Setting):
    kind: ClassVar[str] = "one of"
    default: str
    choices: tuple[str, ...]
    upper: bool = False  # accept any case: compare in upper case

    def read(self, env: Mapping[str, str], default: str | None = None) -> str:
        """The value (``default``, else the schema's, if unset); must be one of the choices."""
        text = self.raw(env) or default or self.default
        text = text.upper() if self.upper else text
        if text not in self.choices:
            raise ConfigError(f"{self.name}={text[:40]!r} must be one of {', '.join(self.choices)}")
        return text

    def shown_default(self) -> str:
        return self.default_doc or self.default

    def limits(self) -> str:
        return " | ".join(self.choices)


@dataclass(frozen=True, slots=True, kw_only=True)
class Text(Setting):
    default: str | None = None
    what: str = ""  # what it must name, for the "not set" message
    pattern: str = ""  # a full match the value must be...
    shape: str = ""  # ...said in words: "<name>=<value> must be <shape>"
    check: Callable[[str], object] | None = None  # raises ValueError naming what is wrong

    def get(self, env: Mapping[str, str]) -> str | None:
        text = self.raw(env)
        if text is None:
            return self.default
        if self.pattern and not re.fullmatch(self.pattern, text):
            raise ConfigError(f"{self.name}={text[:80]!r} must be {self.shape}")
        if self.check is not None:
            try:
                self.check(text)
            except ValueError as exc:
                raise ConfigError(f"{self.name}: {exc}") from None
        return text

    def read(self, env: Mapping[str, str]) -> str:
        """The value; ``ConfigError`` saying what it must name if unset."""
        text = self.get(env)
        if text is None:
            raise ConfigError(f"{self.name} is not set: it must name {self.what}")
        return text

    def shown_default(self) -> str:
        return self.default if self.default is not None else self.default_doc or "unset"

    def limits(self) -> str:
        return self.shape
