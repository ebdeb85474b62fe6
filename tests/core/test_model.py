"""Unit tests of lease item parsing: untrusted input gives a clear error, never a crash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdfast.core.exceptions import MalformedItem
from holdfast.core.model import LeaseItem, validate_conn_id


def raw(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"Pk": {"S": "CONN#abc"}, "desired_state": {"S": "STARTED"},
                            "ws_url": {"S": "ws://127.0.0.1/s/abc"}}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def test_minimal_user_item_parses() -> None:
    """A user-inserted item with only Pk, desired_state and ws_url is valid and never claimed."""
    item = LeaseItem.from_ddb(raw())
    assert item.conn_id == "abc" and item.started
    assert item.lease_expires_at_ms is None and item.lease_owner is None
    assert item.epoch == 0 and item.last_seq is None


def test_full_item_parses() -> None:
    """Every attribute of a held lease is read with its type."""
    item = LeaseItem.from_ddb(raw(lease_owner={"S": "w1"}, lease_expires_at_ms={"N": "123"},
                                  last_seq={"N": "42"}, lease_epoch={"N": "3"},
                                  status={"S": "RUNNING"}, error_count={"N": "2"}))
    assert (item.lease_owner, item.lease_expires_at_ms, item.last_seq, item.epoch,
            item.error_count) == ("w1", 123, 42, 3, 2)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"Pk": None}, "Pk"),
    ({"Pk": {"S": "OTHER#x"}}, "not a connection key"),
    ({"Pk": {"S": "CONN#bad id with spaces"}}, "invalid connection id"),
    ({"desired_state": {"S": "RUNNING"}}, "STARTED or STOPPED"),
    ({"desired_state": None}, "desired_state is missing"),
    ({"ws_url": None}, "ws_url is missing"),
    ({"ws_url": {"N": "5"}}, "ws_url must be a string"),
    ({"lease_expires_at_ms": {"S": "soon"}}, "must be a number"),
    ({"lease_expires_at_ms": {"N": "-5"}}, "outside"),
    ({"lease_expires_at_ms": {"N": "1e30"}}, "integer"),
    ({"last_seq": {"N": "1.5"}}, "integer"),
    ({"lease_epoch": {"N": str(2**60)}}, "outside"),
    ({"lease_owner": {"N": "7"}}, "lease_owner must be a string"),
    ({"ws_url": "not-an-attribute-value"}, "not a DynamoDB attribute value"),
    ({"single_connection": {"S": "yes"}}, "single_connection must be a boolean"),
    ({"single_connection": {"N": "1"}}, "single_connection must be a boolean"),
])
def test_malformed_items_name_item_and_attribute(overrides: dict[str, Any], message: str) -> None:
    """Each kind of bad attribute raises MalformedItem with a message naming the problem."""
    with pytest.raises(MalformedItem, match=message):
        LeaseItem.from_ddb(raw(**overrides))


def test_null_attribute_counts_as_missing() -> None:
    """A NULL-typed optional attribute is treated as absent."""
    assert LeaseItem.from_ddb(raw(lease_owner={"NULL": True})).lease_owner is None


def test_a_well_typed_single_connection_and_any_weight_parse() -> None:
    """A boolean ``single_connection`` (or a NULL one) is valid, and any ``weight`` (a
    malformed or absurd one counts as 1: ``weight_of``)."""
    for overrides in ({"single_connection": {"BOOL": True}}, {"weight": {"N": "2.5"}},
                      {"weight": {"S": "heavy"}}, {"single_connection": {"NULL": True}}):
        assert LeaseItem.from_ddb(raw(**overrides)).conn_id == "abc"


_attr = st.one_of(st.none(), st.fixed_dictionaries({"S": st.text(max_size=30)}),
                  st.fixed_dictionaries({"N": st.text(max_size=12)}),
                  st.fixed_dictionaries({"BOOL": st.booleans()}), st.integers(), st.text())


@given(st.dictionaries(st.sampled_from(["Pk", "desired_state", "ws_url", "lease_owner",
                                        "lease_expires_at_ms", "last_seq", "lease_epoch",
                                        "status", "error_count", "weight",
                                        "single_connection"]), _attr))
def test_any_garbage_gives_item_or_malformed(item: dict[str, Any]) -> None:
    """Arbitrary input parses or raises MalformedItem, never anything else."""
    try:
        LeaseItem.from_ddb(item)
    except MalformedItem as exc:
        assert str(exc).startswith("malformed lease item")


def test_a_malformed_session_item_is_called_one() -> None:
    """A session item that breaks the schema says "session item" (drain on one said "lease
    item 'WORKER#w6'")."""
    assert str(MalformedItem("WORKER#w6", "no state")).startswith(
        "malformed session item 'WORKER#w6'")
    assert str(MalformedItem("CONN#a", "no state")).startswith("malformed lease item")


def test_conn_id_validation() -> None:
    """Connection ids are 1-200 safe characters."""
    assert validate_conn_id("meeting-42.a_b:c") == "meeting-42.a_b:c"
    for bad in ["", "a b", "x" * 201, "new\nline"]:
        with pytest.raises(ValueError):
            validate_conn_id(bad)
