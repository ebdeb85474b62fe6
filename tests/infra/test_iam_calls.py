"""IAM that matches the code: every AWS call the worker, router and sweeper make is allowed by
its synthesized role, and no role grants what nothing calls.

One module-scoped scenario drives each component through its real code paths with
``HOLDFAST_RECORD_AWS_CALLS`` set: a real ``python -m worker`` process (reaping a silent
predecessor, claims from nudges and the reconcile sweep, a nudge put back for a stream in
back-off, a stream taken back after an app's PutItem over it, batched checkpoints, session
heartbeats, a stop order, a stream shed for a rebalancing target, release and nudge hand-on
at shutdown), the router handler (insert -> normalise + nudge, stop order on the order queue
and the session, a restart whose old session is gone -> session read + release) and the
sweeper handler (dead session -> reap, expired lease -> nudge, the unindexed pass,
rebalancing targets).
Nothing in the local AWS enforces IAM; this test replays what was called against the template.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holdfast.core import names, schema
from holdfast.core.directives import Directive
from holdfast.core.handoff import WARM, HandoffStep
from holdfast.core.orders import ORDER_RETAKE, Order, order_queue_name, prefix_for
from holdfast.core.sessions import Session, SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.core.table import set_desired_state
from holdfast.infra.router import orders_queue_prefix
from holdfast.localaws import LocalAws
from holdfast.runner.context import LocalContext
from tests.infra.conftest import (
    STACK,
    lease_table_id,
    logical_id,
    resources,
    session_table_id,
)
from tests.infra.iam import AWS_SIDE_ACTIONS, allows, arn_name, needs_of, role_ids, role_statements
from tests.lambdas.records import event, image, record
from tests.worker.conftest import ROOT, Fleet, UpstreamThread, make_fleet, wait_until

COMPONENTS = ("worker", "router", "sweeper", "taskstopped")
SENDERS = COMPONENTS  # of nudges: the taskstopped function nudges what it released
# What each component must have been seen doing, as (operation, resource kind): a scenario
# that silently stopped exercising a path cannot pass.
MINIMUM = {
    "worker": {("GetItem", "leases"), ("UpdateItem", "leases"), ("BatchExecuteStatement", ""),
               ("Query", "seed index"), ("Query", "owner index"), ("GetItem", "sessions"),
               ("PutItem", "sessions"), ("UpdateItem", "sessions"), ("Scan", "sessions"),
               ("ReceiveMessage", "queue"), ("DeleteMessageBatch", "queue"),
               ("ChangeMessageVisibilityBatch", "queue"), ("SendMessageBatch", "queue"),
               # Its session's order queue: made at start, read, deleted at the graceful stop.
               ("CreateQueue", "order queue"), ("ReceiveMessage", "order queue"),
               ("DeleteMessageBatch", "order queue"), ("DeleteQueue", "order queue"),
               # A handoff's warm-up request on the successor's order queue (batched per
               # recipient; IAM's action for both calls is sqs:SendMessage).
               ("SendMessageBatch", "order queue"),
               # A successor's looks for the transfer of a stream it warmed up for.
               ("BatchGetItem", "leases")},
    "router": {("SendMessageBatch", "queue"), ("UpdateItem", "leases"),
               ("UpdateItem", "sessions"), ("SendMessage", "order queue"),
               # A handoff's nudge on its successor's order queue.
               ("SendMessageBatch", "order queue")},
    "taskstopped": {("GetItem", "sessions"), ("UpdateItem", "sessions"),
                    ("SendMessageBatch", "queue"),
                    ("Query", "owner index"), ("UpdateItem", "leases")},
    "sweeper": {("Scan", "sessions"), ("UpdateItem", "sessions"), ("Query", "owner index"),
                ("UpdateItem", "leases"), ("BatchExecuteStatement", ""),
                ("Query", "seed index"), ("Scan", "leases"),
                ("SendMessageBatch", "queue"),
                # The owner audit: the owner index read whole, an unknown owner's session.
                ("Scan", "owner index"), ("GetItem", "sessions"),
                # Collecting an order queue no live session reads.
                ("ListQueues", ""), ("DeleteQueue", "order queue"),
                # A rebalancing target on a live session's order queue.
                ("SendMessage", "order queue")},
}


def _calls(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("aws-calls-*.jsonl")):
        complete = path.read_text().rpartition("\n")[0]
        out += [json.loads(line) for line in complete.splitlines() if line.strip()]
    return out


def _seen(folder: Path, component: str, operation: str) -> bool:
    return any(c["component"] == component and c["operation"] == operation
               for c in _calls(folder))


def _owner(fleet: Fleet, conn_id: str) -> str | None:
    value = fleet.item(conn_id).get(schema.ATTR.lease_owner)
    return str(value["S"]) if value else None


def _stale_session(fleet: Fleet, worker_id: str, conn_id: str, url: str) -> str:
    """A session silent for a minute that still owns ``conn_id`` (a long lease backstop);
    returns its owner."""
    past = wall_clock_ms() - 60_000
    store = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=3_000,
                         skew_ms=300, clock=lambda: past)
    old = store.start(worker_id, 10)
    fleet.create(conn_id, url)
    owner = schema.owner_for(worker_id, old.incarnation)
    LeaseStore(fleet.ddb, fleet.table, lease_ms=3_600_000, skew_ms=300).acquire(conn_id, owner)
    return owner


def _ask_warm_up(fleet: Fleet, up: UpstreamThread, tag: str, successor: str) -> Session:
    """A live holder asks ``successor`` to warm up for one of its streams (WARM on its order
    queue): it reads the item, connects, answers READY and looks for the transfer in the
    table (BatchGetItem), which never comes. Returns the holder's session, to be ended."""
    sessions = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=60_000,
                            skew_ms=300)
    session = sessions.start(f"h-{tag}", 10)
    holder = session.owner
    prefix = prefix_for(fleet.table)
    fleet.sqs.create_queue(QueueName=order_queue_name(prefix, holder))
    conn_id = f"{tag}-w"
    fleet.create(conn_id, up.url("w"))
    lease = LeaseStore(fleet.ddb, fleet.table, lease_ms=3_600_000, skew_ms=300).acquire(
        conn_id, holder)
    url = fleet.sqs.get_queue_url(QueueName=order_queue_name(prefix, successor))["QueueUrl"]
    fleet.sqs.send_message(QueueUrl=url, MessageBody=HandoffStep(
        WARM, conn_id, lease.epoch, None, holder).body(successor))
    return session


