"""Worker configuration: defaults, clear errors naming the variable, the worker id."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from holdfast.core import settings as S
from holdfast.core.exceptions import ConfigError
from holdfast.core.framebuffers import MEMORY_RESERVE_MIB, buffer_bytes
from holdfast.core.rules import LeaseTiming
from holdfast.worker.config import (
    default_worker_id,
    ecs_task_id,
    ecs_task_version,
    load_config,
)

BASE = {"HOLDFAST_TABLE": "t", "HOLDFAST_QUEUE_URL": "http://127.0.0.1:1/q",
        "HOLDFAST_WORKER_ID": "w1", "HOLDFAST_SESSION_TABLE": "s"}


def test_defaults_match_the_issue() -> None:
    """Sessions: TTL 8 s, heartbeat 2 s, skew 1 s, margin 0.8 s (LeaseTiming's own defaults),
    checkpoints every 20 s; batch writes, 256 KiB frames."""
    cfg = load_config(BASE)
    assert (cfg.lease_ms, cfg.heartbeat_ms, cfg.reconcile_s) == (4_000, 1_000, 60)
    assert cfg.timing == LeaseTiming(4_000, 1_000, 250, 400) == LeaseTiming()
    assert (cfg.session_table, cfg.checkpoint_ms) == ("s", 20_000)
    assert cfg.renew_mode == "batch" and not cfg.compression
    assert cfg.max_frame_bytes == 2**18 and cfg.shutdown_s < 30  # fits ECS's default 30 s
    assert (cfg.max_queue, cfg.max_seq_jump, cfg.poison_replays) == (2, 1_000_000, 3)
    assert cfg.handler_timeout_s == 30 and cfg.task_memory_mib is None


def test_the_stacks_default_task_fits_its_frame_buffers() -> None:
    """500 connections in 1024 MiB (the CDK defaults) validate with the default frame limits."""
    cfg = load_config({**BASE, "HOLDFAST_MAX_CONNECTIONS": "500",
                       "HOLDFAST_TASK_MEMORY_MIB": "1024"})
    assert buffer_bytes(cfg.max_connections, cfg.max_frame_bytes, cfg.max_queue) <= (
        1024 - MEMORY_RESERVE_MIB) * 2**20


@pytest.mark.parametrize("env", [
    {"HOLDFAST_MAX_FRAME_BYTES": str(2**20)},  # 500 x 1 MiB x 5: the old default
    {"HOLDFAST_MAX_QUEUE": "16"},  # websockets' default queue
    {"HOLDFAST_MAX_CONNECTIONS": "1000"},
])
def test_frame_buffers_that_cannot_fit_the_task_are_refused(env: dict[str, str]) -> None:
    """connections x frame size x (queue + 3.5) over the task memory is a ConfigError naming all."""
    with pytest.raises(ConfigError) as err:
        load_config({**BASE, "HOLDFAST_MAX_CONNECTIONS": "500",
                     "HOLDFAST_TASK_MEMORY_MIB": "1024", **env})
    for name in ("HOLDFAST_MAX_CONNECTIONS", "HOLDFAST_MAX_FRAME_BYTES", "HOLDFAST_MAX_QUEUE",
                 "HOLDFAST_TASK_MEMORY_MIB"):
        assert name in str(err.value)


def test_seq_jump_bound_zero_means_none() -> None:
    """HOLDFAST_MAX_SEQ_JUMP=0 turns the bound off; a poison count over the give-up is refused."""
    assert load_config({**BASE, "HOLDFAST_MAX_SEQ_JUMP": "0"}).max_seq_jump is None
    with pytest.raises(ConfigError, match="HOLDFAST_POISON_REPLAYS"):
        load_config({**BASE, "HOLDFAST_POISON_REPLAYS": "7"})


@pytest.mark.parametrize(("env", "names"), [
    ({"HOLDFAST_TABLE": ""}, "HOLDFAST_TABLE"),
    ({"HOLDFAST_QUEUE_URL": "holdfast-nudges"}, "HOLDFAST_QUEUE_URL"),
    ({"HOLDFAST_LEASE_SECONDS": "soon"}, "HOLDFAST_LEASE_SECONDS"),
    ({"HOLDFAST_LEASE_SECONDS": "nan"}, "HOLDFAST_LEASE_SECONDS"),
    ({"HOLDFAST_HEARTBEAT_SECONDS": "15"}, "HOLDFAST_HEARTBEAT_SECONDS"),
    ({"HOLDFAST_SESSION_TABLE": ""}, "HOLDFAST_SESSION_TABLE"),
    ({"HOLDFAST_SKEW_MS": "1.5"}, "HOLDFAST_SKEW_MS"),
    ({"HOLDFAST_MARGIN_MS": "-1"}, "HOLDFAST_MARGIN_MS"),
    ({"HOLDFAST_CHECKPOINT_SECONDS": "0"}, "HOLDFAST_CHECKPOINT_SECONDS"),
    ({"HOLDFAST_WORKER_ID": "has#hash"}, "HOLDFAST_WORKER_ID"),
    ({"HOLDFAST_MAX_CONNECTIONS": "0"}, "HOLDFAST_MAX_CONNECTIONS"),
    ({"HOLDFAST_MAX_CONNECTIONS": "2.5"}, "HOLDFAST_MAX_CONNECTIONS"),
    ({"HOLDFAST_RECONCILE_SECONDS": "-1"}, "HOLDFAST_RECONCILE_SECONDS"),
    ({"HOLDFAST_RENEW_MODE": "turbo"}, "HOLDFAST_RENEW_MODE"),
    ({"HOLDFAST_ALLOWED_HOSTS": "ok.com,10.0.0.0/99"}, "HOLDFAST_ALLOWED_HOSTS"),
    ({"HOLDFAST_WORKER_ID": "has space"}, "HOLDFAST_WORKER_ID"),
    ({"HOLDFAST_HANDLER": "no_colon"}, "HOLDFAST_HANDLER"),
    ({"HOLDFAST_COMPRESSION": "maybe"}, "HOLDFAST_COMPRESSION"),
    ({"HOLDFAST_HEALTH_PORT": "70000"}, "HOLDFAST_HEALTH_PORT"),
    ({"HOLDFAST_SEND_WORKER_ID": "sometimes"}, "HOLDFAST_SEND_WORKER_ID"),
    ({"HOLDFAST_LOG_URL_PATHS": "sometimes"}, "HOLDFAST_LOG_URL_PATHS"),
    ({"HOLDFAST_ALLOWED_HOSTS": "169.254.169.254"}, "HOLDFAST_ALLOWED_HOSTS"),
    ({"HOLDFAST_MAX_QUEUE": "0"}, "HOLDFAST_MAX_QUEUE"),
    ({"HOLDFAST_TASK_MEMORY_MIB": "lots"}, "HOLDFAST_TASK_MEMORY_MIB"),
    ({"HOLDFAST_MAX_SEQ_JUMP": "-1"}, "HOLDFAST_MAX_SEQ_JUMP"),
    ({"HOLDFAST_HANDLER_TIMEOUT_SECONDS": "0"}, "HOLDFAST_HANDLER_TIMEOUT_SECONDS"),
    ({"HOLDFAST_CONNECT_RATE": "-1"}, "HOLDFAST_CONNECT_RATE"),
    ({"HOLDFAST_CONNECT_BURST": "0"}, "HOLDFAST_CONNECT_BURST"),
    ({"HOLDFAST_REBALANCE_COOLDOWN_SECONDS": "soon"}, "HOLDFAST_REBALANCE_COOLDOWN_SECONDS"),
    ({"HOLDFAST_DRAIN_AT_ONCE": "0"}, "HOLDFAST_DRAIN_AT_ONCE"),
])
def test_bad_values_name_the_variable(env: dict[str, str], names: str) -> None:
    """Every bad value is a ConfigError whose message names the variable."""
    with pytest.raises(ConfigError, match=names):
        load_config({**BASE, **env})


def test_missing_required_variable() -> None:
    """Without a table the error says what HOLDFAST_TABLE must name."""
    with pytest.raises(ConfigError, match="HOLDFAST_TABLE is not set"):
        load_config({"HOLDFAST_QUEUE_URL": "http://x/q"})


def test_a_session_table_is_required() -> None:
    """Sessions are the only liveness: no session table is a ConfigError naming the variable."""
    env = {k: v for k, v in BASE.items() if k != "HOLDFAST_SESSION_TABLE"}
    with pytest.raises(ConfigError, match="HOLDFAST_SESSION_TABLE is not set"):
        load_config({**env, "HOLDFAST_LIVENESS": "lease"})


def test_fractional_seconds_and_allow_list() -> None:
    """Short test timings and an allow-list parse."""
    cfg = load_config({**BASE, "HOLDFAST_LEASE_SECONDS": "3", "HOLDFAST_HEARTBEAT_SECONDS": "0.5",
                       "HOLDFAST_SKEW_MS": "300", "HOLDFAST_ALLOWED_HOSTS": ".example.com",
                       "HOLDFAST_RENEW_MODE": "single", "HOLDFAST_COMPRESSION": "true"})
    assert cfg.timing.heartbeat_ms == 500 and cfg.timing.skew_ms == 300
    assert cfg.url_policy.restricted and cfg.renew_mode == "single" and cfg.compression


def test_upstreams_learn_nothing_by_default() -> None:
    """No worker-id header, no URL paths in logs and no private address unless opted in."""
    cfg = load_config(BASE)
    assert not cfg.send_worker_id and not cfg.url_policy.log_paths
    assert not cfg.url_policy.restricted and not cfg.url_policy.networks
    opted = load_config({**BASE, "HOLDFAST_SEND_WORKER_ID": "true",
                         "HOLDFAST_LOG_URL_PATHS": "1",
                         "HOLDFAST_ALLOWED_HOSTS": "127.0.0.0/8,::1/128"})
    assert opted.send_worker_id and opted.url_policy.log_paths
    assert len(opted.url_policy.networks) == 2


def test_default_worker_id_is_unique_per_process() -> None:
    """Outside ECS the id is host-pid-random, different for every call (i.e. every process)."""
    a, b = default_worker_id({}), default_worker_id({})
    assert a != b and str(__import__("os").getpid()) in a


@pytest.fixture
def metadata_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"TaskARN": "arn:aws:ecs:eu-west-1:123:task/fleet/0123abcd",
                               "Family": "holdfast-worker", "Revision": "42"})
            self.send_response(200 if self.path.endswith("/task") else 404)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v4/abc"
    server.shutdown()


def test_worker_id_from_ecs_task_metadata(metadata_server: str) -> None:
    """On ECS the worker id is the task id read from the metadata endpoint."""
    env = {"ECS_CONTAINER_METADATA_URI_V4": metadata_server}
    assert ecs_task_id(env) == "0123abcd"
    cfg = load_config({k: v for k, v in BASE.items() if k != "HOLDFAST_WORKER_ID"} | env)
    assert cfg.worker_id == "0123abcd"


def test_unreachable_metadata_falls_back() -> None:
    """A metadata endpoint that does not answer falls back to host-pid-random."""
    assert ecs_task_id({"ECS_CONTAINER_METADATA_URI_V4": "http://127.0.0.1:1/v4"}) is None
    assert ecs_task_version({"ECS_CONTAINER_METADATA_URI_V4": "http://127.0.0.1:1/v4"}) is None


def test_worker_version_from_the_setting_else_the_task_definition(metadata_server: str) -> None:
    """HOLDFAST_WORKER_VERSION wins; on ECS without it, family:revision; elsewhere unknown."""
    env = {"ECS_CONTAINER_METADATA_URI_V4": metadata_server}
    assert ecs_task_version(env) == "holdfast-worker:42"
    assert load_config(BASE | env).version == "holdfast-worker:42"
    assert load_config(BASE | env | {"HOLDFAST_WORKER_VERSION": "v7"}).version == "v7"
    assert load_config(BASE).version == ""
    with pytest.raises(ConfigError, match="HOLDFAST_WORKER_VERSION"):
        load_config(BASE | {"HOLDFAST_WORKER_VERSION": "two words"})


def test_the_order_queue_prefix_is_read_and_checked() -> None:
    """The order-queue prefix is optional, and one SQS could not name a queue with is refused."""
    assert load_config(BASE).orders_queue_prefix is None
    assert load_config({**BASE, "HOLDFAST_ORDERS_QUEUE_PREFIX": "hf-o-"}).orders_queue_prefix \
        == "hf-o-"
    with pytest.raises(ConfigError, match="HOLDFAST_ORDERS_QUEUE_PREFIX"):
        load_config({**BASE, "HOLDFAST_ORDERS_QUEUE_PREFIX": "bad.prefix"})


def test_rebalancing_settings_default_and_parse() -> None:
    """Cool-down 60 s, 10 at once when draining, 1,000 connects/s fleet-wide; 0 is no limit."""
    cfg = load_config(BASE)
    assert (cfg.cooldown_ms, cfg.drain_at_once, cfg.connect_rate, cfg.connect_burst) == (
        60_000, 10, 1000.0, 1000.0)
    cfg = load_config({**BASE, "HOLDFAST_CONNECT_RATE": "0",
                       "HOLDFAST_REBALANCE_COOLDOWN_SECONDS": "2.5"})
    assert cfg.connect_rate == 0 and cfg.cooldown_ms == 2_500


def test_defaults_are_the_schemas() -> None:
    """An environment with only the required variables gives the settings schema's defaults."""
    cfg = load_config(BASE)
    for value, setting, scale in [
        (cfg.checkpoint_ms, S.CHECKPOINT_SECONDS, 1000),
        (cfg.max_connections, S.MAX_CONNECTIONS, 1),
        (cfg.poll_s, S.POLL_SECONDS, 1), (cfg.pollers, S.POLLERS, 1),
        (cfg.health_port, S.HEALTH_PORT, 1), (cfg.retry_base_s, S.RETRY_BASE_SECONDS, 1),
        (cfg.reconnect_cap_s, S.RECONNECT_CAP_SECONDS, 1),
        (cfg.cooldown_ms, S.REBALANCE_COOLDOWN_SECONDS, 1000),
    ]:
        assert value == setting.read({}) * scale, setting.name
    assert (cfg.protocol, cfg.log_level, cfg.watchdog) == ("query", "INFO", True)


def test_log_level_is_read_in_any_case() -> None:
    """HOLDFAST_LOG_LEVEL=debug is DEBUG (one case-folding reader); LOG_LEVEL is the fallback."""
    assert load_config({**BASE, "HOLDFAST_LOG_LEVEL": "debug"}).log_level == "DEBUG"
    assert load_config({**BASE, "LOG_LEVEL": "warning"}).log_level == "WARNING"
    with pytest.raises(ConfigError, match="HOLDFAST_LOG_LEVEL='LOUD' must be one of DEBUG"):
        load_config({**BASE, "HOLDFAST_LOG_LEVEL": "loud"})


def test_the_worker_command_says_how_it_is_configured() -> None:
    """``python -m holdfast.worker --help``: usage and where its settings come from, exit 0
    (it was "configuration error: HOLDFAST_TABLE is not set", exit 2); an unknown option: 2."""
    from holdfast.worker.__main__ import main

    assert main({}, argv=["--help"]) == 0
    assert main({}, argv=["--port"]) == 2
