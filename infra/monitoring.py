"""The fleet's dashboard and alarms, and the SNS topic the alarms notify."""

from __future__ import annotations

from aws_cdk import Aws, Duration, Fn
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from holdfast.core import names
from infra.dashboard import build_dashboard
from infra.metrics import MINUTE, FleetParts, holdfast_metric, running_tasks

__all__ = ["Monitoring"]

class Monitoring(Construct):
    """Alarms (to ``topic``) and one dashboard; ``dashboard_url`` opens it in the console."""

    def __init__(self, scope: Construct, construct_id: str, *, parts: FleetParts,
                 lease_ms: int, alarm_email: str | None) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Alarms", display_name="Holdfast alarms", enforce_ssl=True)
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self.alarms = self._alarms(parts, lease_ms)
        action = cw_actions.SnsAction(self.topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.dashboard = build_dashboard(self, "Dashboard", parts=parts, alarms=self.alarms)
        self.dashboard_url = Fn.join("", [
            "https://", Aws.REGION, ".console.aws.amazon.com/cloudwatch/home?region=",
            Aws.REGION, "#dashboards:name=", self.dashboard.dashboard_name])

    def _alarms(self, p: FleetParts, lease_ms: int) -> list[cw.Alarm]:
        gte = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        quiet = cw.TreatMissingData.NOT_BREACHING

        def alarm(alarm_id: str, description: str, metric: cw.IMetric, threshold: float, *,
                  periods: int = 1, comparison: cw.ComparisonOperator = gte,
                  missing: cw.TreatMissingData = quiet) -> cw.Alarm:
            return cw.Alarm(self, alarm_id, alarm_description=description, metric=metric,
                            threshold=threshold, evaluation_periods=periods,
                            datapoints_to_alarm=periods, comparison_operator=comparison,
                            treat_missing_data=missing)

        sweeper = p.service_names["sweeper"]
        return [
            alarm("DeadLettersNotEmpty",
                  "Nudges no worker could act on were parked in the DLQ: inspect and redrive.",
                  p.dlq.metric_approximate_number_of_messages_visible(
                      period=MINUTE, statistic="Maximum"), 1),
            alarm("RouterFailuresNotEmpty",
                  "The router gave up on stream records after every retry (see the queue).",
                  p.router_failures.metric_approximate_number_of_messages_visible(
                      period=MINUTE, statistic="Maximum"), 1),
            alarm("RouterErrors", "The router function failed whole batches.",
                  p.router.metric_errors(period=Duration.minutes(5), statistic="Sum"), 1),
            alarm("RouterIteratorAge",
                  "The router is more than a minute behind the lease table's stream.",
                  p.router.metric("IteratorAge", period=MINUTE, statistic="Maximum"),
                  60_000, periods=3),
            alarm("StreamsUnowned",
                  "A wanted (STARTED) stream has had no owner for longer than a lease.",
                  holdfast_metric(names.METRIC_OLDEST_ORPHAN_AGE, sweeper, "Maximum"),
                  lease_ms, periods=2, comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD),
            alarm("SweeperErrors", "The sweeper function failed.",
                  p.sweeper.metric_errors(period=Duration.minutes(5), statistic="Sum"), 1),
            alarm("SweeperNotRunning",
                  "The sweeper has not run for 5 minutes: expired leases are not being found.",
                  p.sweeper.metric_invocations(period=Duration.minutes(5), statistic="Sum"), 1,
                  comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                  missing=cw.TreatMissingData.BREACHING),
            alarm("NoWorkersRunning", "No worker task is running: no stream is being held.",
                  running_tasks(p.service), 1, periods=3,
                  comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                  missing=cw.TreatMissingData.BREACHING),
        ]

