"""The nudge message format and batched, bounded sending."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas.nudge import MAX_DELAY_S, Nudge, delay_until, send_nudges
from tests.lambdas.helpers import receive_nudges


def test_body_is_the_documented_json() -> None:
    """The body has exactly conn_id, reason and epoch (null when unknown)."""
    assert json.loads(Nudge("c-1", "inserted", 4).body()) == {
        "conn_id": "c-1", "reason": "inserted", "epoch": 4}
    assert json.loads(Nudge("c-1", "expired").body())["epoch"] is None


def test_body_round_trips() -> None:
    """``from_body`` reads back what ``body`` wrote (the delay is not part of the body)."""
    nudge = Nudge("c/1:x", "gave_up", 7, delay_s=30)
    assert Nudge.from_body(nudge.body()) == Nudge("c/1:x", "gave_up", 7)


@pytest.mark.parametrize("body", ["not json", "[]", '{"reason": "x"}', '{"conn_id": 5}',
                                  '{"conn_id": "c", "epoch": true}',
                                  '{"conn_id": "c", "epoch": "3"}'])
def test_bad_bodies_are_rejected(body: str) -> None:
    """A body that is not a nudge raises ValueError rather than a KeyError or TypeError."""
    with pytest.raises(ValueError):
        Nudge.from_body(body)


def test_delay_is_bounded() -> None:
    """A nudge's delay must fit SQS's 0..900 s, and a connection id is required."""
    with pytest.raises(ValueError):
        Nudge("c", "x", delay_s=MAX_DELAY_S + 1)
    with pytest.raises(ValueError):
        Nudge("c", "x", delay_s=-1)
    with pytest.raises(ValueError):
        Nudge("", "x")


@pytest.mark.parametrize(("target", "now", "expected"), [
    (10_000, 10_000, 0), (10_001, 10_000, 1), (11_000, 10_000, 1), (11_001, 10_000, 2),
    (5_000, 10_000, 0), (10_000 + 3_600_000, 10_000, MAX_DELAY_S)])
def test_delay_until_rounds_up_and_clamps(target: int, now: int, expected: int) -> None:
    """Delays round up (never early) and clamp to SQS's limits."""
    assert delay_until(target, now) == expected


class CountingSqs:
    """A real SQS client, with its SendMessageBatch calls counted."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.batches: list[int] = []

    def send_message_batch(self, **kw: Any) -> Any:
        self.batches.append(len(kw["Entries"]))
        return self.real.send_message_batch(**kw)


def test_sends_in_batches_of_ten(sqs: Any, queue_url: str, unique_id: str) -> None:
    """25 nudges take three SendMessageBatch calls and all arrive."""
    counting = CountingSqs(sqs)
    nudges = [Nudge(f"{unique_id}-{i}", "inserted", i) for i in range(25)]
    report = send_nudges(counting, queue_url, nudges)  # type: ignore[arg-type]
    assert counting.batches == [10, 10, 5]
    assert len(report.sent) == 25 and not report.failed
    got = receive_nudges(sqs, queue_url, expect=25, prefix=unique_id)
    assert sorted(b["conn_id"] for b in got) == sorted(n.conn_id for n in nudges)


class FlakySqs:
    """Answers like SQS under partial failure: chosen entries fail on the first rounds."""

    def __init__(self, fail_rounds: dict[str, int], sender_fault: set[str]) -> None:
        self.fail_rounds = fail_rounds
        self.sender_fault = sender_fault
        self.calls: list[list[str]] = []

    def send_message_batch(self, **kw: Any) -> Any:
        ok, failed = [], []
        ids = []
        for entry in kw["Entries"]:
            conn_id = json.loads(entry["MessageBody"])["conn_id"]
            ids.append(conn_id)
            left = self.fail_rounds.get(conn_id, 0)
            if conn_id in self.sender_fault:
                failed.append({"Id": entry["Id"], "SenderFault": True, "Code": "InvalidParameter"})
            elif left:
                self.fail_rounds[conn_id] = left - 1
                failed.append({"Id": entry["Id"], "SenderFault": False, "Code": "InternalError"})
            else:
                ok.append({"Id": entry["Id"], "MessageId": "m"})
        self.calls.append(ids)
        return {"Successful": ok, "Failed": failed}


def test_partial_failures_are_retried_and_bounded() -> None:
    """Only the failed entries are resent; sender faults are not; what never went is reported."""
    sqs = FlakySqs({"b": 1, "c": 5}, {"d"})
    sleeps: list[float] = []
    report = send_nudges(sqs, "q", [Nudge(x, "r") for x in "abcd"],  # type: ignore[arg-type]
                         attempts=3, sleep=sleeps.append)
    assert sqs.calls == [["a", "b", "c", "d"], ["b", "c"], ["c"]]
    assert {n.conn_id for n in report.sent} == {"a", "b"}
    assert {n.conn_id: e.split(":")[0] for n, e in report.failed} == {
        "c": "InternalError", "d": "InvalidParameter"}
    assert sleeps == [0.05, 0.1]


def test_unreachable_sqs_fails_everything(dead_sqs: Any) -> None:
    """With SQS down every nudge comes back failed, with the connection error named."""
    report = send_nudges(dead_sqs, "http://127.0.0.1:1/q", [Nudge("a", "r"), Nudge("b", "r")],
                         attempts=2, sleep=lambda _s: None)
    assert not report.sent
    assert [n.conn_id for n, _ in report.failed] == ["a", "b"]
    assert all("EndpointConnectionError" in e for _, e in report.failed)
    assert report.calls == 2


def test_out_of_time_stops_after_the_first_call() -> None:
    """When time is short, only the first batch is tried; the rest fail as out of time."""
    sqs = FlakySqs({}, set())
    report = send_nudges(sqs, "q", [Nudge(f"c{i}", "r") for i in range(15)],  # type: ignore[arg-type]
                         out_of_time=lambda: True, sleep=lambda _s: None)
    assert len(sqs.calls) == 1 and len(report.sent) == 10
    assert {e for _, e in report.failed} == {"out of time"} and len(report.failed) == 5