def _drive_worker(fleet: Fleet, up: UpstreamThread, folder: Path, tag: str) -> str:
    """Run one worker through claim, checkpoint, heartbeat, stop order and shutdown."""
    wid = f"w-{tag}"
    stale = _stale_session(fleet, wid, f"{tag}-p", up.url("p"))
    for name in ("a", "b", "c", "k"):
        fleet.create(f"{tag}-{name}", up.url(name))
    # k is in back-off: its nudge is put back until the retry time (ChangeMessageVisibility).
    fleet.ddb.update_item(
        TableName=fleet.table, Key={"Pk": {"S": schema.pk_for(f"{tag}-k")}},
        UpdateExpression="SET lease_expires_at_ms = :t",
        ExpressionAttributeValues={":t": {"N": str(wall_clock_ms() + 60_000)}})
    env = {**os.environ, **fleet.env, "HOLDFAST_WORKER_ID": wid,
           "HOLDFAST_RECONCILE_SECONDS": "1", "HOLDFAST_POLL_SECONDS": "10",
           names.ENV_REBALANCE_COOLDOWN_SECONDS: "0",
           "HOLDFAST_POLL_DRAIN_SECONDS": "5", names.ENV_RECORD_AWS_CALLS: str(folder),
           "PYTHONUNBUFFERED": "1"}
    with (folder.parent / f"{wid}.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "holdfast.worker"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        for name in ("a", "b", "k"):
            fleet.nudge(f"{tag}-{name}")
        held = [f"{tag}-{n}" for n in ("a", "b", "c", "p")]

        def ours(conn_id: str) -> bool:
            owner = _owner(fleet, conn_id) or stale
            return owner != stale and owner.startswith(f"{wid}#")

        wait_until(lambda: all(ours(c) for c in held), 20, "the worker holds a, b, c and p")
        wait_until(lambda: _seen(folder, "worker", "BatchExecuteStatement"), 10,
                   "a batched checkpoint")
        wait_until(lambda: _seen(folder, "worker", "ChangeMessageVisibilityBatch"), 10,
                   "the back-off nudge put back")
        sessions = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=3_000,
                                skew_ms=300)
        me = sessions.get(wid)
        assert me is not None
        # c written over by an app's PutItem, then the router's retake order: the worker
        # writes back its owner, epoch and checkpoint (UpdateItem).
        c, c_before = f"{tag}-c", fleet.item(f"{tag}-c")
        fleet.ddb.put_item(TableName=fleet.table, Item={
            "Pk": {"S": schema.pk_for(c)}, "desired_state": {"S": schema.STARTED},
            "ws_url": {"S": up.url("c")}, "lease_expires_at_ms": {"N": "0"}})
        assert sessions.add_orders(me.owner, [Order(
            ORDER_RETAKE, c, int(c_before[schema.ATTR.epoch]["N"])).encode()])
        wait_until(lambda: fleet.item(c).get(schema.ATTR.epoch) == c_before[schema.ATTR.epoch],
                   10, "c taken back")
        holder = _ask_warm_up(fleet, up, tag, me.owner)
        wait_until(lambda: _seen(folder, "worker", "BatchGetItem"), 10,
                   "the successor's look for its transfer")
        sessions.end(holder)  # not a live member for the sweeper's balancing below
        _drive_router(fleet, up, folder, tag)
        wait_until(lambda: _owner(fleet, f"{tag}-a") is None, 10, "the stop order obeyed")
        # A short rebalancing target: one of the three left is shed (its release names
        # moved_at_ms), then the target lapses and the worker polls again.
        sessions = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=3_000,
                                skew_ms=300)
        item = sessions.get(wid)
        assert item is not None
        # Named to a successor that never answers: the warm-up request is sent to its order
        # queue, and after the wait the release names it (break-before-make).
        successor = sessions.start(f"s-{tag}", 10).owner
        fleet.sqs.create_queue(QueueName=order_queue_name(prefix_for(fleet.table), successor))
        now = wall_clock_ms()
        assert sessions.set_directive(item.owner, Directive(2, 2, 1, now + 6_000, 1, now,
                                                            successors=((successor, 1),)))
        wait_until(lambda: any(schema.ATTR.moved_at_ms in fleet.item(c) for c in held[1:]),
                   15, "a stream shed")
        time.sleep(2.0)
        proc.send_signal(signal.SIGTERM)
        # Once its streams are released the worker only waits on its last long polls: a nudge
        # sent now lands in one of them and is handed on (SendMessageBatch).
        wait_until(lambda: not any(_owner(fleet, c) for c in held[1:]), 10, "the releases")
        time.sleep(0.3)
        fleet.nudge(f"{tag}-b")
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return wid


