"""Context value parsers: JSON and ``-c key=value`` strings alike, errors naming the key."""

from __future__ import annotations

import re

import pytest

from holdfast.infra.exceptions import SettingsError
from holdfast.infra.parsers import (
    MAX_PORTS,
    boolean,
    choice,
    int_in,
    matching,
    tcp_ports,
    text,
    tracing_mode,
)


def test_integers_from_json_or_text_within_their_range() -> None:
    """An int or its decimal text within [lo, hi]; a bool, other text or out of range fails."""
    parse = int_in(1, 10)
    assert parse("k", 3) == 3 and parse("k", " 7 ") == 7
    for bad in (True, "0x3", "3.5", 11, "0"):
        with pytest.raises(SettingsError, match=r"^k="):
            parse("k", bad)


def test_booleans_and_tracing_accept_the_usual_spellings() -> None:
    """true/1/yes and false/0/no; tracing takes off/xray or the old booleans."""
    assert boolean("k", "Yes") is True and boolean("k", 0) is False
    assert tracing_mode("k", True) == "xray" and tracing_mode("k", "OFF") == "off"
    for parse in (boolean, tracing_mode):
        with pytest.raises(SettingsError, match=r"^k="):
            parse("k", "maybe")


def test_choices_patterns_and_text() -> None:
    """A choice is normalised to lowercase; an empty match clears the setting; text strips."""
    assert choice("a", "b")("k", " B ") == "b"
    with pytest.raises(SettingsError, match="one of a, b"):
        choice("a", "b")("k", "c")
    digits = matching(re.compile(r"^\d+$"), "digits")
    assert digits("k", " 12 ") == "12" and digits("k", "") is None
    with pytest.raises(SettingsError, match="expected digits"):
        digits("k", "x")
    assert text("k", "  ") is None and text("k", " a ") == "a"


def test_ports_are_distinct_and_bounded() -> None:
    """Ports as an int, a comma list or a JSON list; repeats kept once; at most MAX_PORTS."""
    assert tcp_ports("k", 443) == (443,) and tcp_ports("k", "443, 8443,443") == (443, 8443)
    assert tcp_ports("k", [80, 443]) == (80, 443)
    for bad in ("0", "http", [True], list(range(1, MAX_PORTS + 2))):
        with pytest.raises(SettingsError, match=r"^k="):
            tcp_ports("k", bad)
