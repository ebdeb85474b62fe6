"""The sweeper's rebalancing decisions against DynamoDB Local and moto's SQS."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

import pytest

from holdfast.core import names
from holdfast.core.aws import client_config
from holdfast.core.boto import new_session
from holdfast.core.bundles import unbundle
from holdfast.core.directives import Directive, parse_inbox_body
from holdfast.core.exceptions import ConfigError
from holdfast.core.nudge import Nudge
from holdfast.core.orders import order_queue_name, prefix_for
from holdfast.core.schema import SESSION, SessionState, session_pk_for, session_table_definition
from holdfast.core.sessions import Session, SessionItem, SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.core.table import count_owned, create_stream
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper import handler
from holdfast.lambdas.sweeper.balancer import Balancer
from holdfast.lambdas.sweeper.loop import SweepDeps, memory_for, sweep_once
from holdfast.lambdas.sweeper.results import SweepResult, SweepStats
from holdfast.runner.context import LocalContext

TTL_MS = 60_000  # sessions stay alive for the whole test
CAPACITY = 50


class CountingDdb:
    """The real client, counting its UpdateItem calls."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.updates = 0

    def update_item(self, **kw: Any) -> Any:
        self.updates += 1
        return self.real.update_item(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def session_table(ddb: Any) -> str:
    name = f"sessions-{uuid.uuid4().hex[:12]}"
    ddb.create_table(**session_table_definition(name))
    return name


def settings_for(table: str, queue_url: str, session_table: str, **kw: Any) -> Settings:
    return Settings(table=table, queue_url=queue_url, session_table=session_table,
                    orders_queue_prefix=prefix_for(table), **kw)


def worker(store: SessionStore, worker_id: str, held: int) -> Session:
    """A live session that reports ``held`` streams, as a worker's heartbeat does; the
    streams exist as STARTED items owned by it (the decider counts them when it may move)."""
    session = store.start(worker_id, CAPACITY)
    for i in range(held):
        conn_id = f"{worker_id}-s{i}"
        create_stream(store.client, store.lease_table, conn_id, "wss://example.com/x")
        LeaseStore(store.client, store.lease_table, lease_ms=3_600_000,
                   skew_ms=1_000).acquire(conn_id, session.owner)
    return store.heartbeat_full(session, held=held, capacity=CAPACITY).session


def deps_for(ddb: Any, sqs: Any, settings: Settings, **kw: Any) -> SweepDeps:
    sessions = SessionStore(ddb, settings.session_table or "", settings.table, ttl_ms=TTL_MS,
                            skew_ms=settings.skew_ms)
    return SweepDeps(ddb, sqs, settings, sessions=sessions, **kw)


def directive_of(store: SessionStore, worker_id: str) -> Directive | None:
    item = store.get(worker_id)
    assert item is not None
    return item.directive


def alive(store: SessionStore) -> list[SessionItem]:
    return [i for i in store.scan()
            if isinstance(i, SessionItem) and i.state is SessionState.ALIVE]


def test_an_unbalanced_fleet_gets_targets_and_the_busy_owner_its_message(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """Two sessions at 10 and two empty: shares of 5, one shed at a time each, on the queue."""
    settings = settings_for(table, queue_url, session_table)
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None
    busy = [worker(deps.sessions, f"{unique_id}-b{i}", 10) for i in range(2)]
    idle = [worker(deps.sessions, f"{unique_id}-i{i}", 0) for i in range(2)]
    url = sqs.create_queue(QueueName=order_queue_name(prefix_for(table), busy[0].owner))[
        "QueueUrl"]
    result = sweep_once(deps, memory_for(settings))
    assert result.balance is not None and not result.balance.balanced
    assert (result.balance.written, result.balance.imbalance) == (4, 10)
    # 20 streams: 10 % may move at once, 2 in all, split between the two busy workers.
    for s in busy:
        d = directive_of(deps.sessions, s.worker_id)
        assert d is not None and (d.share, d.ceiling, d.shed_at_once, d.fleet) == (5, 5, 1, 4)
    for s in idle:
        d = directive_of(deps.sessions, s.worker_id)
        assert d is not None and (d.share, d.ceiling, d.shed_at_once) == (5, 6, 0)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    bodies = [m["Body"] for m in got.get("Messages", [])]
    assert [parse_inbox_body(b, busy[0].owner) for b in bodies] == [
        directive_of(deps.sessions, busy[0].worker_id)]


def test_a_balanced_fleet_costs_no_write(ddb: Any, sqs: Any, table: str, queue_url: str,
                                         session_table: str, unique_id: str) -> None:
    """Within the band (5 and 6 of 11): a decision is made, and nothing is written."""
    settings = settings_for(table, queue_url, session_table)
    seed = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=settings.skew_ms)
    worker(seed, f"{unique_id}-a", 5)
    worker(seed, f"{unique_id}-b", 6)
    counting = CountingDdb(ddb)
    deps = deps_for(counting, sqs, settings)
    result = sweep_once(deps, memory_for(settings))
    assert result.balance is not None and result.balance.balanced
    assert counting.updates == 0
    assert directive_of(seed, f"{unique_id}-a") is None


def test_an_unchanged_target_is_rewritten_only_past_half_its_ttl(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """The next decisions write nothing while the target lives on; past half its TTL, again."""
    settings = settings_for(table, queue_url, session_table, balance_interval_ms=2_000,
                            balance_target_ttl_ms=10_000)
    counting = CountingDdb(ddb)
    store = SessionStore(counting, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)  # type: ignore[arg-type]
    worker(store, f"{unique_id}-a", 8)
    worker(store, f"{unique_id}-b", 0)
    balancer, t0 = Balancer(settings), wall_clock_ms()
    first = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0)
    assert first is not None and first.written == 2
    assert balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0 + 1_000) is None
    counting.updates = 0
    for later in (2_000, 4_000):
        again = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0 + later)
        assert again is not None and (again.balanced, again.written) == (False, 0)
    assert counting.updates == 0
    refreshed = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0 + 6_000)
    assert refreshed is not None and refreshed.written == 2
    d = directive_of(store, f"{unique_id}-a")
    assert d is not None and d.until_ms == t0 + 16_000


