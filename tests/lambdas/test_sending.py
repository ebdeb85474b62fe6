"""Batched, bounded sending of nudges (the format itself: tests/core/test_nudge.py)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from holdfast.core.nudge import Nudge
from holdfast.core.sending import SEND_CONCURRENCY, send_nudges
from tests.lambdas.helpers import receive_nudges


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
    assert sorted(counting.batches) == [5, 10, 10]
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


class SlowSqs:
    """Answers each SendMessageBatch after ``delay_s``; counts the calls in flight at once."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.in_flight = self.most = 0

    def send_message_batch(self, **kw: Any) -> Any:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(self.delay_s)
        with self.lock:
            self.in_flight -= 1
        return {"Successful": [{"Id": e["Id"], "MessageId": "m"} for e in kw["Entries"]]}


def test_batches_of_one_round_go_side_by_side() -> None:
    """300 nudges are 30 batches, sent SEND_CONCURRENCY at a time, not one after the other."""
    sqs = SlowSqs(0.02)
    report = send_nudges(sqs, "q", [Nudge(f"c{i}", "r") for i in range(300)])  # type: ignore[arg-type]
    assert len(report.sent) == 300 and report.calls == 30
    assert sqs.most == SEND_CONCURRENCY


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


def test_out_of_time_is_asked_before_each_wave_of_a_round() -> None:
    """A round of more than SEND_CONCURRENCY batches stops at the wave where time runs short:
    the later waves are never sent, and their nudges fail as out of time."""
    sqs = FlakySqs({}, set())
    calls_before: list[int] = []

    def short_after_first_wave() -> bool:
        calls_before.append(len(sqs.calls))
        return len(sqs.calls) >= SEND_CONCURRENCY

    n = SEND_CONCURRENCY * 10 * 3  # three waves of full batches
    report = send_nudges(sqs, "q", [Nudge(f"c{i}", "r") for i in range(n)],  # type: ignore[arg-type]
                         out_of_time=short_after_first_wave, sleep=lambda _s: None)
    assert len(sqs.calls) == SEND_CONCURRENCY and len(report.sent) == SEND_CONCURRENCY * 10
    assert {e for _, e in report.failed} == {"out of time"}
    assert len(report.failed) == n - SEND_CONCURRENCY * 10