def _lambda_env(aws: LocalAws, fleet: Fleet, folder: Path) -> dict[str, str]:
    return {**aws.env(), "HOLDFAST_TABLE": fleet.table,
            "HOLDFAST_SESSION_TABLE": fleet.session_table, "HOLDFAST_QUEUE_URL": fleet.queue_url,
            "HOLDFAST_LEASE_SECONDS": "3", "HOLDFAST_HEARTBEAT_SECONDS": "0.5",
            "HOLDFAST_SKEW_MS": "300",
            names.ENV_ORDERS_QUEUE_PREFIX: prefix_for(fleet.table),
            names.ENV_RECORD_AWS_CALLS: str(folder)}


def _drive_router(fleet: Fleet, up: UpstreamThread, folder: Path, tag: str) -> None:
    """One batch: an insert without expiry (normalise + nudge), a held stream stopped (order
    queue + session order), a stream restarted while its old session is gone (session
    read + release), a handoff to a live worker (its order queue), and a held stream's
    whole item written over (the take-back's hold, conditioned on no status)."""
    from holdfast.lambdas.router import handler as router

    n, a, r = f"{tag}-n", f"{tag}-a", f"{tag}-r"
    fleet.ddb.put_item(TableName=fleet.table, Item={
        "Pk": {"S": schema.pk_for(n)}, "desired_state": {"S": schema.STARTED},
        "ws_url": {"S": up.url("n")}})
    before = fleet.item(a)
    assert set_desired_state(fleet.ddb, fleet.table, a, schema.STOPPED)
    after = fleet.item(a)
    fleet.create(r, up.url("r"))
    LeaseStore(fleet.ddb, fleet.table, lease_ms=3_600_000, skew_ms=300).acquire(
        r, schema.owner_for(f"gone-{tag}", "abc123"))  # no such session
    restarted = fleet.item(r)
    stopped = {**restarted, "desired_state": {"S": schema.STOPPED}}
    successor = before[schema.ATTR.lease_owner]["S"]  # a live worker, with an order queue
    handed = image(f"{tag}-h", expires=wall_clock_ms() + 3_000, epoch=5, status="RELEASED",
                   **{schema.ATTR.successor: {"S": successor}})
    over = image(f"{tag}-o", expires=0, ws_url=up.url("o"))
    fleet.ddb.put_item(TableName=fleet.table, Item=over)
    batch = event(record("INSERT", None, image(n, ws_url=up.url("n"))),
                  record("MODIFY", before, after), record("MODIFY", stopped, restarted),
                  record("MODIFY", image(f"{tag}-h", owner=f"gone-{tag}#abc123", epoch=5),
                         handed),
                  record("MODIFY", image(f"{tag}-o", owner=successor, epoch=5,
                                         ws_url=up.url("o")), over))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _lambda_env(fleet.aws, fleet, folder).items():
            mp.setenv(key, value)
        router.configure(None)
        try:
            resp = router.lambda_handler(batch, LocalContext("holdfast-router"))  # type: ignore[arg-type]
        finally:
            router.configure(None)
    assert resp == {"batchItemFailures": []}
    held = fleet.item(f"{tag}-o")[schema.ATTR.lease_expires_at_ms]
    assert int(held["N"]) > wall_clock_ms()  # the hold was written (and recorded)