def test_a_changed_fleet_is_given_new_targets_at_once(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """A worker joining changes every share: the next decision writes them all."""
    settings = settings_for(table, queue_url, session_table)
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    worker(store, f"{unique_id}-a", 12)
    worker(store, f"{unique_id}-b", 0)
    balancer, t0 = Balancer(settings), wall_clock_ms()
    assert balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0) is not None
    worker(store, f"{unique_id}-c", 0)
    round2 = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0 + 2_000)
    assert round2 is not None and round2.written == 3
    d = directive_of(store, f"{unique_id}-a")
    assert d is not None and (d.share, d.fleet) == (4, 3)


def test_unowned_streams_count_in_the_shares_and_use_up_the_budget(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """Four STARTED streams nobody holds (in motion): in the shares, and no shed may start."""
    settings = settings_for(table, queue_url, session_table)
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None
    worker(deps.sessions, f"{unique_id}-a", 10)
    worker(deps.sessions, f"{unique_id}-b", 0)
    for i in range(4):
        assert create_stream(ddb, table, f"{unique_id}-s{i}", "wss://feeds.example.test/")
    result = sweep_once(deps, memory_for(settings))
    assert len(result.due) == 4
    assert result.balance is not None and result.balance.written == 2
    d = directive_of(deps.sessions, f"{unique_id}-a")
    assert d is not None and (d.share, d.shed_at_once) == (7, 0)


def test_turned_off_it_decides_nothing(ddb: Any, sqs: Any, table: str, queue_url: str,
                                       session_table: str, unique_id: str) -> None:
    """HOLDFAST_BALANCE=off: no decider is made and no session is given a target."""
    settings = Settings.from_env({
        names.ENV_TABLE: table, names.ENV_QUEUE_URL: queue_url,
        names.ENV_SESSION_TABLE: session_table, names.ENV_BALANCE: "off"})
    assert not settings.balance
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None
    worker(deps.sessions, f"{unique_id}-a", 10)
    worker(deps.sessions, f"{unique_id}-b", 0)
    result = sweep_once(deps, memory_for(settings))
    assert result.balance is None and deps.balancer is None
    assert directive_of(deps.sessions, f"{unique_id}-a") is None


def test_dead_and_ended_sessions_get_no_target(ddb: Any, sqs: Any, table: str,
                                               queue_url: str, session_table: str,
                                               unique_id: str) -> None:
    """Only live sessions share the load: an ended one and a silent one get no target."""
    settings = settings_for(table, queue_url, session_table)
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None
    worker(deps.sessions, f"{unique_id}-busy", 10)
    worker(deps.sessions, f"{unique_id}-idle", 0)
    assert deps.sessions.end(worker(deps.sessions, f"{unique_id}-ended", 10))
    past = wall_clock_ms() - 120_000
    silent = SessionStore(ddb, session_table, table, ttl_ms=3_000, skew_ms=1_000,
                          clock=lambda: past)
    worker(silent, f"{unique_id}-silent", 10)
    result = sweep_once(deps, memory_for(settings))
    assert result.dead == [silent.get(f"{unique_id}-silent").owner]  # type: ignore[union-attr]
    assert result.balance is not None and result.balance.written == 2
    for wid in ("ended", "silent"):
        assert directive_of(deps.sessions, f"{unique_id}-{wid}") is None
    d = directive_of(deps.sessions, f"{unique_id}-busy")
    # The ended and the dead one's 20 streams were released by the reap in the same sweep,
    # which then found them unowned: the two live workers share all 30.
    assert d is not None and (d.share, d.fleet) == (15, 2)


def test_a_draining_session_is_told_to_shed_everything(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """Draining: a share of 0 and a ceiling of 0, the others take its load."""
    settings = settings_for(table, queue_url, session_table)
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    leaving = worker(store, f"{unique_id}-a", 6)
    worker(store, f"{unique_id}-b", 3)
    worker(store, f"{unique_id}-c", 3)
    assert store.set_draining(leaving.owner, True)
    out = Balancer(settings).step(store, sqs, alive(store), unowned=0, now_ms=wall_clock_ms())
    assert out is not None and out.written == 3
    d = directive_of(store, f"{unique_id}-a")
    assert d is not None and (d.share, d.ceiling, d.shed_at_once) == (0, 0, 1)


def test_a_member_that_begins_draining_is_decided_for_at_once(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """A drain that begins between two decisions (a worker's own stop) is decided at the next
    sweep, not an interval later; one already decided for waits for the interval as ever."""
    settings = settings_for(table, queue_url, session_table, balance_interval_ms=60_000)
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    leaving = worker(store, f"{unique_id}-a", 6)
    staying = worker(store, f"{unique_id}-b", 6)
    balancer, t0 = Balancer(settings), wall_clock_ms()
    first = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0)
    assert first is not None and first.balanced
    assert store.set_draining(leaving.owner, True)
    out = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0 + 1_000)
    assert out is not None and not out.balanced
    d = directive_of(store, f"{unique_id}-a")
    assert d is not None and (d.share, d.successors) == (0, ((staying.owner, 6),))
    assert balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0 + 2_000) is None


