"""Orders to one worker: encoding, parsing, and the order queue's name and URL."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdfast.core.directives import parse_inbox_body
from holdfast.core.orders import (
    Order,
    order_queue_name,
    order_queue_url,
    parse_order,
    prefix_for,
    validate_prefix,
)

ID_CHARS = st.text(alphabet="abcXYZ019._:@/+=-", min_size=1, max_size=200)
SQS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


@given(st.sampled_from(["stop", "release", "retake"]), ID_CHARS,
       st.none() | st.integers(min_value=0, max_value=10**12))
def test_an_order_round_trips_through_the_session_set(verb: str, conn_id: str,
                                                      epoch: int | None) -> None:
    """Every order (stop, release, retake), with or without an epoch, parses back to itself."""
    order = Order(verb, conn_id, epoch)
    assert parse_order(order.encode()) == order


@pytest.mark.parametrize("text", ["", "stop", "stop:", "go:c1", "stop#x:c1", "stop#1#2:c1",
                                  "stop#-1:c1", "#1:c1"])
def test_unknown_or_broken_orders_are_none(text: str) -> None:
    """Anything but ``stop[#epoch]:<id>`` is not an order."""
    assert parse_order(text) is None


def test_a_queued_order_must_name_its_owner() -> None:
    """A queue message is only an order for the owner it names."""
    body = Order.stop("c1", 3).body("w#i1")
    assert parse_inbox_body(body, "w#i1") == Order.stop("c1", 3)
    assert parse_inbox_body(body, "w#i2") is None
    assert parse_inbox_body("[1]", "w#i1") is None


def test_an_order_applies_to_its_epoch_and_later_ones_only() -> None:
    """A late order about an older holding never stops a newer one."""
    assert Order.stop("c", 5).applies_to(5) and Order.stop("c", 6).applies_to(5)
    assert not Order.stop("c", 4).applies_to(5)
    assert Order.stop("c").applies_to(5)


@given(ID_CHARS, st.text(alphabet="0123456789abcdef", min_size=1, max_size=64),
       ID_CHARS, st.text(alphabet="0123456789abcdef", min_size=1, max_size=64))
def test_queue_names_are_valid_and_distinct(w1: str, i1: str, w2: str, i2: str) -> None:
    """Any owner gets a valid SQS queue name, and two owners never share one."""
    a, b = order_queue_name("hf-orders-", f"{w1}#{i1}"), order_queue_name("hf-orders-",
                                                                          f"{w2}#{i2}")
    assert SQS_NAME.fullmatch(a) and a.startswith("hf-orders-")
    assert (a == b) == ((w1, i1) == (w2, i2))


def test_the_queue_url_shares_the_nudge_queues_endpoint_and_account() -> None:
    """The router derives the URL from its nudge queue's: no lookup call."""
    url = order_queue_url("https://sqs.eu-west-1.amazonaws.com/123456789012/nudges", "p-",
                          "w1#ab")
    assert url == ("https://sqs.eu-west-1.amazonaws.com/123456789012/"
                   + order_queue_name("p-", "w1#ab"))
    with pytest.raises(ValueError, match="not a queue URL"):
        order_queue_url("nudges", "p-", "w1#ab")


@pytest.mark.parametrize("prefix", ["", "a" * 41, "has space", "dot.ted"])
def test_bad_prefixes_are_refused(prefix: str) -> None:
    """A prefix that could not start an SQS queue name is a configuration error."""
    with pytest.raises(ValueError, match="order queue prefix"):
        validate_prefix(prefix)


def test_long_or_odd_bases_get_distinct_prefixes() -> None:
    """Stack names equal in their first 32 characters still get prefixes of their own."""
    a = prefix_for("holdfast-production-eu-west-1-fleet-alpha")
    b = prefix_for("holdfast-production-eu-west-1-fleet-beta")
    assert a != b and len(a) <= 40 and len(b) <= 40
    assert prefix_for("Holdfast") == "Holdfast-orders-"
    assert prefix_for("a.b") != prefix_for("a-b")
    validate_prefix(a)
