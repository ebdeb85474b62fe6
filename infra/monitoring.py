"""The fleet's dashboard and alarms, and the SNS topic the alarms notify."""

from __future__ import annotations

import math

from aws_cdk import Aws, Duration, Fn
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from holdfast.core import names
from holdfast.core.settings import GIVE_UP_RETRY_CAP_S
from holdfast.infra.dashboard import build_dashboard
from holdfast.infra.metrics import (
    MINUTE,
    FleetParts,
    holdfast_metric,
    running_tasks,
    throttle_events,
)

__all__ = ["ALARM_WINDOW", "GIVE_UP_WINDOWS", "Monitoring", "summed", "unowned_time_threshold_ms"]

# Alarms on "did this happen at all" sum over this window: one event is worth a look, and a
# window longer than a minute gives one alarm per incident rather than one that flaps.
ALARM_WINDOW = Duration.minutes(5)
# A stream that keeps giving up does so again within its retry cap plus its reconnect attempts
# (six, a few minutes at most): StreamsGivingUp looks back one window more than the cap, so it
# stays in ALARM while a stream keeps failing (it notified ALARM and OK at every retry).
GIVE_UP_WINDOWS = math.ceil(GIVE_UP_RETRY_CAP_S / ALARM_WINDOW.to_seconds()) + 1  # 5-min windows
_GTE = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
_GT = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
_LT = cw.ComparisonOperator.LESS_THAN_THRESHOLD


def unowned_time_threshold_ms(lease_ms: int) -> int:
    """The p99 unowned time above which handovers are slower than the design allows.

    Unowned time runs from a dead holder's last heartbeat, so a crash alone costs a lease
    (the session's TTL) plus the skew allowance plus a sweep: one lease would be exceeded by
    every crash, which the DeadSessions alarm already reports. The settings keep the skew
    below the lease minus a second and two heartbeats, so a crash's handover stays under two
    leases, and anything above that is a stuck pipeline (no capacity, router or sweeper
    behind), not a crash.
    """
    return 2 * lease_ms


def summed(label: str, **metrics: cw.Metric) -> cw.MathExpression:
    """The sum of ``metrics``, each filled with 0 where it has no data (a function that did
    not run, or had nothing to count, must not hide the other's count)."""
    return cw.MathExpression(expression=" + ".join(f"FILL({k}, 0)" for k in metrics),
                             using_metrics=dict(metrics), label=label)


