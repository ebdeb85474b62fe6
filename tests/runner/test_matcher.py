"""The runner's filter matcher (EventBridge pattern subset) and the shared filter patterns."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.filters import FILTER_PATTERNS
from holdfast.runner.exceptions import PatternError
from holdfast.runner.matcher import FilterSet, compile_pattern
from tests.lambdas.records import image, record


@pytest.mark.parametrize(("pattern", "event", "expected"), [
    ({"a": ["x"]}, {"a": "x"}, True),
    ({"a": ["x"]}, {"a": "y"}, False),
    ({"a": ["x", "y"]}, {"a": "y"}, True),
    ({"a": ["x"]}, {}, False),
    ({"a": [1]}, {"a": 1.0}, True),
    ({"a": [1]}, {"a": True}, False),
    ({"a": [True]}, {"a": 1}, False),
    ({"a": [None]}, {"a": None}, True),
    ({"a": ["x"]}, {"a": ["z", "x"]}, True),
    ({"a": {"b": ["x"]}}, {"a": {"b": "x"}}, True),
    ({"a": {"b": ["x"]}}, {"a": "x"}, False),
    ({"a": {"b": [{"exists": False}]}}, {}, True),
    ({"a": {"b": [{"exists": False}]}}, {"a": {"b": "v"}}, False),
    ({"a": {"b": [{"exists": True}]}}, {"a": {"b": "v"}}, True),
    ({"a": [{"exists": True}]}, {"a": {"nested": 1}}, False),
    ({"a": [{"exists": False}]}, {"a": {"nested": 1}}, True),
    ({"a": [{"prefix": "CONN#"}]}, {"a": "CONN#1"}, True),
    ({"a": [{"prefix": "CONN#"}]}, {"a": "X"}, False),
    ({"a": [{"anything-but": ["x"]}]}, {"a": "y"}, True),
    ({"a": [{"anything-but": "x"}]}, {"a": "x"}, False),
    ({"a": [{"anything-but": "x"}]}, {}, False),
    ({"a": ["x"], "b": ["y"]}, {"a": "x", "b": "z"}, False),
])
def test_pattern_semantics(pattern: dict[str, Any], event: dict[str, Any],
                           expected: bool) -> None:
    """Exact values, types, arrays, nesting, exists, prefix and anything-but match like Lambda."""
    assert compile_pattern(pattern)(event) is expected


@pytest.mark.parametrize("pattern", [
    {}, {"a": "x"}, {"a": []}, {"a": [{"numeric": [">", 0]}]}, {"a": [{"exists": "yes"}]},
    {"a": [{"prefix": "x", "exists": True}]}, {"a": [["x"]]}])
def test_unsupported_patterns_fail_loudly(pattern: dict[str, Any]) -> None:
    """A pattern the matcher cannot honour is rejected when compiled, naming where."""
    with pytest.raises(PatternError, match="pattern"):
        compile_pattern(pattern)


def test_empty_filter_set_passes_everything() -> None:
    """No filter criteria means every record is delivered, as in Lambda."""
    assert FilterSet([])({"eventName": "REMOVE"})


def test_shared_patterns_compile_and_separate_heartbeats() -> None:
    """The shared patterns pass inserts and releases and drop heartbeats and deletes."""
    f = FilterSet(FILTER_PATTERNS)
    held = image("c1", owner="w1", expires=10, epoch=1)
    assert f(record("INSERT", None, image("c1")))
    assert f(record("MODIFY", held, image("c1", expires=0)))
    assert not f(record("MODIFY", held, image("c1", owner="w1", expires=20, epoch=1)))
    assert not f(record("REMOVE", image("c1", expires=0), None))
    assert f(record("REMOVE", held, None))  # a held stream deleted: its holder gets an order
    assert not f(record("INSERT", None, image("c1", state="STOPPED")))
