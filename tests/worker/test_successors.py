"""Whom a worker's streams go to: a stop's pinned successors, and its question to the decider."""

from __future__ import annotations

import asyncio

from holdfast.core.directives import Directive
from holdfast.core.exceptions import StoreUnavailable
from holdfast.worker.successors import ASK_WAIT_MS, Successors

NOW = 1_000_000


class Clock:
    """Monotonic ms, moved by hand."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def _named(count: int, *, issued: int = NOW, owner: str = "w2#a") -> Directive:
    return Directive(0, 0, 1, NOW + 10_000, 2, issued, successors=((owner, count),))


def _successors(live: Directive | None = None) -> tuple[Successors, Clock]:
    clock = Clock()
    return Successors(live=lambda: live, mono=clock), clock


async def _marked(result: bool) -> bool:
    return result


def test_a_stop_needs_more_successors_than_the_pinned_directive_names() -> None:
    """No live directive: any stream needs one; a directive naming two covers two, not three;
    no stream needs none."""
    bare, _ = _successors()
    bare.pin()
    assert bare.needs(1) and not bare.needs(0)
    pinned, _ = _successors(_named(2))
    pinned.pin()
    assert pinned.needs(3) and not pinned.needs(2)


def test_the_answer_is_pinned_once_the_pinned_directive_has_no_name_left() -> None:
    """While the pinned directive still names someone a newer one waits; once it is used up
    the newer one (the decider's answer) is pinned and names the rest."""
    s, _ = _successors(_named(1))
    s.pin()
    answer = _named(3, issued=NOW + 1, owner="w3#b")
    s.newer(answer, NOW)
    assert s.next() == "w2#a"
    s.newer(answer, NOW)
    assert [s.next() for _ in range(4)] == ["w3#b", "w3#b", "w3#b", None]


async def test_the_pinned_directive_read_again_is_no_answer() -> None:
    """The directive the stop pinned, used up and read again by a heartbeat, neither ends the
    wait for the decider's answer nor is pinned as if it were one."""
    pinned = _named(1)
    s, _ = _successors(pinned)
    s.pin()
    await s.ask(lambda: _marked(True))
    assert s.next() == "w2#a" and s.next() is None
    s.newer(pinned, NOW)
    assert s.awaiting() and s.next() is None
    s.newer(_named(2, issued=NOW + 1, owner="w3#b"), NOW)
    assert not s.awaiting() and s.next() == "w3#b"


async def test_an_answer_that_comes_before_the_pinned_list_is_used_up_is_kept_for_after_it(
        ) -> None:
    """The decider's answer while the pinned list still names someone: no more waiting, and
    its successors follow once the pinned ones are named."""
    s, _ = _successors(_named(1))
    s.pin()
    await s.ask(lambda: _marked(True))
    s.newer(_named(2, issued=NOW + 1, owner="w3#b"), NOW)
    assert not s.awaiting()
    assert [s.next() for _ in range(4)] == ["w2#a", "w3#b", "w3#b", None]


def test_a_directive_is_not_pinned_outside_a_stop() -> None:
    """Before a stop a directive is only live: ``newer`` pins nothing."""
    s, _ = _successors()
    s.newer(_named(2), NOW)
    assert s.next() is None


async def test_the_stop_awaits_the_answer_for_at_most_ask_wait_ms() -> None:
    """Asked: awaiting from that moment until the answer comes or ``ASK_WAIT_MS`` passes."""
    s, clock = _successors()
    s.pin()
    await s.ask(lambda: _marked(True))
    assert s.awaiting()
    clock.ms = ASK_WAIT_MS - 1
    assert s.awaiting()
    clock.ms = ASK_WAIT_MS
    assert not s.awaiting()
    answered, _ = _successors()
    answered.pin()
    await answered.ask(lambda: _marked(True))
    answered.newer(_named(2), NOW)
    assert not answered.awaiting() and answered.next() == "w2#a"


async def test_an_unmarked_session_or_an_answer_naming_nobody_ends_the_wait() -> None:
    """No live session to mark, a mark DynamoDB refused, or a drain decided with no worker
    that has room: the stop waits no more."""
    for mark in (lambda: _marked(False), _refused):
        s, _ = _successors()
        s.pin()
        await s.ask(mark)
        assert not s.awaiting()
    s, _ = _successors()
    s.pin()
    task = s.ask(lambda: _marked(True))
    await task
    s.newer(Directive(0, 0, 1, NOW + 10_000, 1, NOW), NOW)
    assert not s.awaiting()


async def _refused() -> bool:
    await asyncio.sleep(0)
    raise StoreUnavailable("set_directive", "throttled")
