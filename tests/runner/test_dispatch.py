"""Which batch the local event source mapping invokes next, and when (fake clock, no I/O)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from holdfast.runner.dispatch import Dispatcher


def rec(seq: int, item: str | None = None) -> dict[str, Any]:
    return {"eventName": "INSERT", "dynamodb": {"SequenceNumber": f"{seq:021d}",
                                                "Keys": {"Pk": {"S": f"CONN#{item or seq}"}}}}


def seqs(batch: Any) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in batch.records]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_batches_split_by_size() -> None:
    """Records beyond the batch size go into further batches, in order."""
    d = Dispatcher(batch_size=3, window_s=0, parallelization=10)
    d.add("s1", [rec(i) for i in range(1, 8)])
    got = [d.take(), d.take(), d.take(), d.take()]
    assert [seqs(b) for b in got if b] == [[1, 2, 3], [4, 5, 6], [7]]
    assert got[3] is None and len(d) == 0


def test_batching_window_holds_records() -> None:
    """With a window, a partial batch waits until the window since its first record passes."""
    clock = Clock()
    d = Dispatcher(batch_size=10, window_s=0.5, monotonic=clock)
    d.add("s1", [rec(1)])
    clock.now += 0.3
    d.add("s1", [rec(2)])
    assert d.take() is None
    assert d.next_deadline() == pytest.approx(100.5)
    clock.now += 0.2
    batch = d.take()
    assert batch is not None and seqs(batch) == [1, 2]
    assert d.next_deadline() is None


def test_full_batch_does_not_wait_for_the_window() -> None:
    """A full batch is sent at once even inside the window; shards are batched apart."""
    d = Dispatcher(batch_size=2, window_s=10, parallelization=3, monotonic=Clock())
    d.add("s1", [rec(1), rec(2), rec(3)])
    d.add("s2", [rec(9)])
    first = d.take()
    assert first is not None and (first.shard_id, seqs(first)) == ("s1", [1, 2])
    assert d.take() is None
    rest = [d.take(flush=True), d.take(flush=True)]
    assert [(b.shard_id, seqs(b)) for b in rest if b] == [("s1", [3]), ("s2", [9])]


def test_one_batch_at_a_time_without_parallelization() -> None:
    """Parallelization 1: the next batch waits until the one in flight is done."""
    d = Dispatcher(batch_size=1, window_s=0)
    d.add("s1", [rec(1), rec(2)])
    first = d.take()
    assert first is not None and d.take() is None
    d.done(first)
    second = d.take()
    assert second is not None and seqs(second) == [2]


def test_a_slow_batch_holds_only_its_own_items() -> None:
    """While a batch is in flight, later records of other items go on; its items wait, in
    order, and records of one item may share a batch."""
    d = Dispatcher(batch_size=10, window_s=0, parallelization=2)
    d.add("s1", [rec(1, "a"), rec(2, "b")])
    slow = d.take()
    assert slow is not None and seqs(slow) == [1, 2]
    d.add("s1", [rec(3, "a"), rec(4, "c"), rec(5, "c"), rec(6, "a"), rec(7, "d")])
    fast = d.take()
    assert fast is not None and seqs(fast) == [4, 5, 7]
    assert d.take() is None  # two in flight
    d.done(fast)
    assert d.take() is None  # only item a is left, and it is in flight
    d.done(slow)
    last = d.take()
    assert last is not None and seqs(last) == [3, 6]
    d.done(last)
    assert d.idle()


def test_an_item_waiting_on_another_shard_keeps_its_order() -> None:
    """A record of an item whose earlier record (another shard) is pending waits for it."""
    d = Dispatcher(batch_size=10, window_s=0, parallelization=3)
    d.add("parent", [rec(1, "a")])
    d.add("child", [rec(2, "a"), rec(3, "b")])
    first = d.take()
    assert first is not None and (first.shard_id, seqs(first)) == ("parent", [1])
    second = d.take()
    assert second is not None and (second.shard_id, seqs(second)) == ("child", [3])
    assert d.take() is None
    d.done(first)
    third = d.take()
    assert third is not None and seqs(third) == [2]


def test_wait_batch_wakes_on_add_and_on_stop() -> None:
    """An invoker thread blocked in ``wait_batch`` gets a record as soon as it is added, and
    returns None once stop is set."""
    d = Dispatcher(batch_size=10, window_s=0)
    stop = threading.Event()
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(d.wait_batch(stop, max_wait_s=5)))
    t.start()
    d.add("s1", [rec(1)])
    t.join(2)
    assert not t.is_alive() and seqs(got[0]) == [1]
    stop.set()
    assert d.wait_batch(stop) is None
