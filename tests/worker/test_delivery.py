"""The delivery rules of one held stream, as a pure cursor: no socket, clock or DynamoDB."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdfast.core import names
from holdfast.worker.delivery import Delivery, Step, Verdict

FAR = 2**62  # a fence deadline that never comes


def test_next_message_is_delivered() -> None:
    """checkpoint + 1 is delivered, with no gap."""
    assert Delivery(4).admit(5, 0, FAR) == Verdict(Step.DELIVER)


@pytest.mark.parametrize("seq", [4, 3, 0, -7])
def test_replay_at_or_below_the_checkpoint_is_skipped(seq: int) -> None:
    """A seq at or below the checkpoint is a replay (resume overlap): not delivered."""
    assert Delivery(4).admit(seq, 0, FAR).step is Step.SKIP_REPLAY


def test_a_connection_closed_after_replays_only_says_so() -> None:
    """A connection that re-sent only seqs at or below the checkpoint and closed: its failure
    says so (an upstream ignoring the resume point gave up as "closed the connection"); one
    that delivered, or sent nothing, is a plain close; each connection counts afresh."""
    cursor = Delivery(300)
    for seq in range(250, 301):
        cursor.admit(seq, 0, FAR)
    assert cursor.closed_why(300) == (
        "upstream closed the connection after re-sending only seqs at or below the checkpoint "
        "300 (51 of them): is it ignoring the resume point?")
    cursor.connected()
    assert cursor.closed_why(300) == "upstream closed the connection"
    cursor.admit(300, 0, FAR)
    cursor.admit(301, 0, FAR)
    cursor.done(301)
    assert cursor.closed_why(300) == "upstream closed the connection"


def test_gap_is_reported_and_delivered() -> None:
    """A jump past checkpoint + 1 names the expected seq and is delivered all the same."""
    verdict = Delivery(4).admit(9, 0, FAR)
    assert verdict == Verdict(Step.GAP, expected=5)


def test_past_the_fence_nothing_is_delivered() -> None:
    """At or after the fence deadline a frame is FENCED, whatever its seq."""
    cursor = Delivery(4)
    for seq in (5, 9, None):
        assert cursor.admit(seq, 1000, 1000).step is Step.FENCED
        assert cursor.admit(seq, 1001, 1000).step is Step.FENCED
    assert cursor.admit(5, 999, 1000).step is Step.DELIVER


def test_replay_is_skipped_even_past_the_fence() -> None:
    """A replay is skipped before the fence is looked at: it reaches no handler either way."""
    assert Delivery(4).admit(4, 2000, 1000).step is Step.SKIP_REPLAY


def test_frame_without_seq_is_delivered_and_moves_nothing() -> None:
    """A frame without a seq is delivered and leaves the checkpoint where it was."""
    cursor = Delivery(4)
    assert cursor.admit(None, 0, FAR).step is Step.DELIVER
    cursor.done(None)
    assert (cursor.checkpoint, cursor.handled) == (4, 1)


def test_checkpoint_moves_only_when_the_handler_returned() -> None:
    """Admitting a frame moves nothing; ``done`` (the handler returned) moves the checkpoint."""
    cursor = Delivery(4)
    cursor.admit(5, 0, FAR)
    assert (cursor.checkpoint, cursor.handled, cursor.next_seq) == (4, 0, 5)
    cursor.done(5)
    assert (cursor.checkpoint, cursor.handled, cursor.next_seq) == (5, 1, 6)


def test_checkpoint_never_goes_back() -> None:
    """A lower seq handled after a higher one leaves the checkpoint at the higher."""
    cursor = Delivery(4)
    cursor.done(9)
    cursor.done(6)
    assert cursor.checkpoint == 9 and cursor.handled == 2


def test_never_checkpointed_stream_is_anchored_before_its_first_seq() -> None:
    """With no checkpoint, the first seq asks for an anchor at seq - 1; then it is delivered."""
    cursor = Delivery(None)
    assert cursor.next_seq is None and cursor.anchor_for(None) is None
    assert cursor.anchor_for(10) == 9
    cursor.anchored(9)
    assert cursor.anchor_for(10) is None and cursor.admit(10, 0, FAR).step is Step.DELIVER


def test_anchor_never_moves_an_existing_checkpoint() -> None:
    """``anchored`` is a no-op once the stream has a checkpoint."""
    cursor = Delivery(4)
    assert cursor.anchor_for(10) is None
    cursor.anchored(99)
    assert cursor.checkpoint == 4


def test_unanchored_cursor_delivers_without_skip_or_gap() -> None:
    """Without a checkpoint nothing is a replay or a gap; ``done`` gives it its first one."""
    cursor = Delivery(None)
    assert cursor.admit(50, 0, FAR).step is Step.DELIVER
    cursor.done(50)
    assert cursor.checkpoint == 50


def test_a_seq_too_far_ahead_is_refused_and_moves_nothing() -> None:
    """A seq past checkpoint + max_jump is REFUSED_JUMP; the next normal frame still flows."""
    cursor = Delivery(4, max_jump=10)
    assert cursor.admit(2**63 - 1, 0, FAR) == Verdict(Step.REFUSED_JUMP, expected=5, streak=1)
    assert cursor.checkpoint == 4
    assert cursor.admit(14, 0, FAR) == Verdict(Step.GAP, expected=5)  # at the bound: a gap
    assert cursor.admit(15, 0, FAR).step is Step.REFUSED_JUMP
    assert cursor.admit(5, 0, FAR).step is Step.DELIVER


def test_no_jump_bound_without_a_checkpoint_or_a_limit() -> None:
    """The first seq of a new stream and any seq without a limit are taken as they come."""
    assert Delivery(None, max_jump=10).admit(10**9, 0, FAR).step is Step.DELIVER
    assert Delivery(4).admit(2**63 - 1, 0, FAR).step is Step.GAP


def test_a_seq_that_goes_back_on_one_connection_is_visible() -> None:
    """After a delivered frame, a seq at or below the checkpoint is WENT_BACK, not a replay."""
    cursor = Delivery(4)
    assert cursor.admit(5, 0, FAR).step is Step.DELIVER
    cursor.done(5)
    assert cursor.admit(5, 0, FAR) == Verdict(Step.WENT_BACK, expected=6, streak=1)
    assert cursor.admit(2, 0, FAR) == Verdict(Step.WENT_BACK, expected=6, streak=2)
    assert cursor.checkpoint == 5
    cursor.connected()  # a new connection: its first replays are an overlap again
    assert cursor.admit(3, 0, FAR).step is Step.SKIP_REPLAY


def test_a_reset_far_below_the_checkpoint_went_back_to_the_end() -> None:
    """A replay further back than the overlap is WENT_BACK, and so is every replay after it."""
    cursor = Delivery(500, overlap=100)
    assert cursor.admit(401, 0, FAR).step is Step.SKIP_REPLAY  # within the overlap
    cursor.connected()
    steps = [cursor.admit(seq, 0, FAR).step for seq in (1, 2, 450, 500)]
    assert steps == [Step.WENT_BACK] * 4 and cursor.checkpoint == 500


def test_a_stream_that_cannot_progress_stalls() -> None:
    """The stall_after-th out-of-contract frame in a row is STALLED, naming its cause."""
    cursor = Delivery(500, max_jump=10, overlap=100, stall_after=3)
    assert cursor.admit(1, 0, FAR).streak == 1
    assert cursor.admit(None, 0, FAR).step is Step.DELIVER  # no seq: no progress either
    assert cursor.admit(2, 0, FAR) == Verdict(Step.WENT_BACK, expected=501, streak=2)
    assert cursor.admit(3, 0, FAR) == Verdict(Step.STALLED, 501, 3, cause=Step.WENT_BACK)
    cursor.connected()
    assert cursor.admit(10**9, 0, FAR).step is Step.REFUSED_JUMP
    assert cursor.admit(501, 0, FAR).step is Step.DELIVER  # progress: the streak starts over
    cursor.done(501)
    for n in (1, 2):
        assert cursor.admit(10**9, 0, FAR) == Verdict(Step.REFUSED_JUMP, 502, n)
    assert cursor.admit(10**9, 0, FAR) == Verdict(Step.STALLED, 502, 3, cause=Step.REFUSED_JUMP)
    assert cursor.checkpoint == 501


frames = st.lists(st.one_of(st.none(), st.just("connect"), st.integers(-5, 60),
                            st.just(2**63 - 1)), max_size=80)


@given(start=st.one_of(st.none(), st.integers(0, 40)), script=frames)
def test_checkpoint_never_passes_a_handled_seq(start: int | None, script: list[object]) -> None:
    """Whatever the upstream sends, the checkpoint is the start or the highest seq handled."""
    cursor = Delivery(start, max_jump=20, overlap=5, stall_after=4)
    floor, handled = start, []
    for item in script:
        if item == "connect":
            cursor.connected()
            continue
        seq = item if isinstance(item, int) else None
        anchor = cursor.anchor_for(seq)
        if anchor is not None:
            cursor.anchored(anchor)
            floor = anchor  # the starting point written before the first handler call
        before = cursor.checkpoint
        verdict = cursor.admit(seq, 0, FAR)
        assert cursor.checkpoint == before  # admitting moves nothing
        if verdict.step is Step.STALLED:
            assert verdict.streak == 4
            break  # the connection gives the stream up
        if verdict.step in (Step.GAP, Step.DELIVER):
            assert seq is None or before is None or seq > before  # a handled seq never again
            handled += [seq] if seq is not None else []
            cursor.done(seq)  # returned or raised: the same for the checkpoint
    marks = [m for m in (floor, *handled) if m is not None]
    assert cursor.checkpoint == (max(marks) if marks else None)


def test_a_warm_connection_skips_what_the_holder_handled_since_its_resume_point() -> None:
    """A warm handoff's socket asked to resume from 101 while the holder went on to 600: its
    101..600 are the resume overlap, however far below the checkpoint (WENT_BACK, then
    STALLED after 100: a fast stream's handoff gave it up); 601 is delivered; a seq below the
    resume point still went back."""
    cursor = Delivery(600, overlap=100)
    cursor.connected(resumed_from=101)
    assert {cursor.admit(seq, 0, FAR).step for seq in range(101, 601)} == {Step.SKIP_REPLAY}
    assert cursor.admit(601, 0, FAR) == Verdict(Step.DELIVER)
    cursor.connected(resumed_from=101)
    assert cursor.admit(100, 0, FAR).step is Step.WENT_BACK


def test_a_frame_without_a_seq_inside_a_replay_is_skipped_with_it() -> None:
    """Seq-less frames between a replayed seq and the checkpoint's seq are replays (a warm
    handoff's buffer: the holder handled them); before the replay and after it, delivered."""
    cursor = Delivery(600, overlap=100)
    cursor.connected(resumed_from=101)
    steps = [cursor.admit(seq, 0, FAR).step for seq in (None, 101, None, 599, None, 600, None)]
    assert steps == [Step.DELIVER, Step.SKIP_REPLAY, Step.SKIP_REPLAY, Step.SKIP_REPLAY,
                     Step.SKIP_REPLAY, Step.SKIP_REPLAY, Step.DELIVER]
    assert cursor.admit(601, 0, FAR).step is Step.DELIVER
    assert cursor.admit(None, 0, FAR).step is Step.DELIVER


def test_a_replay_that_ends_without_the_checkpoints_seq_delivers_what_follows() -> None:
    """A replay that skips straight past the checkpoint (the upstream lost it) ends there:
    the seq-less frame after the next new seq is delivered, and so is every one on a fresh
    connection until a replayed seq comes."""
    cursor = Delivery(10)
    assert cursor.admit(8, 0, FAR).step is Step.SKIP_REPLAY
    assert cursor.admit(None, 0, FAR).step is Step.SKIP_REPLAY
    assert cursor.admit(12, 0, FAR).step is Step.GAP
    assert cursor.admit(None, 0, FAR).step is Step.DELIVER
    cursor.admit(9, 0, FAR)  # went back: out of the overlap, not a replay
    assert cursor.admit(None, 0, FAR).step is Step.DELIVER
    cursor.connected()
    assert cursor.admit(None, 0, FAR).step is Step.DELIVER


def test_the_resume_overlap_ends_just_short_of_overlap_below_the_checkpoint() -> None:
    """A replay within ``overlap`` of the checkpoint, exclusive, is skipped: with overlap 10
    and checkpoint 500, 491 is a replay, 490 went back."""
    cursor = Delivery(500, overlap=10)
    assert cursor.admit(490, 0, FAR) == Verdict(Step.WENT_BACK, expected=501, streak=1)
    cursor.connected()
    assert cursor.admit(491, 0, FAR).step is Step.SKIP_REPLAY


def test_the_defaults_skip_a_100_seq_overlap_and_stall_on_the_100th_bad_frame() -> None:
    """By default (RESUME_OVERLAP, STALL_AFTER) a replay less than 100 below the checkpoint
    is skipped, and the 100th out-of-contract frame in a row stalls the stream."""
    cursor = Delivery(500)
    assert cursor.admit(401, 0, FAR).step is Step.SKIP_REPLAY
    cursor.connected()
    assert cursor.admit(400, 0, FAR).step is Step.WENT_BACK  # streak 1
    assert [cursor.admit(1, 0, FAR).step for _ in range(98)] == [Step.WENT_BACK] * 98
    assert cursor.admit(1, 0, FAR) == Verdict(Step.STALLED, 501, 100, cause=Step.WENT_BACK)


def test_a_new_connection_counts_its_out_of_contract_frames_afresh() -> None:
    """``connected()`` restarts the streak: the new connection's first bad frame is streak 1,
    and it stalls only after ``stall_after`` bad frames of its own."""
    cursor = Delivery(500, max_jump=10, stall_after=3)
    assert cursor.admit(1, 0, FAR).streak == 1
    assert cursor.admit(2, 0, FAR).streak == 2
    cursor.connected()
    assert cursor.admit(10**9, 0, FAR) == Verdict(Step.REFUSED_JUMP, 501, 1)
    assert cursor.admit(10**9, 0, FAR) == Verdict(Step.REFUSED_JUMP, 501, 2)
    assert cursor.admit(10**9, 0, FAR) == Verdict(Step.STALLED, 501, 3, cause=Step.REFUSED_JUMP)


def test_an_out_of_contract_verdict_explains_itself_to_an_operator() -> None:
    """A seq that went back (or a stall it caused) names the seq, the checkpoint and an
    upstream reset; a refused jump (or its stall) names the jump bound's variable."""
    cursor = Delivery(500, max_jump=10, stall_after=2)
    went = cursor.admit(3, 0, FAR)
    what, fix = went.explain(3)
    assert "went back to 3" in what and "checkpoint 500" in what and "upstream reset?" in fix
    stalled = cursor.admit(3, 0, FAR)
    assert stalled.step is Step.STALLED and stalled.explain(3) == (what, fix)
    cursor.connected()
    jumped = cursor.admit(10**9, 0, FAR)
    what, fix = jumped.explain(10**9)
    assert f"jumps to {10**9}" in what and "checkpoint 500" in what
    assert names.ENV_MAX_SEQ_JUMP in what and names.ENV_MAX_SEQ_JUMP in fix
    stalled = cursor.admit(10**9, 0, FAR)
    assert stalled.step is Step.STALLED and stalled.explain(10**9) == (what, fix)