def _drive_sweeper(fleet: Fleet, up: UpstreamThread, folder: Path, tag: str) -> None:
    """A dead session owning a stream (and its left-over order queue), an expired lease, an
    item without an expiry, and two live sessions out of balance (targets for both, one sent
    to the busy one's order queue)."""
    from holdfast.lambdas.sweeper import handler as sweeper

    ghost = _stale_session(fleet, f"ghost-{tag}", f"{tag}-g", up.url("g"))
    # A second stream of the dead session: the reap releases them in one PartiQL batch.
    fleet.create(f"{tag}-g2", up.url("g2"))
    LeaseStore(fleet.ddb, fleet.table, lease_ms=3_600_000, skew_ms=300).acquire(f"{tag}-g2",
                                                                                 ghost)
    # The order queue its crash left behind: the sweeper collects it once the session is dead.
    fleet.sqs.create_queue(QueueName=order_queue_name(prefix_for(fleet.table), ghost))
    live = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=60_000,
                        skew_ms=300)
    busy = live.start(f"busy-{tag}", 50)
    live.heartbeat_full(busy, held=10, capacity=50)  # held as reported: no leases needed
    live.start(f"idle-{tag}", 50)
    fleet.sqs.create_queue(QueueName=order_queue_name(prefix_for(fleet.table), busy.owner))
    fleet.create(f"{tag}-e", up.url("e"))
    LeaseStore(fleet.ddb, fleet.table, lease_ms=1_000, skew_ms=300,
               clock=lambda: wall_clock_ms() - 60_000).acquire(f"{tag}-e", "gone-holder")
    fleet.ddb.put_item(TableName=fleet.table, Item={
        "Pk": {"S": schema.pk_for(f"{tag}-u")}, "desired_state": {"S": schema.STARTED},
        "ws_url": {"S": up.url("u")}})
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**_lambda_env(fleet.aws, fleet, folder),
                           "HOLDFAST_SWEEP_INTERVAL_MS": "200", "HOLDFAST_SWEEP_MAX_RUN_MS": "1500",
                           "HOLDFAST_SWEEP_MARGIN_MS": "1000",
                           "HOLDFAST_SWEEP_UNINDEXED_SCAN_MS": "500"}.items():
            mp.setenv(key, value)
        sweeper.configure(None)
        try:
            summary = sweeper.lambda_handler({}, LocalContext("holdfast-sweeper",
                                                              timeout_ms=60_000))
        finally:
            sweeper.configure(None)
    assert summary["errors"] == 0 and summary["streams_reaped"] >= 1, summary
    assert summary["balance_targets"] == 2, summary


