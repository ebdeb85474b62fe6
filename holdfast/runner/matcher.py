"""Lambda event-filtering patterns (the EventBridge pattern language), the subset Holdfast uses.

A pattern is an object whose keys must all match the record. A nested object matches the
record's nested object; a list is the set of allowed leaf values, any of which may match. A
leaf rule is an exact value (string, number, boolean, null) or one of ``{"exists": bool}``,
``{"prefix": str}``, ``{"anything-but": value | [values]}``. ``exists`` only sees leaves (a
nested object counts as absent), as in Lambda. When the record's value is a list, the rule
matches if any element does. Anything else is a ``PatternError`` when the pattern is compiled,
so a pattern the runner cannot honour fails loudly instead of filtering wrongly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from holdfast.runner.exceptions import PatternError

__all__ = ["FilterSet", "compile_pattern"]

Predicate = Callable[[Any], bool]
_MISSING = object()


def _same(value: Any, wanted: Any) -> bool:
    # JSON types: 1 == True in Python but not in the pattern language.
    if isinstance(wanted, bool) or isinstance(value, bool):
        return isinstance(wanted, bool) and isinstance(value, bool) and value is wanted
    if isinstance(wanted, (int, float)):
        return isinstance(value, (int, float)) and value == wanted
    return bool(type(value) is type(wanted) and value == wanted)


def _leaf_values(value: Any) -> list[Any]:
    if value is _MISSING or isinstance(value, Mapping):
        return []
    return list(value) if isinstance(value, list) else [value]


def _operator(rule: Mapping[str, Any], where: str) -> Callable[[list[Any]], bool]:
    if len(rule) != 1:
        raise PatternError(f"{where}: an operator object has exactly one key, got {sorted(rule)}")
    (op, arg), = rule.items()
    if op == "exists":
        if not isinstance(arg, bool):
            raise PatternError(f"{where}: exists takes true or false")
        return lambda values: bool(values) is arg
    if op == "prefix":
        if not isinstance(arg, str):
            raise PatternError(f"{where}: prefix takes a string")
        return lambda values: any(isinstance(v, str) and v.startswith(arg) for v in values)
    if op == "anything-but":
        excluded = arg if isinstance(arg, list) else [arg]
        if any(isinstance(x, (Mapping, list)) for x in excluded):
            raise PatternError(f"{where}: only anything-but with plain values is supported")
        return lambda values: bool(values) and not any(
            _same(v, x) for v in values for x in excluded)
    raise PatternError(f"{where}: operator {op!r} is not supported by the local matcher")


def _equals(wanted: Any) -> Callable[[list[Any]], bool]:
    return lambda values: any(_same(v, wanted) for v in values)


def _compile_leaf(rules: Sequence[Any], where: str) -> Predicate:
    if not rules:
        raise PatternError(f"{where}: a rule list must not be empty")
    tests: list[Callable[[list[Any]], bool]] = []
    for rule in rules:
        if isinstance(rule, Mapping):
            tests.append(_operator(rule, where))
        elif isinstance(rule, (str, int, float, bool)) or rule is None:
            tests.append(_equals(rule))
        else:
            raise PatternError(f"{where}: unsupported rule {rule!r}")
    return lambda value: any(test(_leaf_values(value)) for test in tests)


def compile_pattern(pattern: Mapping[str, Any], where: str = "pattern") -> Predicate:
    """A predicate over records (JSON-like objects) for one pattern."""
    if not isinstance(pattern, Mapping) or not pattern:
        raise PatternError(f"{where}: a pattern is a non-empty object")
    fields: list[tuple[str, Predicate]] = []
    for key, rule in pattern.items():
        path = f"{where}.{key}"
        if isinstance(rule, Mapping):
            fields.append((key, compile_pattern(rule, path)))
        elif isinstance(rule, list):
            fields.append((key, _compile_leaf(rule, path)))
        else:
            raise PatternError(f"{path}: expected an object or a list of rules, got {rule!r}")

    def match(record: Any) -> bool:
        obj = record if isinstance(record, Mapping) else {}
        return all(pred(obj.get(key, _MISSING)) for key, pred in fields)

    return match


class FilterSet:
    """Lambda's filter criteria: a record passes if any pattern matches (no patterns: all)."""

    def __init__(self, patterns: Iterable[Mapping[str, Any]]) -> None:
        self.patterns = list(patterns)
        self._predicates = [compile_pattern(p, f"pattern {i}")
                            for i, p in enumerate(self.patterns)]

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return not self._predicates or any(pred(record) for pred in self._predicates)
