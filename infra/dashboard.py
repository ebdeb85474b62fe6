"""The CloudWatch dashboard: one screen from "how many streams are held" down to the DLQ."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct

from holdfast.core import names
from holdfast.infra.metrics import (
    MINUTE,
    FleetParts,
    holdfast_metric,
    nudges_sent,
    running_tasks,
    throttle_events,
)

__all__ = ["build_dashboard"]

_WIDTH = 8  # three graphs per row (the grid is 24 wide)


def _graph(title: str, left: Sequence[cw.IMetric], right: Sequence[cw.IMetric] = (),
           width: int = _WIDTH) -> cw.GraphWidget:
    return cw.GraphWidget(title=title, left=list(left), right=list(right), width=width,
                          height=6)


def peak(metric: Callable[..., cw.Metric], label: str) -> cw.Metric:
    """A queue gauge as its per-minute maximum (the average hides short spikes)."""
    return metric(period=MINUTE, statistic="Maximum", label=label)


def build_dashboard(scope: Construct, construct_id: str, *, parts: FleetParts,
                    alarms: Sequence[cw.IAlarm]) -> cw.Dashboard:
    """Rows: alarms; connections and leases; unowned time; sessions and throttles; nudges and
    queues; router; sweeper; moves and handoffs; tasks."""
    worker = parts.service_names["worker"]
    router = parts.service_names["router"]
    sweeper = parts.service_names["sweeper"]

    def w(name: str, statistic: str = "Sum", label: str | None = None) -> cw.Metric:
        return holdfast_metric(name, worker, statistic, label)

    q, dlq, svc = parts.queue, parts.dlq, parts.service
    dashboard = cw.Dashboard(scope, construct_id, default_interval=Duration.hours(3))
    # Taller than for the first eight alarms: a status box per alarm (over twenty) needs room.
    dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24,
                                               height=4))
    dashboard.add_widgets(
        _graph("Active connections",
               # A per-minute sum of each task's gauge: approximate (a task whose flush drifts
               # across a minute counts twice or not at all in it).
               [w(names.METRIC_ACTIVE_CONNECTIONS, "Sum", "fleet total (approx.)")],
               [w(names.METRIC_ACTIVE_CONNECTIONS, "Average", "per task (avg)")]),
        _graph("Claims and losses",
               [w(names.METRIC_CLAIMS), w(names.METRIC_CLAIM_CONFLICTS),
                w(names.METRIC_LEASES_LOST), w(names.METRIC_LEASES_FENCED),
                w(names.METRIC_RENEW_FAILURES), w(names.METRIC_HOLDINGS_TAKEN_BACK)]),
        _graph("Renew latency (ms)",
               [w(names.METRIC_RENEW_LATENCY, "p50", "p50"),
                w(names.METRIC_RENEW_LATENCY, "p99", "p99")]),
    )
    dashboard.add_widgets(
        # Per claim: how long the stream had been unowned (release, dead holder's last
        # heartbeat or creation -> claim). Graceful handovers are sub-second; a crash costs
        # about a lease plus the skew allowance, by design.
        _graph("Unowned time before a claim (ms)",
               [w(names.METRIC_UNOWNED_TIME, "p50", "p50"),
                w(names.METRIC_UNOWNED_TIME, "p99", "p99")],
               [w(names.METRIC_UNOWNED_TIME, "SampleCount", "claims measured")]),
    )
    dashboard.add_widgets(
        _graph("Worker sessions",
               [holdfast_metric(names.METRIC_DEAD_SESSIONS, sweeper, label="died silently"),
                holdfast_metric(names.METRIC_REPORTED_DEAD_SESSIONS,
                                parts.service_names["taskstopped"],
                                label="died, reported by ECS"),
                holdfast_metric(names.METRIC_STREAMS_REAPED, sweeper,
                                label="streams reaped (sweeper)"),
                holdfast_metric(names.METRIC_STREAMS_REAPED, parts.service_names["taskstopped"],
                                label="streams reaped (ECS report)")],
               [w(names.METRIC_SESSION_RENEW_FAILURES, label="heartbeat failures")]),
        _graph("DynamoDB throttles",
               [throttle_events(t, kind, f"{t.label} {kind.lower()}s")
                for t in parts.throttle_watches()
                for kind in ("Read", "Write")], width=16),
    )
    dashboard.add_widgets(
        _graph("Nudges", [nudges_sent(router, "by router"), nudges_sent(sweeper, "by sweeper"),
                          q.metric_number_of_messages_deleted(period=MINUTE, label="consumed"),
                          holdfast_metric(names.METRIC_NUDGES_FAILED, router,
                                          label="router send failures"),
                          holdfast_metric(names.METRIC_NUDGES_FAILED, sweeper,
                                          label="sweeper send failures")]),
        _graph("Nudge queue",
               [peak(q.metric_approximate_number_of_messages_visible, "visible"),
                peak(q.metric_approximate_number_of_messages_not_visible, "in flight")],
               [peak(q.metric_approximate_age_of_oldest_message, "oldest (s)")]),
        _graph("Dead letters",
               [peak(dlq.metric_approximate_number_of_messages_visible, "DLQ"),
                peak(parts.router_failures.metric_approximate_number_of_messages_visible,
                     "router failures")]),
    )
    dashboard.add_widgets(
        _graph("Router invocations and errors",
               [parts.router.metric_invocations(period=MINUTE),
                parts.router.metric_errors(period=MINUTE),
                parts.router.metric_throttles(period=MINUTE),
                holdfast_metric(names.METRIC_MALFORMED_RECORDS, router, label="malformed"),
                holdfast_metric(names.METRIC_NORMALISED, router, label="normalised")]),
        _graph("Router iterator age (ms)",
               [parts.router.metric("IteratorAge", period=MINUTE, statistic="Maximum")]),
        _graph("Router duration (ms)",
               [parts.router.metric_duration(period=MINUTE, statistic="p99", label="p99")]),
    )
    dashboard.add_widgets(
        # Unowned and stranded (owned by a session that is not live) are one age: both are
        # wanted streams nobody delivers, and the StreamsUnowned alarm watches it.
        _graph("Oldest wanted stream nobody holds (ms)",
               [holdfast_metric(names.METRIC_OLDEST_ORPHAN_AGE, sweeper, "Maximum",
                                "unowned or stranded, longest (ms)")]),
        _graph("Stranded streams and item errors",
               [holdfast_metric(names.METRIC_STRANDED_STREAMS, sweeper, "Maximum",
                                "stranded (last audit)"),
                holdfast_metric(names.METRIC_STRANDED_RELEASED, sweeper,
                                label="stranded released"),
                holdfast_metric(names.METRIC_ITEM_ERRORS, sweeper, label="item errors")]),
        _graph("Sweeper runs and errors",
               [parts.sweeper.metric_invocations(period=MINUTE),
                parts.sweeper.metric_errors(period=MINUTE),
                holdfast_metric(names.METRIC_SWEEPS, sweeper, label="sweeps"),
                holdfast_metric(names.METRIC_SWEEP_ERRORS, sweeper, label="failed sweeps")]),
    )
    dashboard.add_widgets(
        # A move (a shed for balance, a drain, a stop) names the worker the decider chose; a
        # handed-on nudge is a worker passing a claim to the others. During a deploy, handoffs
        # follow each old task's stop, and the unowned time above is what each move cost.
        _graph("Moves and handoffs",
               [w(names.METRIC_STREAMS_SHED, label="shed (balance, drain)"),
                w(names.METRIC_STREAMS_HANDED_OFF, label="handed to a named successor")],
               [w(names.METRIC_NUDGES_HANDED_ON, label="nudges handed on")], width=24),
    )
    dashboard.add_widgets(
        # What reached the handler, and what did not: frames out of the seq contract or not
        # parseable, handler calls that timed out, were retried, or failed every attempt.
        _graph("Delivery",
               [w(names.METRIC_FRAMES_SKIPPED, label="frames not handled (seq contract)"),
                w(names.METRIC_MALFORMED_FRAMES, label="frames not parseable (no seq)"),
                w(names.METRIC_HANDLER_TIMEOUTS), w(names.METRIC_HANDLER_RETRIES),
                w(names.METRIC_HANDLER_FAILURES_PARKED, label="failed: stream parked"),
                w(names.METRIC_HANDLER_FAILURES_SENT_TO_QUEUE, label="failed: skipped to queue")],
               [w(names.METRIC_MESSAGES_HANDLED, label="messages handled")], width=24),
    )
    dashboard.add_widgets(
        _graph("Upstream", [w(names.METRIC_RECONNECTS), w(names.METRIC_HANDLER_ERRORS),
                            w(names.METRIC_UPSTREAM_GIVE_UPS),
                            w(names.METRIC_STREAMS_QUARANTINED,
                              label="streams quarantined (malformed item)"),
                            w(names.METRIC_CONNECTS_DELAYED, label="connects delayed (budget)"),
                            w(names.METRIC_CLAIMS_PAUSED_LAGGING,
                              label="claims paused (loop lagging)")]),
        _graph("Worker tasks", [running_tasks(svc)]),
        # The busiest task's beside the average: one CPU-bound task (its loop lagging, its
        # heartbeats late) hides in an average over many.
        _graph("Worker CPU and memory (%)",
               [svc.metric_cpu_utilization(period=MINUTE, label="CPU, average"),
                svc.metric_cpu_utilization(period=MINUTE, statistic="Maximum",
                                           label="CPU, busiest task"),
                svc.metric_memory_utilization(period=MINUTE, label="memory, average"),
                svc.metric_memory_utilization(period=MINUTE, statistic="Maximum",
                                              label="memory, fullest task")]),
    )
    return dashboard