def _drive_taskstopped(fleet: Fleet, up: UpstreamThread, folder: Path, tag: str) -> None:
    """A live session holding a stream reported STOPPED (dead + release), then the same event
    in a cold container (nothing left: the session is marked reaped); a session silent past
    its TTL reported without a stop time (the sweeper's to declare: only read)."""
    from holdfast.lambdas.taskstopped import handler as taskstopped
    from holdfast.lambdas.taskstopped.events import task_stopped_event

    wid = f"stopped-{tag}"
    session = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=60_000,
                           skew_ms=300).start(wid, 10)
    fleet.create(f"{tag}-t", up.url("t"))
    LeaseStore(fleet.ddb, fleet.table, lease_ms=3_600_000, skew_ms=300).acquire(
        f"{tag}-t", session.owner)
    stopped = task_stopped_event(wid, stopped_at_ms=wall_clock_ms())
    silent = SessionStore(fleet.ddb, fleet.session_table, fleet.table, ttl_ms=1,
                          skew_ms=0).start(f"{wid}-silent", 10)
    fleet.ddb.update_item(  # long past its TTL
        TableName=fleet.session_table, Key={schema.SESSION.pk: {
            "S": schema.session_pk_for(silent.worker_id)}},
        UpdateExpression="SET #exp = :zero",
        ExpressionAttributeNames={"#exp": schema.SESSION.expires_at_ms},
        ExpressionAttributeValues={":zero": {"N": "0"}})
    no_stop_time = task_stopped_event(silent.worker_id, stopped_at_ms=0)
    del no_stop_time["detail"]["stoppedAt"]
    summaries = []
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _lambda_env(fleet.aws, fleet, folder).items():
            mp.setenv(key, value)
        for report in (stopped, stopped, no_stop_time):
            taskstopped.configure(None)
            try:
                summaries.append(taskstopped.lambda_handler(
                    report, LocalContext("holdfast-taskstopped")))  # type: ignore[arg-type]
            finally:
                taskstopped.configure(None)
    assert [(s["declared_dead"], s["released"]) for s in summaries] == [
        (True, 1), (False, 0), (False, 0)]