class Monitoring(Construct):
    """Alarms (to ``topic``) and one dashboard; ``dashboard_url`` opens it in the console."""

    def __init__(self, scope: Construct, construct_id: str, *, parts: FleetParts,
                 lease_ms: int, alarm_email: str | None) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Alarms", display_name="Holdfast alarms", enforce_ssl=True)
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self.alarms = [*self._pipeline_alarms(parts, lease_ms),
                       *self._worker_alarms(parts, lease_ms),
                       *self._handler_failure_alarms(parts),
                       *self._throttle_alarms(parts)]
        action = cw_actions.SnsAction(self.topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.dashboard = build_dashboard(self, "Dashboard", parts=parts, alarms=self.alarms)
        self.dashboard_url = Fn.join("", [
            "https://", Aws.REGION, ".console.aws.amazon.com/cloudwatch/home?region=",
            Aws.REGION, "#dashboards:name=", self.dashboard.dashboard_name])

    def _alarm(self, alarm_id: str, description: str, metric: cw.IMetric, threshold: float, *,
               periods: int = 1, of: int | None = None,
               comparison: cw.ComparisonOperator = _GTE,
               missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING) -> cw.Alarm:
        """Alarm when ``periods`` datapoints of the last ``of`` (default: ``periods``) breach."""
        return cw.Alarm(self, alarm_id, alarm_description=description, metric=metric,
                        threshold=threshold, evaluation_periods=of or periods,
                        datapoints_to_alarm=periods, comparison_operator=comparison,
                        treat_missing_data=missing)

    def _any(self, alarm_id: str, description: str,
             metric: cw.Metric | cw.MathExpression, *, windows: int = 1) -> cw.Alarm:
        """An alarm on a count that should stay zero: sum > 0 in any of the last ``windows``
        :data:`ALARM_WINDOW` (an expression's metrics summed each)."""
        if isinstance(metric, cw.MathExpression):
            summed = cw.MathExpression(
                expression=metric.expression, label=metric.label, period=ALARM_WINDOW,
                using_metrics={k: m.with_(period=ALARM_WINDOW, statistic="Sum")
                               for k, m in metric.using_metrics.items()
                               if isinstance(m, cw.Metric)})
            return self._alarm(alarm_id, description, summed, 0, of=windows, comparison=_GT)
        return self._alarm(alarm_id, description, metric.with_(period=ALARM_WINDOW,
                                                               statistic="Sum"),
                           0, of=windows, comparison=_GT)

    def _pipeline_alarms(self, p: FleetParts, lease_ms: int) -> list[cw.Alarm]:
        """Nudges, router and sweeper: is every wanted stream on its way to an owner?"""
        sweeper = p.service_names["sweeper"]
        return [
            self._alarm(
                "DeadLettersNotEmpty",
                "Nudges no worker could act on were parked in the DLQ: inspect them (their "
                "streams are re-nudged by the sweeper while unowned; the queue takes no "
                "redrive, only the fleet's roles may send to it).",
                p.dlq.metric_approximate_number_of_messages_visible(
                    period=MINUTE, statistic="Maximum"), 1),
            self._alarm(
                "RouterFailuresNotEmpty",
                "The router gave up on stream records after every retry (see the queue).",
                p.router_failures.metric_approximate_number_of_messages_visible(
                    period=MINUTE, statistic="Maximum"), 1),
            self._alarm(
                "TaskStoppedFailuresNotEmpty",
                "Task-stopped events were not delivered to the task-stopped function, or it "
                "failed on them after its retries (see the queue): those stopped tasks' "
                "sessions waited for the sweeper (a lease) instead of being declared dead at "
                "once. TaskStoppedErrors does not see an event EventBridge could not deliver.",
                p.task_stopped_failures.metric_approximate_number_of_messages_visible(
                    period=MINUTE, statistic="Maximum"), 1),
            self._alarm("RouterErrors", "The router function failed whole batches.",
                        p.router.metric_errors(period=Duration.minutes(5), statistic="Sum"), 1),
            self._alarm("RouterIteratorAge",
                        "The router is more than a minute behind the lease table's stream.",
                        p.router.metric("IteratorAge", period=MINUTE, statistic="Maximum"),
                        60_000, periods=3),
            # The sweeper reports once per run (~59.5 s), so a minute can have no datapoint
            # when a run's end crosses a minute boundary: 2 of 3, not 2 in a row. A run whose
            # sweeps all failed reports no age at all (SweepsFailing covers it).
            self._alarm("StreamsUnowned",
                        "A wanted (STARTED) stream has had no owner, or an owner whose "
                        "session is not live (stranded), for longer than a lease.",
                        holdfast_metric(names.METRIC_OLDEST_ORPHAN_AGE, sweeper, "Maximum"),
                        lease_ms, periods=2, of=3, comparison=_GT),
            self._alarm(
                "SweepsFailing",
                "Over 5 minutes at least as many of the sweeper's sweeps failed as completed: "
                "it may not see unowned streams, dead sessions or stranded ones (and the "
                "StreamsUnowned alarm cannot fire when no sweep completes, without its "
                "measurement). A failure is a whole sweep's (the sweeper logs \"sweep "
                "failed\") or one of its steps' (\"sweep step failed, the sweep goes on\"), "
                "with the error (permissions, a missing index, throttling).",
                cw.MathExpression(
                    expression="IF(FILL(failed, 0) > 0 AND FILL(failed, 0) >= FILL(done, 0), "
                               "1, 0)",
                    using_metrics={
                        "failed": holdfast_metric(names.METRIC_SWEEP_ERRORS, sweeper).with_(
                            period=ALARM_WINDOW),
                        "done": holdfast_metric(names.METRIC_SWEEPS, sweeper).with_(
                            period=ALARM_WINDOW)},
                    label="sweeps mostly failing", period=ALARM_WINDOW), 1),
            # One item the sweeper cannot write (validation, size, malformed) is skipped and
            # retried every pass, never stopping the others: the alarm is how it gets fixed.
            # A throttled or silent table counts too (the write is retried next pass): the
            # throttle alarms then fire with it, which tells the two apart.
            self._any("ItemErrors",
                      "The sweeper or the router could not write a stream or session item: "
                      "the item's own fault (validation, size, malformed: that stream is not "
                      "released or re-nudged until the item is fixed; the router skips it "
                      "rather than hold the shard), or, for the sweeper, the table refused or "
                      "did not answer (throttling: a throttle alarm fires with this one; "
                      "retried next pass). Their logs name the item and the error.",
                      summed("item errors",
                             sweeper=holdfast_metric(names.METRIC_ITEM_ERRORS, sweeper),
                             router=holdfast_metric(names.METRIC_ITEM_ERRORS,
                                                    p.service_names["router"]))),
            self._alarm("SweeperErrors", "The sweeper function failed.",
                        p.sweeper.metric_errors(period=Duration.minutes(5), statistic="Sum"),
                        1),
            self._alarm("TaskStoppedErrors",
                        "The task-stopped function failed: a stopped task's session waits for "
                        "the sweeper (a lease) instead of being declared dead at once.",
                        p.task_stopped.metric_errors(period=Duration.minutes(5),
                                                     statistic="Sum"), 1),
            # On its completed sweeps, not its invocations: a run that began too late to
            # sweep, or metrics that stopped arriving (POWERTOOLS_METRICS_DISABLED), leave
            # every alarm on the sweeper's measurements quiet while Lambda counts runs.
            self._alarm("SweeperNotSweeping",
                        "The sweeper completed no sweep in 5 minutes (not invoked, every sweep "
                        "failed, or its metrics are not arriving): dead sessions and expired "
                        "leases are not being found, and StreamsUnowned cannot fire.",
                        holdfast_metric(names.METRIC_SWEEPS, sweeper).with_(
                            period=ALARM_WINDOW, statistic="Sum"), 1,
                        comparison=_LT, missing=cw.TreatMissingData.BREACHING),
        ]

    def _worker_alarms(self, p: FleetParts, lease_ms: int) -> list[cw.Alarm]:
        """Workers: running at all, dying silently, losing their grip on streams."""
        worker, sweeper = p.service_names["worker"], p.service_names["sweeper"]
        return [
            self._alarm("NoWorkersRunning", "No worker task is running: no stream is being held.",
                        running_tasks(p.service), 1, periods=3, comparison=_LT,
                        missing=cw.TreatMissingData.BREACHING),
            # Every worker alarm and the scaling policy read the workers' EMF metrics: tasks
            # running that report none (metrics turned off, the log driver dropping lines, a
            # namespace or service name overridden) leave them all quiet. Two 5-minute windows:
            # a task's first report takes up to a minute after it starts.
            self._alarm("WorkerMetricsMissing",
                        "Worker tasks are running but none reported its metrics (the "
                        "ActiveConnections gauge every worker prints each minute) for 10 "
                        "minutes: the worker alarms and the scaling policy are blind. Check the "
                        "worker logs for EMF lines and POWERTOOLS_METRICS_DISABLED, the "
                        "namespace and the service name.",
                        cw.MathExpression(
                            expression="IF(FILL(tasks, 0) > 0 AND FILL(samples, 0) == 0, 1, 0)",
                            using_metrics={
                                "tasks": running_tasks(p.service).with_(period=ALARM_WINDOW),
                                "samples": holdfast_metric(
                                    names.METRIC_ACTIVE_CONNECTIONS, worker,
                                    "SampleCount").with_(period=ALARM_WINDOW)},
                            label="tasks running without metrics", period=ALARM_WINDOW),
                        1, periods=2),
            # A deploy or scale-in ends sessions with a goodbye; only a crash, OOM kill or a
            # worker cut off from DynamoDB for a lease leaves one to be declared dead.
            # Whichever came first declares the death: the sweeper or a worker's reconcile
            # sweep (silent past a lease), or the task-stopped report (ECS saw the task stop
            # before its goodbye). Alone, the sweeper's count missed every death the others
            # won, most with a long lease.
            self._any("DeadSessions",
                      "A worker died without saying goodbye: the sweeper or another worker "
                      "found its session silent past a lease, or ECS reported its task "
                      "stopped first, and its streams were released. Look for the stopped "
                      "task's reason (crash, out of memory) in the worker logs and ECS events.",
                      summed("dead sessions",
                             silent=holdfast_metric(names.METRIC_DEAD_SESSIONS, sweeper),
                             reconciled=holdfast_metric(names.METRIC_DEAD_SESSIONS, worker),
                             reported=holdfast_metric(names.METRIC_REPORTED_DEAD_SESSIONS,
                                                      p.service_names["taskstopped"]))),
            self._any("LeasesFenced",
                      "A worker stopped using streams it could no longer prove it held "
                      "(renewals too slow or failing): expect reconnects and replays.",
                      holdfast_metric(names.METRIC_LEASES_FENCED, worker)),
            # A stream released after its upstream failed repeatedly (or parked on a message
            # its handler failed on every attempt) waits out a back-off of up to 15 minutes:
            # not unowned in the sweeper's sense, so StreamsUnowned never sees it.
            self._any("StreamsGivingUp",
                      "A stream gave up: its upstream failed to connect or dropped it "
                      "repeatedly, or its handler failed a message on every attempt and the "
                      "stream parked on it. It is retried after a back-off (up to 15 min). "
                      "The worker logs say \"stream handed back after errors\" with the "
                      "stream and the error. The alarm stays on while a stream keeps giving "
                      f"up, and clears {GIVE_UP_WINDOWS * 5} minutes after the last give-up.",
                      holdfast_metric(names.METRIC_UPSTREAM_GIVE_UPS, worker),
                      windows=GIVE_UP_WINDOWS),
            # Parked again at every quarantine (5 min) and found again by the sweeper, such a
            # stream is never old enough for StreamsUnowned: this count is how it is noticed.
            self._any("StreamsQuarantined",
                      "A stream's item breaks the schema (a mistyped attribute, written by "
                      "hand or by an app): a worker parked it as INVALID, with the reason in "
                      "its last_error, and it is not delivered until the item is fixed or "
                      "deleted. `holdfast ls` shows it; the worker logs \"claim refused: the "
                      "stream's item is malformed\".",
                      holdfast_metric(names.METRIC_STREAMS_QUARANTINED, worker)),
            self._any("FramesNotHandled",
                      "Frames broke the seq contract (a seq that went back, jumped too far, or "
                      "a stream that stalled) and were not handled: the upstream or its "
                      "protocol plug-in is misbehaving. The worker logs name the stream.",
                      holdfast_metric(names.METRIC_FRAMES_SKIPPED, worker)),
            # A failed checkpoint round is retried at the next; one alone (a timed-out call)
            # is no risk, and a page for it would teach people to ignore the alarm. Failures in
            # two of three minutes are. (A stream's fence follows its session's heartbeats,
            # SessionRenewFailures: a checkpoint moves only its one-hour backstop.)
            self._alarm("RenewFailures",
                        "Worker checkpoint writes kept failing (DynamoDB errors or throttling, "
                        "in 2 of 3 minutes): the stored resume points fall behind, so a move or "
                        "a crash replays more messages from further back.",
                        holdfast_metric(names.METRIC_RENEW_FAILURES, worker).with_(
                            period=MINUTE, statistic="Sum"),
                        0, periods=2, of=3, comparison=_GT),
            # p99, not Maximum: a stream stuck unowned is StreamsUnowned's (it fires while the
            # stream waits, this one only after its claim), and one odd sample (a stream
            # stopped and started in the instant it was unowned) should not page anyone.
            self._alarm("UnownedTimeHigh",
                        "Streams were unowned for longer than any handover should take (p99 "
                        "over 5 minutes above two leases; a crash alone costs about a lease "
                        "plus the skew): workers without capacity, or the router or sweeper "
                        "behind. See the Unowned time graph and Nudge queue.",
                        holdfast_metric(names.METRIC_UNOWNED_TIME, worker, "p99").with_(
                            period=ALARM_WINDOW),
                        unowned_time_threshold_ms(lease_ms), comparison=_GT),
        ]

    def _handler_failure_alarms(self, p: FleetParts) -> list[cw.Alarm]:
        """With ``handlerOnFailure=skip``: messages skipped to the on-failure queue wait for
        someone to act on them, and those its reader kept failing on sit in its DLQ."""
        return [
            self._alarm(alarm_id, description, queue.metric_approximate_number_of_messages_visible(
                period=MINUTE, statistic="Maximum"), 1)
            for alarm_id, description, queue in (
                ("HandlerFailuresWaiting",
                 "Messages the handler failed on every attempt were skipped to the on-failure "
                 "queue (output HandlerFailuresQueueUrl): they wait there, up to 14 days, for "
                 "a reader or a redrive.", p.handler_failures),
                ("HandlerFailuresDeadLetters",
                 "The on-failure queue's reader failed on messages repeatedly: they moved to "
                 "its dead-letter queue.", p.handler_failures_dlq))
            if queue is not None]

    def _throttle_alarms(self, p: FleetParts) -> list[cw.Alarm]:
        """Any DynamoDB throttling of either table or a lease index, reads and writes apart."""
        return [
            self._any(f"{w.construct_id}{kind}Throttles",
                      f"DynamoDB throttled {kind.lower()}s of the {w.label}: {w.impact}.",
                      throttle_events(w, kind))
            for w in p.throttle_watches() for kind in ("Read", "Write")
        ]
