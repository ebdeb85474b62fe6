"""Dashboard and alarms: what an operator watches, wired to one SNS topic."""

from __future__ import annotations

import json
from typing import Any

from holdfast.core import names, schema
from holdfast.core import settings as S
from holdfast.worker.backoff import Backoff
from tests.infra.conftest import lease_table_id, one_resource, resources, session_table_id


def alarms_by_metric(template_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["Properties"]["MetricName"]: a["Properties"]
            for a in resources(template_json, "AWS::CloudWatch::Alarm").values()
            if "MetricName" in a["Properties"]}


def test_required_alarms_exist(template_json: dict[str, Any]) -> None:
    """DLQ not empty, router errors, iterator age, streams unowned longer than a lease."""
    alarms = alarms_by_metric(template_json)
    assert alarms["Errors"]["Namespace"] == "AWS/Lambda"
    assert alarms["IteratorAge"]["Threshold"] == 60_000
    unowned = alarms[names.METRIC_OLDEST_ORPHAN_AGE]
    assert unowned["Namespace"] == names.NAMESPACE
    assert unowned["Threshold"] == 4_000  # one lease
    # Once per ~59.5 s run: a minute may have no datapoint, so 2 of 3 minutes, not 2 in a row.
    assert (unowned["DatapointsToAlarm"], unowned["EvaluationPeriods"]) == (2, 3)
    assert unowned["Dimensions"] == [{"Name": names.DIMENSION_SERVICE,
                                      "Value": "holdfast-sweeper"}]
    visible = [a for a in resources(template_json, "AWS::CloudWatch::Alarm").values()
               if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"]
    # The nudge DLQ, the router's failure queue and the task-stopped function's.
    assert len(visible) == 3
    assert all(a["Properties"]["Threshold"] == 1 for a in visible)


def test_every_operational_alarm_notifies_the_topic(template_json: dict[str, Any]) -> None:
    """All alarms except the scaling policy's own send alarm and OK actions to the topic."""
    topic = next(iter(resources(template_json, "AWS::SNS::Topic")))
    operational = [a["Properties"] for a in resources(template_json,
                                                      "AWS::CloudWatch::Alarm").values()
                   if "AlarmActions" in a["Properties"] and
                   {"Ref": topic} in a["Properties"]["AlarmActions"]]
    # Twelve pipeline and worker alarms, three session/fencing ones, the unowned-time one,
    # the sweeper's item errors, three on streams giving up, quarantined and frames not
    # handled, eight throttle alarms.
    assert len(operational) == 28
    assert all({"Ref": topic} in a["OKActions"] for a in operational)


def test_alarm_topic_is_tls_only_with_optional_email(template_json: dict[str, Any],
                                                     alt_template_json: dict[str, Any]) -> None:
    """The topic refuses plain HTTP; alarmEmail subscribes an address."""
    policy = one_resource(template_json, "AWS::SNS::TopicPolicy")["Properties"]
    assert any(s["Effect"] == "Deny" and "aws:SecureTransport" in json.dumps(s)
               for s in policy["PolicyDocument"]["Statement"])
    assert not resources(template_json, "AWS::SNS::Subscription")
    sub = one_resource(alt_template_json, "AWS::SNS::Subscription")["Properties"]
    assert sub["Protocol"] == "email" and sub["Endpoint"] == "ops@example.com"


def test_dashboard_shows_the_fleet(template_json: dict[str, Any]) -> None:
    """Connections, claims, leases lost, nudges, queue and DLQ depth, router errors, age."""
    body = json.dumps(one_resource(template_json, "AWS::CloudWatch::Dashboard")
                      ["Properties"]["DashboardBody"])
    for metric in (names.METRIC_ACTIVE_CONNECTIONS, names.METRIC_CLAIMS,
                   names.METRIC_LEASES_LOST, names.METRIC_NUDGES,
                   names.METRIC_OLDEST_ORPHAN_AGE, "ApproximateNumberOfMessagesVisible",
                   "ApproximateAgeOfOldestMessage", "IteratorAge", "Errors",
                   "RunningTaskCount", names.METRIC_DEAD_SESSIONS,
                   names.METRIC_STREAMS_REAPED, names.METRIC_SESSION_RENEW_FAILURES,
                   "ReadThrottleEvents", "WriteThrottleEvents", schema.OWNER_INDEX_NAME,
                   names.METRIC_UNOWNED_TIME, names.METRIC_STRANDED_STREAMS,
                   names.METRIC_STRANDED_RELEASED, names.METRIC_ITEM_ERRORS):
        assert metric in body, metric
    # Nudges carry a reason dimension: the graph sums every reason of each component.
    assert "SUM(SEARCH(" in body and "holdfast-router" in body and "holdfast-sweeper" in body


def alarm_metrics(template_json: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(namespace, metric name) -> the single-metric alarms on it."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in resources(template_json, "AWS::CloudWatch::Alarm").values():
        props = a["Properties"]
        if "MetricName" in props:
            out.setdefault((props["Namespace"], props["MetricName"]), []).append(props)
    return out


def summed_stats(alarm: dict[str, Any]) -> dict[tuple[str, str], tuple[str, int]]:
    """(metric, service) -> (statistic, period) of each metric an expression alarm sums."""
    return {(q["MetricStat"]["Metric"]["MetricName"],
             q["MetricStat"]["Metric"]["Dimensions"][0]["Value"]):
            (q["MetricStat"]["Stat"], q["MetricStat"]["Period"])
            for q in alarm["Metrics"] if "MetricStat" in q}


def test_a_sweeper_that_completes_no_sweep_alarms(template_json: dict[str, Any]) -> None:
    """On its completed sweeps, not its invocations: fewer than 1 in 5 minutes, and no data
    (metrics not arriving, never invoked) is breaching."""
    (alarm,) = alarm_metrics(template_json)[(names.NAMESPACE, names.METRIC_SWEEPS)]
    assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Sum", 300, 1)
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert alarm["TreatMissingData"] == "breaching"
    assert alarm["Dimensions"] == [{"Name": names.DIMENSION_SERVICE,
                                    "Value": "holdfast-sweeper"}]


def test_tasks_running_without_worker_metrics_alarm(template_json: dict[str, Any]) -> None:
    """Worker tasks running (Container Insights) with no ActiveConnections sample for two
    5-minute windows: every worker alarm and the scaling policy would be blind."""
    (alarm,) = [a["Properties"] for a in resources(template_json,
                                                   "AWS::CloudWatch::Alarm").values()
                if "none reported its metrics" in a["Properties"].get("AlarmDescription", "")]
    stats = {q["MetricStat"]["Metric"]["MetricName"]: (q["MetricStat"]["Stat"],
                                                       q["MetricStat"]["Period"])
             for q in alarm["Metrics"] if "MetricStat" in q}
    assert stats == {"RunningTaskCount": ("Minimum", 300),
                     names.METRIC_ACTIVE_CONNECTIONS: ("SampleCount", 300)}
    (expr,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
    assert expr == "IF(FILL(tasks, 0) > 0 AND FILL(samples, 0) == 0, 1, 0)"
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (
        1, 2, 2)


def test_renew_failures_alarm_when_they_go_on(template_json: dict[str, Any]) -> None:
    """RenewFailures pages on failures in 2 of 3 one-minute periods, not on one failed round
    (the next round retries it)."""
    (alarm,) = alarm_metrics(template_json)[(names.NAMESPACE, names.METRIC_RENEW_FAILURES)]
    assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Sum", 60, 0)
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (2, 3)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_sessions_and_fencing_alarm_on_any_occurrence(template_json: dict[str, Any]) -> None:
    """LeasesFenced, streams giving up or quarantined and frames not handled (worker): sum > 0
    in 5 minutes."""
    alarms = alarm_metrics(template_json)
    for metric, service in ((names.METRIC_LEASES_FENCED, "holdfast-worker"),
                            (names.METRIC_UPSTREAM_GIVE_UPS, "holdfast-worker"),
                            (names.METRIC_STREAMS_QUARANTINED, "holdfast-worker"),
                            (names.METRIC_FRAMES_SKIPPED, "holdfast-worker")):
        (alarm,) = alarms[(names.NAMESPACE, metric)]
        assert alarm["Dimensions"] == [{"Name": names.DIMENSION_SERVICE, "Value": service}]
        assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 300), metric
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (
            "GreaterThanThreshold", 0), metric
        assert alarm["TreatMissingData"] == "notBreaching", metric


def test_streams_giving_up_stays_in_alarm_while_a_stream_keeps_giving_up(
        template_json: dict[str, Any]) -> None:
    """StreamsGivingUp looks back past the longest cycle of a stream that keeps giving up (the
    retry cap, then six failed connects): it stays in ALARM instead of notifying ALARM and OK at
    every retry."""
    (alarm,) = alarm_metrics(template_json)[(names.NAMESPACE, names.METRIC_UPSTREAM_GIVE_UPS)]
    backoff = Backoff()
    connects = backoff.max_failures * S.OPEN_TIMEOUT_SECONDS.default + sum(
        backoff.cap_s for _ in range(backoff.max_failures))  # each delay at most the cap
    assert alarm["DatapointsToAlarm"] == 1
    assert alarm["EvaluationPeriods"] * alarm["Period"] > backoff.retry_cap_s + connects
    assert f"clears {alarm['EvaluationPeriods'] * alarm['Period'] // 60} minutes" in (
        alarm["AlarmDescription"])


def test_item_errors_alarm_counts_the_sweepers_and_the_routers(
        template_json: dict[str, Any]) -> None:
    """An item the router could not write for its own fault (skipped rather than retried:
    it held the shard) pages like one the sweeper could not: both counts summed, > 0 in 5
    minutes."""
    (alarm,) = [a["Properties"] for a in resources(template_json,
                                                   "AWS::CloudWatch::Alarm").values()
                if "could not write a stream or session item" in a["Properties"].get(
                    "AlarmDescription", "")]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert summed_stats(alarm) == {
        (names.METRIC_ITEM_ERRORS, "holdfast-sweeper"): ("Sum", 300),
        (names.METRIC_ITEM_ERRORS, "holdfast-router"): ("Sum", 300)}


def test_dead_sessions_alarm_counts_the_sweepers_and_the_task_reports(
        template_json: dict[str, Any]) -> None:
    """A death the task-stopped report (ECS first) or a worker's reconcile sweep declared pages
    like one the sweeper found: the alarm sums the three counts over 5 minutes, > 0; the
    task-stopped function's own errors alarm too."""
    (alarm,) = [a["Properties"] for a in resources(template_json,
                                                   "AWS::CloudWatch::Alarm").values()
                if "died without saying goodbye" in a["Properties"].get("AlarmDescription", "")]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert summed_stats(alarm) == {
        (names.METRIC_DEAD_SESSIONS, "holdfast-sweeper"): ("Sum", 300),
        (names.METRIC_DEAD_SESSIONS, "holdfast-worker"): ("Sum", 300),
        (names.METRIC_REPORTED_DEAD_SESSIONS, "holdfast-taskstopped"): ("Sum", 300)}
    errors = [a["Properties"] for a in resources(template_json,
                                                 "AWS::CloudWatch::Alarm").values()
              if a["Properties"].get("MetricName") == "Errors"]
    assert len(errors) == 3  # router, sweeper, task-stopped


def test_throttling_alarms_cover_both_tables_and_both_indexes(
        template_json: dict[str, Any]) -> None:
    """Read and write throttles of the lease table, each of its GSIs and the session table."""
    leases, sessions = lease_table_id(template_json), session_table_id(template_json)
    alarms = alarm_metrics(template_json)
    for kind in ("Read", "Write"):
        watched = set()
        for alarm in alarms[("AWS/DynamoDB", f"{kind}ThrottleEvents")]:
            assert (alarm["Statistic"], alarm["ComparisonOperator"], alarm["Threshold"]) == (
                "Sum", "GreaterThanThreshold", 0)
            dims = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
            watched.add((dims.pop("TableName")["Ref"], dims.pop("GlobalSecondaryIndexName", "")))
            assert dims == {}
        assert watched == {(leases, ""), (leases, schema.GSI_NAME),
                           (leases, schema.OWNER_INDEX_NAME), (sessions, "")}, kind


def test_unowned_time_alarm_watches_the_worker_p99_above_two_leases(
        template_json: dict[str, Any]) -> None:
    """UnownedTime: the workers' p99 over 5 minutes above two leases (a crash costs about one
    lease plus the skew by design), notifying the topic like the others."""
    (alarm,) = alarm_metrics(template_json)[(names.NAMESPACE, names.METRIC_UNOWNED_TIME)]
    assert alarm["Dimensions"] == [{"Name": names.DIMENSION_SERVICE,
                                    "Value": "holdfast-worker"}]
    assert (alarm["ExtendedStatistic"], alarm["Period"]) == ("p99", 300)
    assert "Statistic" not in alarm
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold",
                                                                 2 * 4_000)
    assert alarm["TreatMissingData"] == "notBreaching"  # no claims: nothing to judge
    topic = next(iter(resources(template_json, "AWS::SNS::Topic")))
    assert {"Ref": topic} in alarm["AlarmActions"] and {"Ref": topic} in alarm["OKActions"]


def test_dashboard_graphs_unowned_time_percentiles(template_json: dict[str, Any]) -> None:
    """One graph shows UnownedTime p50 and p99 of the worker service."""
    body = "".join(str(part) for part in one_resource(
        template_json, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardBody"]["Fn::Join"][1])
    widgets = [w for w in json.loads(body)["widgets"] if "Unowned time" in
               str(w.get("properties", {}).get("title"))] if body.startswith("{") else []
    assert len(widgets) == 1, "no unowned-time graph"
    metrics = widgets[0]["properties"]["metrics"]
    stats = {m[-1].get("stat") for m in metrics if names.METRIC_UNOWNED_TIME in m}
    assert {"p50", "p99"} <= stats
    assert all("holdfast-worker" in m for m in metrics if names.METRIC_UNOWNED_TIME in m)


def test_stranded_streams_and_item_errors_are_graphed_beside_the_orphan_age(
        template_json: dict[str, Any]) -> None:
    """The sweeper's stranded count, releases and item errors share a row with the orphan age."""
    body = "".join(str(part) for part in one_resource(
        template_json, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardBody"]["Fn::Join"][1])
    widgets = json.loads(body)["widgets"]

    def graph(metric: str) -> dict[str, Any]:
        (found,) = [w for w in widgets if any(metric in m for m in
                                              w.get("properties", {}).get("metrics", []))]
        return found

    stranded, age = graph(names.METRIC_STRANDED_STREAMS), graph(names.METRIC_OLDEST_ORPHAN_AGE)
    assert stranded["y"] == age["y"]  # same row, side by side
    metrics = stranded["properties"]["metrics"]
    assert {names.METRIC_STRANDED_RELEASED, names.METRIC_ITEM_ERRORS} <= {
        n for m in metrics for n in m if isinstance(n, str)}
    assert all("holdfast-sweeper" in m for m in metrics)


def test_the_dashboard_has_a_handoff_panel(template_json: dict[str, Any]) -> None:
    """One graph shows the worker's sheds and handoffs to named successors (a deploy's moves)."""
    body = "".join(str(part) for part in one_resource(
        template_json, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardBody"]["Fn::Join"][1])
    (panel,) = [w for w in json.loads(body)["widgets"] if any(
        names.METRIC_STREAMS_HANDED_OFF in m for m in w.get("properties", {}).get("metrics", []))]
    metrics = panel["properties"]["metrics"]
    assert any(names.METRIC_STREAMS_SHED in m for m in metrics)
    assert all("holdfast-worker" in m for m in metrics)


def test_sweeps_failing_alarms_when_as_many_failed_as_completed(
        template_json: dict[str, Any]) -> None:
    """SweepsFailing: over 5 minutes, failed sweeps > 0 and >= completed ones (a blind sweeper
    reports no orphan age, so StreamsUnowned alone would stay OK)."""
    (alarm,) = [a["Properties"] for a in resources(template_json,
                                                   "AWS::CloudWatch::Alarm").values()
                if "sweeps failed" in a["Properties"].get("AlarmDescription", "")]
    (expr,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
    assert "IF(" in expr and ">= FILL(done, 0)" in expr
    stats = {q["Id"]: q["MetricStat"] for q in alarm["Metrics"] if "MetricStat" in q}
    assert {k: (s["Metric"]["MetricName"], s["Stat"], s["Period"]) for k, s in stats.items()} \
        == {"failed": (names.METRIC_SWEEP_ERRORS, "Sum", 300),
            "done": (names.METRIC_SWEEPS, "Sum", 300)}
    assert all(s["Metric"]["Dimensions"] == [{"Name": names.DIMENSION_SERVICE,
                                              "Value": "holdfast-sweeper"}]
               for s in stats.values())
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (
        "GreaterThanOrEqualToThreshold", 1)


def test_dashboard_shows_delivery_and_both_reapers_and_senders(
        template_json: dict[str, Any]) -> None:
    """A Delivery panel (handled, frames not handled, handler failures); streams reaped by the
    sweeper and by the task-stopped function; send failures of the router and the sweeper."""
    body = "".join(str(part) for part in one_resource(
        template_json, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardBody"]["Fn::Join"][1])
    widgets = json.loads(body)["widgets"]

    def services_of(metric: str) -> set[str]:
        return {m[m.index(names.DIMENSION_SERVICE) + 1] for w in widgets
                for m in w.get("properties", {}).get("metrics", [])
                if metric in m and names.DIMENSION_SERVICE in m}

    (delivery,) = [w for w in widgets if w.get("properties", {}).get("title") == "Delivery"]
    shown = {n for m in delivery["properties"]["metrics"] for n in m if isinstance(n, str)}
    assert {names.METRIC_MESSAGES_HANDLED, names.METRIC_FRAMES_SKIPPED,
            names.METRIC_MALFORMED_FRAMES, names.METRIC_HANDLER_FAILURES_PARKED,
            names.METRIC_HANDLER_FAILURES_SENT_TO_QUEUE, names.METRIC_HANDLER_TIMEOUTS} <= shown
    assert services_of(names.METRIC_STREAMS_REAPED) == {"holdfast-sweeper",
                                                         "holdfast-taskstopped"}
    assert services_of(names.METRIC_NUDGES_FAILED) == {"holdfast-router", "holdfast-sweeper"}
