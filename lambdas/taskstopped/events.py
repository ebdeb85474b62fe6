"""EventBridge "ECS Task State Change" events: parsing, building, and a memory of handled ones.

Pure: no clock, no AWS. The worker id is the ECS task id (``worker.config.ecs_task_id`` takes
the last path segment of the task ARN), so an event names its session with no lookup.

Only ``lastStatus`` STOPPED means the containers are gone. STOPPING, DEPROVISIONING and the
rest still have a process that may be shutting down gracefully: that path (SIGTERM, release,
end) or the session TTL handles it, so those events are skipped, never acted on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from holdfast.core.model import validate_worker_id

__all__ = ["DETAIL_TYPE", "SOURCE", "STOPPED", "HandledTasks", "Skip", "TaskStopped",
           "parse_event", "task_stopped_event"]

SOURCE = "aws.ecs"
DETAIL_TYPE = "ECS Task State Change"
STOPPED = "STOPPED"
MEMORY_SIZE = 4_096  # task stops remembered by a warm container (a few hundred bytes each)


@dataclass(frozen=True, slots=True)
class TaskStopped:
    """A stopped task: its worker id, when it stopped (None: not said) and why."""

    worker_id: str
    stopped_at_ms: int | None
    reason: str
    cluster_arn: str = ""
    group: str = ""

    @property
    def key(self) -> tuple[str, int | None]:
        """What makes two events the same stop (a reused id with a later stop is another)."""
        return self.worker_id, self.stopped_at_ms


@dataclass(frozen=True, slots=True)
class Skip:
    """An event not acted on, and why (``malformed``: it should be logged as an error)."""

    reason: str
    malformed: bool = False


def _iso_ms(text: object) -> int | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:  # ECS always says Z; a naive time is taken as UTC, not local
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_event(event: object) -> TaskStopped | Skip:
    """The stopped task an event reports, or why it is skipped. Never raises."""
    if not isinstance(event, Mapping):
        return Skip(f"not an object: {type(event).__name__}", malformed=True)
    detail = event.get("detail")
    if event.get("detail-type", DETAIL_TYPE) != DETAIL_TYPE or not isinstance(detail, Mapping):
        return Skip(f"not an {DETAIL_TYPE} event", malformed=True)
    status = detail.get("lastStatus")
    if not isinstance(status, str) or not status:
        return Skip("detail.lastStatus is missing", malformed=True)
    if status != STOPPED:
        return Skip(f"task is {status[:40]}, not {STOPPED} (its graceful stop handles it)")
    arn = detail.get("taskArn")
    task_id = arn.rsplit("/", 1)[-1] if isinstance(arn, str) else ""
    try:
        worker_id = validate_worker_id(task_id)
    except ValueError:
        return Skip(f"detail.taskArn {str(arn)[:120]!r} names no task id", malformed=True)
    raw_stop = detail.get("stoppedAt")
    stopped_at = _iso_ms(raw_stop)
    if raw_stop is not None and stopped_at is None:
        return Skip(f"detail.stoppedAt {str(raw_stop)[:40]!r} is not an ISO-8601 time",
                    malformed=True)
    # No stoppedAt: None, never the envelope's time. That time is later than the stop, so it
    # would let a report kill a session that heartbeated after the stop; without a stop time
    # an ALIVE session is left to the sweeper, at its own TTL (``Reaper.report_dead``).
    reason = detail.get("stoppedReason")
    return TaskStopped(worker_id, stopped_at,
                       reason[:200] if isinstance(reason, str) and reason else "task stopped",
                       _text(detail.get("clusterArn")), _text(detail.get("group")))


def _text(value: object) -> str:
    return value[:300] if isinstance(value, str) else ""


def task_stopped_event(worker_id: str, *, stopped_at_ms: int, reason: str = "task stopped",
                       cluster_arn: str = "arn:aws:ecs:local:000000000000:cluster/holdfast",
                       group: str = "service:holdfast-worker",
                       last_status: str = STOPPED) -> dict[str, Any]:
    """The event ECS would emit for ``worker_id``'s task (the CLI, ``holdfast up``, tests)."""
    cluster = cluster_arn.rsplit("/", 1)[-1]
    when = datetime.fromtimestamp(stopped_at_ms / 1000, UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    prefix = cluster_arn.split(":cluster/", 1)[0]
    return {
        "version": "0", "source": SOURCE, "detail-type": DETAIL_TYPE, "time": when[:19] + "Z",
        "resources": [f"{prefix}:task/{cluster}/{worker_id}"],
        "detail": {"lastStatus": last_status, "desiredStatus": STOPPED,
                   "taskArn": f"{prefix}:task/{cluster}/{worker_id}",
                   "clusterArn": cluster_arn, "group": group, "stoppedAt": when,
                   "stoppedReason": reason, "stopCode": "EssentialContainerExited"},
    }


class HandledTasks:
    """The stops a warm container already handled (bounded, oldest forgotten first).

    Only a shortcut: EventBridge delivers at least once and ECS repeats STOPPED, but every
    write of a report is conditional, so a forgotten or concurrent duplicate is harmless.
    """

    def __init__(self, size: int = MEMORY_SIZE) -> None:
        self.size = size
        self._seen: OrderedDict[tuple[str, int | None], None] = OrderedDict()

    def __contains__(self, stop: TaskStopped) -> bool:
        return stop.key in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, stop: TaskStopped) -> None:
        self._seen[stop.key] = None
        self._seen.move_to_end(stop.key)
        while len(self._seen) > self.size:
            self._seen.popitem(last=False)
