"""Worker auto scaling: track average connections per task, and scale out on unclaimed work.

Average load alone never scales out when every worker is full: new streams just wait while the
average sits at the maximum. So a second, step policy watches the sweeper's ``OldestOrphanAge``
(how long the oldest claimable STARTED stream has gone without an owner: one no worker took
within a visibility timeout is work nobody has room for) and adds tasks; the target-tracking
policy alone decides when to scale back in.

Not the nudge queue's ``ApproximateAgeOfOldestMessage``: a stream in back-off (an upstream
that keeps failing) has its nudge delayed or held invisible until the back-off ends, up to 15
minutes, and SQS counts a message not yet deleted in that age: one broken upstream could add
tasks in steps up to the maximum. The orphan age counts a stream only once it is claimable.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from holdfast.core import names, schema
from holdfast.infra.metrics import holdfast_metric

__all__ = ["BACKLOG_STEPS", "WorkerScaling"]

# (oldest claimable stream's time unowned in seconds, tasks to add). Below the first step
# nothing happens: a stream is normally claimed within a second, and one unowned longer than a
# nudge's visibility timeout was left alone.
BACKLOG_STEPS: Final = ((schema.QUEUE_VISIBILITY_TIMEOUT_S, 1), (120, 2), (300, 4))


class WorkerScaling(Construct):
    """Scalable task count between ``min_tasks`` and ``max_tasks`` with both policies."""

    def __init__(self, scope: Construct, construct_id: str, *, service: ecs.FargateService,
                 service_name: str, sweeper_service_name: str, min_tasks: int,
                 max_tasks: int, target_connections_per_task: int) -> None:
        super().__init__(scope, construct_id)
        self.task_count = service.auto_scale_task_count(min_capacity=min_tasks,
                                                         max_capacity=max_tasks)
        self.task_count.scale_to_track_custom_metric(
            "ConnectionsPerTask",
            metric=holdfast_metric(names.METRIC_ACTIVE_CONNECTIONS, service_name, "Average"),
            target_value=target_connections_per_task,
            # Out fast, in slowly: scaling in moves every lease of the stopped task.
            scale_out_cooldown=Duration.minutes(1),
            scale_in_cooldown=Duration.minutes(10),
        )
        first, *_ = BACKLOG_STEPS
        self.task_count.scale_on_metric(
            "UnclaimedStreams",
            # In milliseconds, as the sweeper reports it once per run (about a minute).
            metric=holdfast_metric(names.METRIC_OLDEST_ORPHAN_AGE, sweeper_service_name,
                                   "Maximum"),
            scaling_steps=[
                appscaling.ScalingInterval(upper=first[0] * 1000, change=0),
                *(appscaling.ScalingInterval(lower=age * 1000, change=add)
                  for age, add in BACKLOG_STEPS),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=Duration.minutes(2),
            # 2 of 3: a sweeper run's end crossing a minute boundary leaves a minute without a
            # datapoint (as the StreamsUnowned alarm on the same metric counts).
            evaluation_periods=3,
            datapoints_to_alarm=2,
        )
