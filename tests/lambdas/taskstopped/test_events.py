"""ECS task state change events: what counts as stopped, malformed events, repeats (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.lambdas.taskstopped.events import (
    HandledTasks,
    Skip,
    TaskStopped,
    parse_event,
    task_stopped_event,
)

STOP_MS = 1_764_633_600_123  # 2025-12-02T00:00:00.123Z


def test_a_stopped_event_names_the_task_id_its_stop_time_and_reason() -> None:
    """The worker id is the task ARN's last segment; stoppedAt becomes epoch ms."""
    event = task_stopped_event("0123abcd", stopped_at_ms=STOP_MS, reason="OOM",
                               cluster_arn="arn:aws:ecs:eu-west-1:111122223333:cluster/prod",
                               group="service:prod-worker")
    assert event["detail"]["taskArn"] == "arn:aws:ecs:eu-west-1:111122223333:task/prod/0123abcd"
    assert event["detail"]["stoppedAt"] == "2025-12-02T00:00:00.123Z"
    assert parse_event(event) == TaskStopped(
        "0123abcd", STOP_MS, "OOM", "arn:aws:ecs:eu-west-1:111122223333:cluster/prod",
        "service:prod-worker")


@pytest.mark.parametrize("status", ["STOPPING", "RUNNING", "DEPROVISIONING", "PENDING"])
def test_any_other_last_status_is_treated_as_alive(status: str) -> None:
    """Only STOPPED acts: a stopping task may still be releasing its streams gracefully."""
    out = parse_event(task_stopped_event("t1", stopped_at_ms=STOP_MS, last_status=status))
    assert isinstance(out, Skip) and not out.malformed and status in out.reason


def _detail(**changes: Any) -> dict[str, Any]:
    event = task_stopped_event("t1", stopped_at_ms=STOP_MS)
    event["detail"].update(changes)
    return {k: v for k, v in event.items()}


@pytest.mark.parametrize("event", [
    None, "STOPPED", [], {}, {"detail": "x"}, {"detail-type": "Other", "detail": {}},
    _detail(lastStatus=None), _detail(lastStatus=7), _detail(taskArn=None),
    _detail(taskArn="arn:aws:ecs:r:1:task/c/"), _detail(taskArn="arn:aws:ecs:r:1:task/c/a b"),
    _detail(stoppedAt="yesterday"), _detail(stoppedAt=12),
], ids=lambda e: repr(e)[:40])
def test_malformed_events_are_skipped_never_raised(event: Any) -> None:
    """Anything that is not a well-formed STOPPED event is a malformed skip, not an error."""
    out = parse_event(event)
    assert isinstance(out, Skip) and out.malformed, out


def test_without_stopped_at_the_stop_time_is_unknown() -> None:
    """No stoppedAt: no stop time at all, never the envelope's later time, so the reaper waits
    for the session's TTL instead of trusting a weaker guard (finding 4)."""
    event = _detail()
    del event["detail"]["stoppedAt"]
    out = parse_event(event)
    assert isinstance(out, TaskStopped) and out.stopped_at_ms is None


def test_handled_tasks_remember_repeats_and_forget_the_oldest() -> None:
    """A repeat of a handled stop is known; a reused id with a later stop is not; bounded."""
    memory = HandledTasks(size=2)
    a, a_later, b = (TaskStopped("a", 1, "x"), TaskStopped("a", 2, "x"),
                     TaskStopped("b", 1, "x"))
    memory.add(a)
    assert a in memory and TaskStopped("a", 1, "other reason") in memory
    assert a_later not in memory
    memory.add(b)
    memory.add(a_later)
    assert len(memory) == 2 and a not in memory and b in memory and a_later in memory
