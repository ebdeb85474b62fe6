"""One held stream's lease state: its transitions, renewals, fence deadline and checkpoint."""

from __future__ import annotations

import pytest

from holdfast.core.model import Lease
from holdfast.worker.delivery import Step
from holdfast.worker.held import NO_FENCE_MS, HeldState, HeldStream

LEASE = Lease("c-1", "w#1", 3, 10_000, "wss://example.com/s", 4)
FINAL = [HeldState.ABORTED, HeldState.FENCED, HeldState.LOST, HeldState.RELEASED]


def held(**kw: object) -> HeldStream:
    kw.setdefault("fence_mono_ms", 5_000)
    return HeldStream(LEASE, **kw)  # type: ignore[arg-type]


def stop(h: HeldStream, state: HeldState) -> bool:
    """Move ``h`` to ``state`` the one way there is."""
    return {HeldState.RUNNING: h.started, HeldState.DRAINING: lambda: h.drain("shutdown"),
            HeldState.ABORTED: lambda: h.abort("shutdown-timeout"), HeldState.FENCED: h.fence,
            HeldState.LOST: lambda: h.lose("lost"), HeldState.RELEASED: h.close}[state]()


def test_a_claim_starts_from_the_lease() -> None:
    """A new HeldStream is CLAIMED, live, not stopping, checkpointed at the lease's last_seq."""
    h = held()
    assert (h.state, h.live, h.stopping, h.stop_reason) == (HeldState.CLAIMED, True, False, None)
    assert (h.lease, h.checkpoint) == (LEASE, 4)
    assert (h.cursor.next_seq, h.cursor.handled) == (5, 0)


def test_started_runs_once() -> None:
    """CLAIMED -> RUNNING; a second ``started`` is a no-op."""
    h = held()
    assert h.started() and h.state is HeldState.RUNNING
    assert not h.started() and h.state is HeldState.RUNNING


@pytest.mark.parametrize("first", [HeldState.CLAIMED, HeldState.RUNNING])
def test_drain_keeps_the_first_reason(first: HeldState) -> None:
    """CLAIMED or RUNNING -> DRAINING, still live; a second drain keeps the first reason."""
    h = held()
    if first is HeldState.RUNNING:
        h.started()
    assert h.drain("stopped") and not h.drain("shutdown")
    assert (h.state, h.stop_reason, h.live, h.stopping) == (
        HeldState.DRAINING, "stopped", True, True)


@pytest.mark.parametrize("target", FINAL)
@pytest.mark.parametrize("first", [HeldState.CLAIMED, HeldState.RUNNING, HeldState.DRAINING])
def test_every_live_state_can_end_each_way(first: HeldState, target: HeldState) -> None:
    """Abort, fence, lose and close end a CLAIMED, RUNNING or DRAINING stream."""
    h = held()
    if first is not HeldState.CLAIMED:
        h.started()
    if first is HeldState.DRAINING:
        h.drain("shutdown")
    assert stop(h, target) and h.state is target and not h.live


def test_stop_reasons() -> None:
    """The reason says why: fenced, lost:<why>, the abort's reason; a close adds none."""
    cases = {HeldState.ABORTED: "shutdown-timeout", HeldState.FENCED: "fenced",
             HeldState.LOST: "lost:lost", HeldState.RELEASED: None}
    for state, reason in cases.items():
        h = held()
        stop(h, state)
        assert h.stop_reason == reason


@pytest.mark.parametrize("later", [HeldState.RUNNING, HeldState.DRAINING, *FINAL])
@pytest.mark.parametrize("final", FINAL)
def test_final_states_are_final(final: HeldState, later: HeldState) -> None:
    """Once ABORTED, FENCED, LOST or RELEASED, no transition changes state or reason."""
    h = held()
    stop(h, final)
    reason = h.stop_reason
    assert not stop(h, later)
    assert (h.state, h.stop_reason) == (final, reason)


def test_renewal_keeps_the_lease_and_moves_the_fence() -> None:
    """A landed renewal replaces the lease and, when given, the fence deadline."""
    h = held()
    longer = Lease("c-1", "w#1", 3, 20_000, "wss://example.com/s", 4)
    assert h.renewed(longer, 9_000) and (h.lease, h.fence_mono_ms) == (longer, 9_000)
    checkpoint_only = Lease("c-1", "w#1", 3, 20_000, "wss://example.com/s", 6)
    assert h.renewed(checkpoint_only) and (h.lease, h.fence_mono_ms) == (checkpoint_only, 9_000)


@pytest.mark.parametrize("final", FINAL)
def test_renewal_after_the_stop_is_ignored(final: HeldState) -> None:
    """A renewal that lands after the stream stopped changes neither lease nor fence."""
    h = held()
    stop(h, final)
    later = Lease("c-1", "w#1", 3, 20_000, "wss://example.com/s", 4)
    assert not h.renewed(later, 9_000) and (h.lease, h.fence_mono_ms) == (LEASE, 5_000)


@pytest.mark.parametrize("other", [Lease("c-2", "w#1", 3, 1, "wss://x", None),
                                   Lease("c-1", "w#1", 4, 1, "wss://x", None)])
def test_renewal_of_another_lease_is_a_bug(other: Lease) -> None:
    """A renewal of another stream or epoch raises instead of replacing the lease."""
    with pytest.raises(ValueError):
        held().renewed(other)


def test_deadline_is_the_earlier_of_lease_and_session_fence() -> None:
    """The stream stops at its own fence or its session's, whichever comes first."""
    session = [9_000]
    h = held(session_fence=lambda: session[0])
    assert h.deadline() == 5_000
    session[0] = 4_000
    assert h.deadline() == 4_000
    assert held().deadline() == 5_000 and NO_FENCE_MS > 5_000


def test_admit_applies_the_delivery_rules_at_the_deadline() -> None:
    """``admit`` fences at the combined deadline and skips replays of the lease's last_seq."""
    h = held(session_fence=lambda: 3_000)
    assert h.admit(4, 0).step is Step.SKIP_REPLAY
    assert h.admit(5, 2_999).step is Step.DELIVER
    assert h.admit(5, 3_000).step is Step.FENCED


def test_done_moves_the_checkpoint_forward_only() -> None:
    """``done`` after the handler returned moves the checkpoint, never backwards."""
    h = held()
    h.cursor.done(7)
    h.cursor.done(5)
    assert (h.checkpoint, h.cursor.next_seq, h.cursor.handled) == (7, 8, 2)


def test_anchor_of_a_never_checkpointed_stream() -> None:
    """A lease without last_seq asks for an anchor at seq - 1, once."""
    h = HeldStream(Lease("c-1", "w#1", 3, 1, "wss://x", None), fence_mono_ms=NO_FENCE_MS)
    assert h.checkpoint is None and h.cursor.anchor_for(10) == 9
    h.cursor.anchored(9)
    assert h.checkpoint == 9 and h.cursor.anchor_for(10) is None