def test_a_dynamodb_error_skips_the_round_without_failing(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """DynamoDB unreachable for the writes: the round is logged as skipped, nothing raised."""

    from holdfast.localaws.processes import free_port

    settings = settings_for(table, queue_url, session_table)
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    worker(store, f"{unique_id}-a", 10)
    worker(store, f"{unique_id}-b", 0)
    dead = new_session().client(
        "dynamodb", endpoint_url=f"http://127.0.0.1:{free_port()}", region_name="us-east-1",
        aws_access_key_id="local", aws_secret_access_key="local",
        config=client_config(retries=1, read_timeout=1.0))
    unreachable = SessionStore(dead, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    out = Balancer(settings).step(unreachable, sqs, alive(store), unowned=0,
                                  now_ms=wall_clock_ms())
    assert out is not None and out.failed and out.written == 0
    assert any("rebalance round skipped" in r.getMessage() for r in caplog.records)


def test_a_session_refused_its_target_as_invalid_costs_only_itself(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """A session item too big to take its target (DynamoDB's ValidationException) is logged
    and skipped; the others are written in the same round, which is not a failed one."""
    settings = settings_for(table, queue_url, session_table)
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    busy = worker(store, f"{unique_id}-a", 10)
    idle = [worker(store, f"{unique_id}-i{i}", 0) for i in range(2)]
    # Filled to within 20 bytes of the 400 KB item limit: the directive's attributes push it
    # over (the largest padding DynamoDB takes, found by trying).
    for pad in range(409_600, 408_000, -20):
        with contextlib.suppress(ddb.exceptions.ClientError):
            ddb.update_item(
                TableName=session_table,
                Key={SESSION.pk: {"S": session_pk_for(idle[0].worker_id)}},
                UpdateExpression="SET #pad = :pad", ExpressionAttributeNames={"#pad": "pad"},
                ExpressionAttributeValues={":pad": {"S": "x" * pad}})
            break
    out = Balancer(settings).step(store, sqs, alive(store), unowned=0, now_ms=wall_clock_ms())
    assert out is not None and not out.failed and out.written == 2
    assert directive_of(store, idle[0].worker_id) is None
    assert directive_of(store, idle[1].worker_id) is not None
    assert directive_of(store, busy.worker_id) is not None
    assert any("rebalance target refused" in r.getMessage() for r in caplog.records)


def test_the_invocation_counts_and_emits_its_targets(
        aws_env: dict[str, str], ddb: Any, table: str, queue_url: str, session_table: str,
        unique_id: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The handler's summary and EMF carry the targets written and the imbalance."""
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    worker(store, f"{unique_id}-a", 10)
    worker(store, f"{unique_id}-b", 0)
    for key, value in {names.ENV_TABLE: table, names.ENV_QUEUE_URL: queue_url,
                       names.ENV_SESSION_TABLE: session_table,
                       "HOLDFAST_SWEEP_INTERVAL_MS": "200", "HOLDFAST_SWEEP_MAX_RUN_MS": "1000",
                       "HOLDFAST_SWEEP_MARGIN_MS": "500"}.items():
        monkeypatch.setenv(key, value)
    # The shared local AWS's prefix: its collector would delete other tests' order queues.
    monkeypatch.delenv(names.ENV_ORDERS_QUEUE_PREFIX, raising=False)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    handler.configure(None)
    try:
        summary = handler.lambda_handler({}, LocalContext("holdfast-sweeper",
                                                          timeout_ms=60_000))
    finally:
        handler.configure(None)
    # One decision in a second (every 2 s): both sessions were given a target.
    assert (summary["balance_targets"], summary["imbalance"]) == (2, 5)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines()
           if line.startswith("{") and "_aws" in line]
    assert any(m.get(names.METRIC_BALANCE_TARGETS) == [2.0]
               and m.get(names.METRIC_IMBALANCE) == [5.0] for m in emf), emf


def test_stats_add_up_the_decisions() -> None:
    """Targets add up across sweeps; the imbalance is the largest seen; no decision, none."""
    from holdfast.lambdas.sweeper.balancer import BalanceRound

    stats = SweepStats()
    stats.add(SweepResult([], [], [], None, True))
    assert (stats.balance_rounds, stats.balance_targets, stats.imbalance) == (0, 0, 0)
    for written, excess in ((3, 7.0), (0, 2.0)):
        stats.add(SweepResult([], [], [], None, True,
                              balance=BalanceRound(excess, False, written)))
    assert (stats.balance_rounds, stats.balance_targets, stats.imbalance) == (2, 3, 7.0)


@pytest.mark.parametrize(("env", "match"), [
    ({names.ENV_BALANCE: "maybe"}, "HOLDFAST_BALANCE=.maybe. must be on or off"),
    ({names.ENV_BALANCE_BAND: "wide"}, "HOLDFAST_BALANCE_BAND=.wide. is not a number"),
    ({names.ENV_BALANCE_BAND: "1.5"}, "HOLDFAST_BALANCE_BAND=1.5 is out of range: allowed 0 to 1"),
    ({names.ENV_BALANCE_BAND_MIN: "-1"}, "HOLDFAST_BALANCE_BAND_MIN=-1 is out of range"),
    ({names.ENV_BALANCE_MOTION: "nan"}, "HOLDFAST_BALANCE_MOTION=nan is out of range"),
    ({names.ENV_BALANCE_INTERVAL_MS: "5"}, "HOLDFAST_BALANCE_INTERVAL_MS=5 is out of range"),
    ({names.ENV_BALANCE_INTERVAL_MS: "8000"},
     "HOLDFAST_BALANCE_TARGET_TTL_MS=15000 must be more than twice"),
    ({names.ENV_BALANCE_TARGET_TTL_MS: "soon"},
     "HOLDFAST_BALANCE_TARGET_TTL_MS=.soon. is not an integer"),
])
def test_bad_balance_settings_are_clear_errors(env: dict[str, str], match: str) -> None:
    """Each malformed balance setting is a ConfigError naming the variable and what is wrong."""
    with pytest.raises(ConfigError, match=match):
        Settings.from_env({names.ENV_TABLE: "t", names.ENV_QUEUE_URL: "http://q", **env})


def test_balance_settings_default_and_parse() -> None:
    """Defaults: on, every 2 s, ±max(1, 10 %), 10 % in motion, targets for 15 s."""
    base = {names.ENV_TABLE: "t", names.ENV_QUEUE_URL: "http://q"}
    s = Settings.from_env(base)
    assert (s.balance, s.balance_interval_ms, s.balance_band, s.balance_band_min,
            s.balance_motion, s.balance_target_ttl_ms) == (True, 2_000, 0.10, 1.0, 0.10, 15_000)
    s = Settings.from_env({**base, names.ENV_BALANCE: "ON", names.ENV_BALANCE_BAND: "0.2",
                           names.ENV_BALANCE_TARGET_TTL_MS: "30000"})
    assert (s.balance, s.balance_band, s.balance_target_ttl_ms) == (True, 0.2, 30_000)


def test_once_balanced_the_live_targets_are_lapsed_once(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """Balanced again: each live target is ended now (one write each), then nothing more."""
    settings = settings_for(table, queue_url, session_table)
    counting = CountingDdb(ddb)
    store = SessionStore(counting, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)  # type: ignore[arg-type]
    a, b = worker(store, f"{unique_id}-a", 8), worker(store, f"{unique_id}-b", 0)
    balancer, t0 = Balancer(settings), wall_clock_ms()
    first = balancer.step(store, sqs, alive(store), unowned=0, now_ms=t0)
    assert first is not None and first.written == 2
    for s in (a, b):  # the workers moved four streams
        store.heartbeat_full(s, held=4, capacity=100)
    counting.updates = 0
    done = balancer.step(store, sqs, alive(store), unowned=0,
                         now_ms=t0 + settings.balance_interval_ms)
    assert done is not None and done.balanced and done.written == 2 and counting.updates == 2
    lapsed = directive_of(store, f"{unique_id}-a")
    assert lapsed is not None and not lapsed.live(t0 + settings.balance_interval_ms)
    assert lapsed.issued_ms == lapsed.until_ms == t0 + settings.balance_interval_ms
    counting.updates = 0
    again = balancer.step(store, sqs, alive(store), unowned=0,
                          now_ms=t0 + 2 * settings.balance_interval_ms)
    assert again is not None and again.written == 0 and counting.updates == 0


def test_shares_come_from_what_each_worker_holds_not_the_stale_reports(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        unique_id: str) -> None:
    """Reports a heartbeat old say 10 + 0 while b holds 4 more: shares of 7, not 5."""
    settings = settings_for(table, queue_url, session_table)
    store = SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=1_000)
    worker(store, f"{unique_id}-a", 10)
    b = worker(store, f"{unique_id}-b", 0)
    for i in range(4):  # claimed by b since its last heartbeat: in no report yet
        create_stream(ddb, table, f"{unique_id}-new{i}", "wss://example.com/x")
        LeaseStore(ddb, table, lease_ms=3_600_000, skew_ms=1_000).acquire(
            f"{unique_id}-new{i}", b.owner)
    create_stream(ddb, table, f"{unique_id}-backoff", "wss://example.com/x")  # held by no one
    result = Balancer(settings).step(store, sqs, alive(store), unowned=0,
                                     now_ms=wall_clock_ms(),
                                     count=lambda owner: count_owned(ddb, table, owner))
    assert result is not None and result.written == 2
    d = directive_of(store, f"{unique_id}-a")
    assert d is not None and d.share == 7


def test_a_dead_workers_streams_are_nudged_on_live_workers_queues_least_loaded_first(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str) -> None:
    """A gone worker's 6 streams, reaped: nudged on the live workers' own order queues too,
    one bundle each, the idle worker getting more than the busy one (4 and 2), each stream
    once; a killed worker's pending long polls on the shared queue cannot swallow these."""
    settings = settings_for(table, queue_url, session_table, balance=False)
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None and settings.orders_queue_prefix is not None
    suffix = uuid.uuid4().hex[:6]
    idle, busy = worker(deps.sessions, f"idle-{suffix}", 0), worker(
        deps.sessions, f"busy-{suffix}", 2)
    urls = {s.owner: sqs.create_queue(QueueName=order_queue_name(
        settings.orders_queue_prefix, s.owner))["QueueUrl"] for s in (idle, busy)}
    # Gone without releasing (its goodbye written, its streams still its own): reaped.
    deps.sessions.end(worker(deps.sessions, f"dead-{suffix}", 6))
    sweep_once(deps, memory_for(settings))
    got: dict[str, list[str]] = {}
    for owner, url in urls.items():
        msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        assert len(msgs) == 1, owner  # one bundle
        said = [parse_inbox_body(b, owner) for b in unbundle(msgs[0]["Body"], owner)]
        got[owner] = [n.conn_id for n in said if isinstance(n, Nudge)]
    assert (len(got[idle.owner]), len(got[busy.owner])) == (4, 2)
    assert sorted(got[idle.owner] + got[busy.owner]) == [f"dead-{suffix}-s{i}" for i in range(6)]


def test_in_a_deploy_a_dead_workers_streams_are_nudged_on_the_new_versions_queues(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str) -> None:
    """Two versions live (a deploy): the reaped streams' own-queue nudges all go to the new
    version's worker, however idle the old one (it would hand them on again at its stop)."""
    settings = settings_for(table, queue_url, session_table, balance=False)
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None and settings.orders_queue_prefix is not None
    suffix = uuid.uuid4().hex[:6]
    old = deps.sessions.start(f"old-{suffix}", CAPACITY, version="v1")
    new = deps.sessions.start(f"new-{suffix}", CAPACITY, version="v2")
    deps.sessions.heartbeat_full(new, held=5, capacity=CAPACITY)  # busier than the old one
    urls = {s.owner: sqs.create_queue(QueueName=order_queue_name(
        settings.orders_queue_prefix, s.owner))["QueueUrl"] for s in (old, new)}
    deps.sessions.end(worker(deps.sessions, f"dead-{suffix}", 4))
    sweep_once(deps, memory_for(settings))
    assert _order_queue_nudges(sqs, urls[old.owner], old.owner) == []
    assert sorted(_order_queue_nudges(sqs, urls[new.owner], new.owner)) == [
        f"dead-{suffix}-s{i}" for i in range(4)]


def _order_queue_nudges(sqs: Any, url: str, owner: str) -> list[str]:
    """The conn_ids of every nudge waiting on ``owner``'s order queue (bundles unpacked)."""
    ids: list[str] = []
    while msgs := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for msg in msgs:
            said = [parse_inbox_body(b, owner) for b in unbundle(msg["Body"], owner)]
            ids += [n.conn_id for n in said if isinstance(n, Nudge)]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])
    return ids


@pytest.mark.parametrize("reaped", ["just now", "long ago"])
def test_orphans_are_nudged_on_live_queues_while_a_reaped_workers_polls_may_be_pending(
        ddb: Any, sqs: Any, table: str, queue_url: str, session_table: str,
        reaped: str) -> None:
    """Within the longest poll wait of a reap, an orphan the sweep nudges (a release whose
    shared-queue nudge a dead worker's pending poll may have swallowed) also goes to a live
    worker's own queue; long after it, only to the shared queue."""
    from holdfast.lambdas.sweeper.loop import PENDING_POLLS_MS
    settings = settings_for(table, queue_url, session_table, balance=False,
                            unclaimed_grace_ms=0)
    deps = deps_for(ddb, sqs, settings)
    assert deps.sessions is not None and settings.orders_queue_prefix is not None
    suffix = uuid.uuid4().hex[:6]
    live = worker(deps.sessions, f"live-{suffix}", 0)
    url = sqs.create_queue(QueueName=order_queue_name(settings.orders_queue_prefix,
                                                      live.owner))["QueueUrl"]
    deps.sessions.end(worker(deps.sessions, f"dead-{suffix}", 1))
    sweep_once(deps, memory_for(settings))
    assert _order_queue_nudges(sqs, url, live.owner) == [f"dead-{suffix}-s0"]
    if reaped == "long ago":
        assert deps.last_reap_ms is not None
        deps.last_reap_ms -= PENDING_POLLS_MS + 1
    orphan = f"released-{suffix}"
    create_stream(ddb, table, orphan, "wss://example.com/x")
    result = sweep_once(deps, memory_for(settings))
    assert orphan in [n.conn_id for n in result.nudged]  # the shared queue's nudge, always
    assert (orphan in _order_queue_nudges(sqs, url, live.owner)) == (reaped == "just now")