@pytest.fixture(scope="module")
def recorded(ddb_local: LocalAws,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every call of the scenario, and the real resource names -> what they are."""
    tag = f"iam{uuid.uuid4().hex[:8]}"
    fleet = make_fleet(ddb_local, tag)
    folder = tmp_path_factory.mktemp("aws-calls")
    up = UpstreamThread(rate=20)
    try:
        _drive_worker(fleet, up, folder, tag)
        _drive_sweeper(fleet, up, folder, tag)
        _drive_taskstopped(fleet, up, folder, tag)
    finally:
        up.stop()
    kinds = {"order prefix": prefix_for(fleet.table),
             f"dynamodb:{fleet.table}": "leases", f"dynamodb:{fleet.session_table}": "sessions",
             f"dynamodb:{fleet.table}/index/{schema.GSI_NAME}": "seed index",
             f"dynamodb:{fleet.table}/index/{schema.OWNER_INDEX_NAME}": "owner index",
             f"sqs:{fleet.queue_url.rstrip('/').rpartition('/')[2]}": "queue"}
    yield {"calls": _calls(folder), "kinds": kinds}
    fleet.ddb.delete_table(TableName=fleet.table)
    fleet.ddb.delete_table(TableName=fleet.session_table)
    fleet.sqs.delete_queue(QueueUrl=fleet.queue_url)


def _kind_of(recorded: dict[str, Any], service: str, resource: str) -> str | None:
    """What a resource is (``leases``, ``queue``, ``order queue``, ...), None if unknown."""
    kinds = recorded["kinds"]
    if service == "sqs" and resource.startswith(kinds["order prefix"]):
        return "order queue"  # one per worker session, named <prefix><owner>
    if service == "sqs" and resource == "*":
        return "any"  # ListQueues names no queue: IAM only grants it on "*"
    kind = kinds.get(f"{service}:{resource}")
    return str(kind) if kind is not None else None


def _kind(recorded: dict[str, Any], call: dict[str, Any]) -> str:
    """What a call's resource is (``leases``, ``queue``, ...), "" if it names none."""
    return _kind_of(recorded, call["service"], call.get("resource", "")) or ""


def _logical(template: dict[str, Any]) -> dict[str, str]:
    """Resource kind -> logical name as ``tests.infra.iam.arn_name`` renders it."""
    leases = lease_table_id(template)
    return {"leases": leases, "sessions": session_table_id(template),
            "seed index": f"{leases}/index/{schema.GSI_NAME}",
            "owner index": f"{leases}/index/{schema.OWNER_INDEX_NAME}",
            "queue": logical_id(template, "AWS::SQS::Queue", "QueuesNudges"),
            # As tests.infra.iam.arn_name renders the stack's order-queue wildcard.
            "order queue": ('arn:{"Ref": "AWS::Partition"}:sqs:{"Ref": "AWS::Region"}:'
                            f'{{"Ref": "AWS::AccountId"}}:{orders_queue_prefix(STACK)}*'),
            "any": "*"}


def _used(recorded: dict[str, Any], template: dict[str, Any],
          component: str) -> list[tuple[str, str, dict[str, Any], str]]:
    """(IAM action, logical resource, request context, operation) of every call made."""
    logical = _logical(template)
    out = []
    for call in recorded["calls"]:
        if call["component"] != component:
            continue
        for need in needs_of(call):
            kind = _kind_of(recorded, call["service"], need.resource)
            assert kind is not None, f"{component} called {call} on a resource of no test"
            out.append((need.action, logical[kind], need.context, call["operation"]))
    return out


def test_each_component_was_seen_on_every_path(recorded: dict[str, Any]) -> None:
    """The scenario recorded the minimum set of operations of each component."""
    for component in COMPONENTS:
        seen = {(c["operation"], _kind(recorded, c))
                for c in recorded["calls"] if c["component"] == component}
        assert MINIMUM[component] <= seen, (component, sorted(MINIMUM[component] - seen))
    assert {c["component"] for c in recorded["calls"]} <= set(COMPONENTS)


def test_every_call_is_allowed_by_its_role(recorded: dict[str, Any],
                                           template_json: dict[str, Any]) -> None:
    """Each recorded call's IAM action, resource and condition keys pass its role's policy."""
    roles = role_ids(template_json)
    denied = set()
    for component in COMPONENTS:
        statements = role_statements(template_json, roles[component])
        for action, resource, context, operation in _used(recorded, template_json, component):
            if not allows(statements, action, resource, context):
                denied.add((component, operation, action, resource, json.dumps(context)))
    assert sorted(denied) == []


def test_no_role_grants_what_nothing_calls(recorded: dict[str, Any],
                                           template_json: dict[str, Any]) -> None:
    """Every (action, resource) a role grants is called by its code or needed by AWS."""
    roles = role_ids(template_json)
    unused = set()
    for component in COMPONENTS:
        used = {(a, r) for a, r, _, _ in _used(recorded, template_json, component)}
        aws_side = AWS_SIDE_ACTIONS.get(component, {})
        for s in role_statements(template_json, roles[component]):
            for action in s["Action"] if isinstance(s["Action"], list) else [s["Action"]]:
                for res in s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]:
                    name = arn_name(res)
                    if (action, name) in used or any(
                            a == action and (p == "*" == name or (name.startswith(p) and p != "*"))
                            for a, p in aws_side):
                        continue
                    unused.add((component, action, name))
    assert sorted(unused) == []


def test_only_the_fleet_roles_send_nudges(recorded: dict[str, Any],
                                          template_json: dict[str, Any]) -> None:
    """The nudge queue denies SendMessage to every principal but the roles seen sending."""
    roles = role_ids(template_json)
    queue = _logical(template_json)["queue"]
    senders = {c["component"] for c in recorded["calls"]
               if c["operation"] == "SendMessageBatch" and _kind(recorded, c) == "queue"}
    assert senders == set(SENDERS)
    (policy,) = [p["Properties"] for p in resources(template_json, "AWS::SQS::QueuePolicy")
                 .values() if {"Ref": queue} in p["Properties"]["Queues"]]
    statements = policy["PolicyDocument"]["Statement"]
    (deny,) = [s for s in statements if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"]
    assert deny["Principal"] == {"AWS": "*"}
    assert arn_name(deny["Resource"]) == queue
    assert deny["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": [
        {"Fn::GetAtt": [roles[c], "Arn"]} for c in SENDERS]}}
    assert any(s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
               for s in statements)
